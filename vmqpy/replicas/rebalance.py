"""What the rebalancer does with one session, and how many sessions it looks at per second (pure).

After a membership change (a member joined, left, or came back as a new incarnation with an empty disk) the
replica nodes of a session (placement.py) may have changed: the new ones get the whole state of the session
(a `sync`), and only once every one of them acknowledged it are the nodes that are no longer replica nodes told
to drop their copy, so a session never has fewer copies than before while its copies move. After this node
starts, every replica node of every session gets a sync (`fresh`): what the replicas had not acknowledged
before the restart is lost with the restart (a `del` among it would make a failover deliver a message twice).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

__all__ = ["RebalancePlan", "Walk", "plan"]


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """For one session: the nodes to fill (`sync`), then, once they acknowledged, the nodes to empty (`drop`)."""

    sync: tuple[str, ...]
    drop: tuple[str, ...]


def plan(targets: Sequence[str], holders: Collection[str], fresh: bool) -> RebalancePlan:
    """`targets`: the session's replica nodes now; `holders`: the nodes that hold a complete copy of it;
    `fresh`: none is known to be complete (this node started since), so every target gets a sync."""
    sync = tuple(targets) if fresh else tuple(n for n in targets if n not in holders)
    return RebalancePlan(sync, tuple(n for n in holders if n not in targets))


class Walk:
    """The client ids a rebalance still has to look at, taken at `rate` per second (a token bucket that holds
    at most `burst` seconds' worth)."""

    def __init__(self, rate: float, burst: float = 0.2) -> None:
        if rate <= 0:
            raise ValueError("the rebalance rate is a positive number of sessions per second")
        self.rate = rate
        self._cap = max(1.0, rate * burst)
        self._tokens = 0.0
        self._at: float | None = None
        self._left: deque[str] = deque()
        self._queued: set[str] = set()

    def restart(self, client_ids: Iterable[str]) -> None:
        """Look at these client ids (again), in this order, after those still waiting."""
        for client_id in client_ids:
            if client_id not in self._queued:
                self._queued.add(client_id)
                self._left.append(client_id)

    def take(self, now: float, most: int | None = None) -> list[str]:
        """The client ids to look at now (at most `most`): as many as the time since the last take allows."""
        if self._at is not None:
            self._tokens = min(self._cap, self._tokens + self.rate * max(0.0, now - self._at))
        else:
            self._tokens = self._cap
        self._at = now
        allowed = len(self._left) if self._tokens == math.inf else int(self._tokens)  # rate inf: no limit
        count = min(allowed, len(self._left), len(self._left) if most is None else max(0, most))
        self._tokens -= count
        out = [self._left.popleft() for _ in range(count)]
        self._queued.difference_update(out)
        return out

    def waiting(self) -> list[str]:
        """The client ids not looked at yet."""
        return list(self._left)

    def __len__(self) -> int:
        return len(self._left)
