"""The subscriptions of sessions that ended, undone a slice a loop turn.

Ending a session removes each of its subscriptions: a metadata delete and a routing change, about a tenth of a
millisecond each. A clean session holding 65,535 subscriptions that ends (its client leaves, it expires, an
operator ends it) was seconds of work in one loop turn, every other client and cluster link of the node waiting.
`Broker.discard` hands the subscriptions of a session holding more than `AT_ONCE` of them to the sweeper instead,
and the session is gone at once (nothing is delivered to it any more: the router finds no session of that client
id). The sweeper removes a slice of them a loop turn, oldest first, each slice sized to take about the turn's
budget of the node's bulk lane, which runs it (vmqpy.broker.core.turn_budget: 0.2 ms, at most `SLICE`).

While a client id has subscriptions waiting here:
* a CONNECT of that client id waits until they are gone (`when_clear`; vmqpy.broker.driver.connect_flow), so a new
  session never receives what the old one subscribed to;
* a clean start that replaces a session of that client id does not wait: the new session is made at once, and
  the router delivers nothing through the old session's routes while they wait (vmqpy.broker.core.router, `_stale`:
  a route of a client id with subscriptions waiting delivers only when its session holds that very entry);
* a session of that client id made here otherwise (handed over by another node, adopted offline) first has them
  removed at once (`flush`), as before;
* a node that stops removes what is still waiting before its metadata store closes (`drain`);
* a subscription is only removed when no session here holds that filter again and its record still names this
  node (`Broker`'s remover decides): another node's newer record of the key is not touched.

Without a scheduler (`schedule` None: a broker outside an event loop, the unit tests) everything is removed at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from vmqpy.broker.core.turn_budget import SlicePace

__all__ = ["AT_ONCE", "SLICE", "SubscriptionSweeper"]

SLICE = 256  # subscriptions removed per loop turn at the most (fewer when they take longer than the turn's budget)
AT_ONCE = 16  # a session ending with at most this many has them removed at once (as
# vmqpy.broker.driver.subscribe_slices)


class SubscriptionSweeper:
    """Subscriptions of ended sessions, by client id, removed a slice a turn through `remove(client_id, filter)`."""

    __slots__ = ("_order", "_pace", "_pending", "_remove", "_scheduled", "_waiters", "removed", "schedule")

    def __init__(self, remove: Callable[[str, str], None], pace: SlicePace | None = None) -> None:
        self._remove = remove
        self.schedule: Callable[[Callable[[], None]], object] | None = None  # the node sets `loop.call_soon`
        self._pending: dict[str, list[str]] = {}
        self._order: deque[str] = deque()  # client ids, in the order their subscriptions came
        self._waiters: dict[str, list[Callable[[], None]]] = {}
        self._scheduled = False
        self._pace = pace or SlicePace(SLICE)  # slices sized to the turn's budget (vmqpy.broker.core.turn_budget)
        self.removed = 0  # subscriptions removed by slices (not at once)

    def __len__(self) -> int:
        """Subscriptions waiting."""
        return sum(len(filters) for filters in self._pending.values())

    def add(self, client_id: str, filters: list[str]) -> None:
        """Remove these subscriptions of an ended session of `client_id`: at once when they fit in one slice or
        nothing schedules slices, else a slice a turn."""
        if not filters:  # most sessions end with none: nothing to remove, nothing to wait for
            return
        if self.schedule is None or (len(filters) <= AT_ONCE and client_id not in self._pending):
            for topic_filter in filters:
                self._remove(client_id, topic_filter)
            return
        waiting = self._pending.get(client_id)
        if waiting is None:
            self._pending[client_id] = list(reversed(filters))  # popped from the end: oldest first
            self._order.append(client_id)
        else:
            waiting[:0] = reversed(filters)
        self._arm()

    @property
    def waiting(self) -> Mapping[str, object]:
        """The client ids with subscriptions waiting (a live view: the router checks their routes)."""
        return self._pending

    def pending(self, client_id: str) -> bool:
        """Whether subscriptions of `client_id` are waiting."""
        return client_id in self._pending

    def when_clear(self, client_id: str, callback: Callable[[], None]) -> None:
        """Call `callback` once no subscription of `client_id` waits (at once when none does)."""
        if client_id not in self._pending:
            callback()
            return
        self._waiters.setdefault(client_id, []).append(callback)

    def flush(self, client_id: str) -> None:
        """Remove the waiting subscriptions of `client_id` now (a session of that client id is being made)."""
        if not self._pending:  # the usual case: nothing waits
            return
        filters = self._pending.pop(client_id, None)
        if filters is None:
            return
        try:
            self._order.remove(client_id)
        except ValueError:
            pass
        while filters:
            self._remove(client_id, filters.pop())
        self._cleared(client_id)

    def drain(self) -> None:
        """Remove every waiting subscription now, oldest first: the node is stopping (its listeners are closed),
        and a slice left for a later turn would find the metadata store closed; its peers would keep routing the
        filters to it until it came back."""
        while self._order:
            self.flush(self._order[0])

    def step(self) -> None:
        """One slice (a loop callback)."""
        self._scheduled = False
        size = budget = self._pace.start()
        while budget and self._order:
            client_id = self._order[0]
            filters = self._pending[client_id]
            while budget and filters:
                self._remove(client_id, filters.pop())
                self.removed += 1
                budget -= 1
            if not filters:
                del self._pending[client_id]
                self._order.popleft()
                self._cleared(client_id)
        self._pace.done(size - budget)
        if self._order:
            self._arm()

    def _arm(self) -> None:
        if not self._scheduled and self.schedule is not None:
            self._scheduled = True
            self.schedule(self.step)

    def _cleared(self, client_id: str) -> None:
        for callback in self._waiters.pop(client_id, ()):
            callback()
