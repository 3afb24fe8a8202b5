"""How much of one client's work the node does in one turn of its event loop.

A node is one event loop: while one client's packets are handled, every other client, timer and cluster link
waits. What one read brings can be a lot of work: uvloop reads up to 256 KiB at once, 13,000 small PUBLISH
packets (about 0.2 s) or SUBSCRIBE packets of 256 filters each, a metadata write per filter (tens of
milliseconds per packet). Two bounds keep a turn short:

* `TURN_BUDGET`: a connection stops dispatching the packets it has read once it has spent this long in a turn;
  reading pauses and the rest of what it sent is dispatched on the next turn, after the other clients
  (`MQTTConnection._process`). Only a client with that much queued work is affected; the packet in hand
  always completes.
* `SlicePace`: bulk work that one packet brings (the filters of a large SUBSCRIBE or UNSUBSCRIBE, the retained
  messages they match, the subscriptions of an ended session) is cut into slices sized so that each takes
  about `TURN_BUDGET`, learnt from the time per item of the slices before (vmqpy.broker.subscribe_slices,
  vmqpy.broker.sweeper).

A fixed count of 256 filters a slice made turns of 14 to 30 ms on a loaded two-core machine, and the
well-behaved client of tests/integration/test_hostile_clients.py waited about 60 ms a round trip behind them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TURN_BUDGET", "TURN_YIELDED", "SlicePace"]

TURN_BUDGET = 0.002  # seconds of one client's work in one loop turn
TURN_YIELDED = "connection_turn_yielded"  # the counter of turns a connection gave up for the next one


class SlicePace:
    """The size of the next slice of one bulk job: as many items as fit in `budget` seconds at the time per item
    measured so far (between 1 and `most`; `first` before anything was measured)."""

    __slots__ = ("_clock", "_per_item", "_started", "budget", "first", "most")

    def __init__(self, most: int, budget: float = TURN_BUDGET, first: int = 16,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if most < 1 or first < 1 or not budget > 0:
            raise ValueError("most and first must be at least 1 and budget positive")
        self.most = most
        self.budget = budget
        self.first = min(first, most)
        self._clock = clock
        self._per_item: float | None = None  # seconds per item, smoothed over the slices done
        self._started = 0.0

    def start(self) -> int:
        """A slice starts now: how many items it takes."""
        self._started = self._clock()
        per_item = self._per_item
        if per_item is None:
            return self.first
        if per_item <= 0:
            return self.most
        return max(1, min(self.most, int(self.budget / per_item)))

    def done(self, items: int) -> None:
        """The slice started last took `items` items (the time since `start` is what they cost)."""
        if items <= 0:
            return
        per_item = (self._clock() - self._started) / items
        previous = self._per_item
        self._per_item = per_item if previous is None else (previous + per_item) / 2
