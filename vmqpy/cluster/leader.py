"""The registration leader of a client id: rendezvous (highest random weight) hashing over the members.

Every node computes the same leader from the same membership, without talking to anyone. The choice depends on
the members only, not on who is reachable right now, so it does not flap with reachability; when a member
leaves, only the client ids it led move (each to the member with the next highest weight).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(member: str, client_id: str) -> int:
    """A stable pseudo-random weight of (member, client id): the same on every node and in every process."""
    digest = hashlib.blake2b(f"{member}\0{client_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def leader_for(client_id: str, members: Iterable[str]) -> str:
    """The member that serialises the registrations of `client_id`; ValueError when there are no members."""
    best: str | None = None
    best_weight = -1
    for member in members:
        w = weight(member, client_id)
        if w > best_weight or (w == best_weight and best is not None and member < best):
            best, best_weight = member, w
    if best is None:
        raise ValueError("no members to choose a leader from")
    return best


def ranking(client_id: str, members: Iterable[str]) -> list[str]:
    """Members by decreasing weight for `client_id`: the leader first, then who takes over when it leaves."""
    return sorted(members, key=lambda m: (-weight(m, client_id), m))


__all__ = ["leader_for", "ranking", "weight"]
