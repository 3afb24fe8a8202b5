"""How much of one client's work the node does in one turn of its event loop, and in what order.

A node is one event loop: while one client's packets are handled, every other client, timer and cluster link
waits. What one read brings can be a lot of work: uvloop reads up to 256 KiB at once, 13,000 small PUBLISH
packets (about 0.2 s) or SUBSCRIBE packets of 256 filters each, a metadata write per filter (tens of
milliseconds per packet). Three parts keep a turn short and the light clients first:

* `TURN_BUDGET`: a connection stops dispatching the packets it has read once it has spent this long in a turn
  (the packet in hand always completes); the rest of what it sent waits in the bulk lane. A client that sends
  a packet now and then never reaches it. Its socket is read on only while it holds less than
  `YIELDED_READ_LIMIT` bytes not dispatched (vmqpy.broker.driver.connection).
* `BulkLane`: the work deferred that way, and the slices of bulk work one packet brings (the filters of a large
  SUBSCRIBE or UNSUBSCRIBE, the retained messages they match, the subscriptions of an ended session), wait in
  one queue of the node. Each loop turn runs its steps in turn, round robin, until `LANE_BUDGET` seconds have
  gone in all (a step started runs to its end: a slice is sized to the budget, a yielded client's step takes up
  to `TURN_BUDGET`); what is left waits for the next turn. So however many clients flood the node at once, a
  turn spends about a fifth of a millisecond on bulk slices, or one yielded client's `TURN_BUDGET`, and the
  packets of the other clients are read and answered in every turn. A yielded client gets one `TURN_BUDGET` a
  turn in all: what it sends while the lane dispatches its backlog waits for the lane's next turn
  (vmqpy.broker.driver.connection `_next_turn`).
* `SlicePace`: a bulk job's slices are sized so that each takes about `LANE_BUDGET`, learnt from the time per
  item of the slices before (vmqpy.broker.driver.subscribe_slices, vmqpy.broker.core.sweeper).

Before: a fixed count of 256 filters a slice made turns of 14 to 30 ms on a loaded two-core machine, and one
read of 2,000 retained rewrites held the loop 0.2 to 0.3 s; the well-behaved client of
tests/integration/test_hostile_clients.py waited up to 60 ms and 0.3 s for its round trips. With 0.5 ms of
lane a turn (before the fifth session) that client's median round trip, per second of the whole attack, reached
4-5 times its median before the attack; with 0.2 ms, 2.0-2.3 times (docs/security.md, "Fifth session").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import structlog

__all__ = ["LANE_BUDGET", "TURN_BUDGET", "TURN_YIELDED", "YIELDED_READ_LIMIT", "BulkLane", "SlicePace"]

log = structlog.get_logger("vmqpy.turn_budget")

TURN_BUDGET = 0.002  # seconds of one client's packets in a turn before the rest waits in the lane
LANE_BUDGET = 0.0002  # seconds of the bulk lane's steps, in all, in one loop turn
YIELDED_READ_LIMIT = 64 * 1024  # bytes a client waiting in the lane may have read and not dispatched
TURN_YIELDED = "connection_turn_yielded"  # the counter of turns a connection gave up for the next one


class SlicePace:
    """The size of the next slice of one bulk job: as many items as fit in `budget` seconds at the time per item
    measured so far (between 1 and `most`; `first` before anything was measured)."""

    __slots__ = ("_clock", "_per_item", "_started", "budget", "first", "most")

    def __init__(self, most: int, budget: float = LANE_BUDGET, first: int = 16,
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


Schedule = Callable[[Callable[[], None]], object]


class BulkLane:
    """The node's queue of deferred work: steps run round robin, at most `budget` seconds of them a loop turn
    (each step started runs to its end; it adds itself again when it has more). Without `schedule` (a broker
    outside a node: unit tests) each step is scheduled on its own, as `add`'s `fallback` says."""

    __slots__ = ("_armed", "_clock", "_steps", "budget", "schedule")

    def __init__(self, budget: float = LANE_BUDGET, clock: Callable[[], float] = time.perf_counter) -> None:
        self.budget = budget
        self._clock = clock
        self._steps: deque[Callable[[], None]] = deque()
        self._armed = False
        self.schedule: Schedule | None = None  # the node sets `loop.call_soon`

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: Callable[[], None], fallback: Schedule) -> None:
        """Run `step` in a later turn, after the steps waiting already."""
        if self.schedule is None:
            fallback(step)
            return
        self._steps.append(step)
        if not self._armed:
            self._armed = True
            self.schedule(self.run)

    def run(self) -> None:
        """One turn's share: the steps waiting, in order, until the budget is gone (a loop callback)."""
        self._armed = False
        steps = self._steps
        until = self._clock() + self.budget
        for _ in range(len(steps)):  # the steps added meanwhile wait for the next turn
            step = steps.popleft()
            try:
                step()
            except Exception:
                log.exception("bulk lane step failed", step=repr(step))
            if self._clock() > until:
                break
        if steps and not self._armed and self.schedule is not None:
            self._armed = True
            self.schedule(self.run)
