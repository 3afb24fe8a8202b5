"""Which offline sessions have expired: a scan that looks at a bounded number of sessions per tick.

The node ticks 10 times a second (vmqpy.node). Looking at every session on every tick cost a node with 100,000
offline sessions and no traffic 36 % of a core (docs/performance.md, "Cost curves"). `ExpiryScan` goes through a
snapshot of the client ids, at most `per_tick` of them per tick, and takes a new snapshot once through: a node
with up to `per_tick` sessions checks each on every tick as before; a larger one checks each at least every
len(sessions) / per_tick ticks (100,000 sessions: every 5 s), so an expiry may end up to that much late.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from vmqpy.broker.core.session import Session

__all__ = ["PER_TICK", "ExpiryScan"]

PER_TICK = 2000


class ExpiryScan:
    """The expired offline sessions of `sessions`, a bounded slice per call of `due`."""

    def __init__(self, sessions: Mapping[str, Session], per_tick: int = PER_TICK) -> None:
        self._sessions = sessions
        self._per_tick = per_tick
        self._pending: list[str] = []

    def due(self, now: float) -> Iterator[Session]:
        """The sessions of this tick's slice that are offline and past their expiry (safe to discard while
        iterating: the slice is a snapshot of client ids)."""
        if not self._pending:
            self._pending = list(self._sessions)
            self._pending.reverse()  # popped from the end: the oldest sessions first
        pending, sessions = self._pending, self._sessions
        for _ in range(min(self._per_tick, len(pending))):
            session = sessions.get(pending.pop())
            if session is None or session.online or session.disconnected_at is None:
                continue
            if session.expiry_interval is not None and session.disconnected_at + session.expiry_interval <= now:
                yield session
