"""The bound on how long one congested subscriber may hold its publishers back (`queue.max_stall`).

Backpressure (docs/broker.md, "Overload") stops reading the publishers of a subscriber whose queue is full until
it drained to half. A subscriber that never reads would so stop every publisher of its topics, and with them
every other subscriber, for as long as it stays connected. `StallBound` watches the sessions that publishers
wait for (here or on other nodes); once one has held them `max_stall` seconds, `due` hands it back and the broker
applies `queue.overflow` to it alone: it lets its publishers go and loses messages itself (or is disconnected).

Pure: the broker tells it which sessions became congested and what time it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from vmqpy.broker.core.session import Session

__all__ = ["OVERFLOW_POLICIES", "StallBound"]

#: queue.overflow: what becomes of a subscriber that held its publishers back for queue.max_stall seconds
OVERFLOW_POLICIES = ("queue", "drop", "disconnect")


class StallBound:
    """The congested sessions being watched, and when each started to hold publishers back."""

    def __init__(self, max_stall: float) -> None:
        self.max_stall = max_stall  # seconds; 0: no bound (publishers wait for as long as the subscriber does)
        self._watched: dict[int, Session] = {}

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, sessions: Iterable[Session], now: float) -> None:
        """These sessions are congested: the clock of each starts now unless it runs already."""
        if not self.max_stall:
            return
        for session in sessions:
            if session.stalled_since is None:
                session.stalled_since = now
            self._watched[id(session)] = session

    def due(self, now: float) -> list[Session]:
        """The sessions that have held publishers back for `max_stall` seconds (they leave the watch); those that
        drained, or hold nobody back any more, leave it too."""
        if not self._watched:
            return []
        due: list[Session] = []
        for key, session in list(self._watched.items()):
            since = session.stalled_since
            if since is None or session.sink is None or not (session.holding or session.congested):
                session.stalled_since = None
                del self._watched[key]
            elif now - since >= self.max_stall:
                del self._watched[key]
                due.append(session)
        return due
