"""Where the copies of a persistent session's queue live (pure).

The replicas of a client id's session are its owner (the node where the session lives) and the next R-1
members of the client id's registration ranking (vmqpy.cluster.leader.ranking, rendezvous hashing) that are not
the owner. With one member, or R = 1, nothing is replicated.
"""

from __future__ import annotations

from collections.abc import Iterable

from vmqpy.cluster.leader import ranking

__all__ = ["replica_nodes"]


def replica_nodes(client_id: str, owner: str, members: Iterable[str], replicas: int) -> list[str]:
    """The nodes other than `owner` that hold copies of `client_id`'s queue, in ranking order (R-1 at most)."""
    if replicas <= 1:
        return []
    others = [m for m in ranking(client_id, set(members)) if m != owner]
    return others[: replicas - 1]
