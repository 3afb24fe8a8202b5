"""The keep-alive checks of every MQTT connection of a node, on one event-loop timer (issue 21, "Memory").

A libuv timer per connection (asyncio's TimerHandle, uvloop's UVTimer, the bound method and the context copy it
holds) cost about 570 bytes per idle connection. Here a connection waiting for its next check is one entry in the
set of its *bucket*: the checks due within the same GRAIN seconds share a set, the buckets are kept in a heap by
their number, and one loop timer is armed for the earliest bucket. A check due at `at` runs once the loop's clock
has reached `at`, and at most GRAIN seconds later (plus the loop's own lateness): never early, so a client silent
for less than 1.5 times its keep alive is never closed (vmqpy.broker.machine.negotiation.keepalive_expired decides, at
the
time of the check).

`Buckets` is the pure part (times are arguments); `KeepAlives` arms the one timer of a loop. A connection knows the
set it is in (`Watched.keepalive_bucket`), so taking it out when its socket goes is a set discard, and a connection
that is gone is referenced by no bucket. A bucket emptied that way is dropped at once, and the heap of bucket numbers
is rebuilt when the numbers of dropped buckets outnumber the live ones: what the wheel holds is bounded by the live
connections, not by the clients that came and went within 1.5 keep alives (up to 65,535 s x 1.5 at one bucket per
0.1 s, a million empty sets, had they stayed until due).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from vmqpy.broker.machine.negotiation import keepalive_check_after, keepalive_expired

if TYPE_CHECKING:
    from vmqpy.broker.driver.connection import MQTTConnection

log = structlog.get_logger("vmqpy.keepalive")

GRAIN = 0.1  # seconds: the width of a bucket, the most a check may run after its time


class Watched(Protocol):
    """What the wheel checks: a connection with a slot for the bucket it waits in."""

    keepalive_bucket: Bucket | None


Check = Callable[[Any, float], None]  # the check of an item taken out of its bucket at (or a grain after) its time


def bucket_of(at: float) -> int:
    """The number of the first bucket whose start is at or after `at`."""
    number = math.ceil(at / GRAIN)  # the division may round across an integer, either way: correct it
    if number * GRAIN < at:
        return number + 1
    return number - 1 if (number - 1) * GRAIN >= at else number


class Bucket(set[Watched]):
    """The items due within one GRAIN; it knows its number, so that emptying it can drop it."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number


STALE_SLACK = 64  # numbers of dropped buckets the heap may hold beyond the live ones before it is rebuilt


class Buckets:
    """Items by the bucket of the time they are due at; no clock of its own."""

    __slots__ = ("_by_number", "_numbers")

    def __init__(self) -> None:
        self._by_number: dict[int, Bucket] = {}
        self._numbers: list[int] = []  # a heap of the keys of `_by_number`, and of some dropped buckets' numbers

    def __len__(self) -> int:
        return sum(len(items) for items in self._by_number.values())

    def add(self, item: Watched, at: float) -> None:
        """`item` is due at `at` (out of any bucket it was in before)."""
        old = item.keepalive_bucket
        if old is not None:
            self._leave(old, item)
        number = bucket_of(at)
        items = self._by_number.get(number)
        if items is None:
            items = self._by_number[number] = Bucket(number)
            heapq.heappush(self._numbers, number)
        items.add(item)
        item.keepalive_bucket = items

    def discard(self, item: Watched) -> None:
        """`item` is due at no time any more."""
        items = item.keepalive_bucket
        if items is not None:
            self._leave(items, item)
            item.keepalive_bucket = None

    def _leave(self, items: Bucket, item: Watched) -> None:
        items.discard(item)
        if items or self._by_number.get(items.number) is not items:
            return
        del self._by_number[items.number]
        if len(self._numbers) > 2 * len(self._by_number) + STALE_SLACK:
            self._numbers = list(self._by_number)
            heapq.heapify(self._numbers)

    def next_due(self) -> float | None:
        """When the earliest bucket is due (None when there is none)."""
        numbers = self._numbers
        while numbers and numbers[0] not in self._by_number:
            heapq.heappop(numbers)
        return numbers[0] * GRAIN if numbers else None

    def pop_due(self, now: float) -> list[Watched]:
        """The items of every bucket due at `now`, out of their buckets, earliest bucket first."""
        due: list[Watched] = []
        numbers = self._numbers
        while numbers and numbers[0] * GRAIN <= now:
            items = self._by_number.pop(heapq.heappop(numbers), None)
            if items is None:  # dropped when it was emptied
                continue
            for item in items:
                item.keepalive_bucket = None
            due.extend(items)
        return due


class KeepAlives:
    """The buckets of one event loop, the one timer armed for the earliest of them, and what it does with an item
    whose time came (`check`: the connection's keep-alive check)."""

    __slots__ = ("_armed_at", "_timer", "buckets", "check")

    def __init__(self, check: Check) -> None:
        self.check = check
        self.buckets = Buckets()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def schedule(self, item: Watched, loop: asyncio.AbstractEventLoop, at: float) -> None:
        """Check `item` at loop time `at` (at most GRAIN seconds later)."""
        self.buckets.add(item, at)
        due = bucket_of(at) * GRAIN
        if due < self._armed_at:
            self._arm(loop, due)

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = due
        self._timer = loop.call_at(due, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self._armed_at = math.inf
        now = loop.time()
        check = self.check
        for item in self.buckets.pop_due(now):
            try:
                check(item, now)
            except Exception:  # one connection's failure must not leave the others of its bucket unchecked
                log.exception("keep-alive check failed")
        due = self.buckets.next_due()
        if due is not None and due < self._armed_at:  # a check above may have armed it already
            self._arm(loop, due)


_OF_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KeepAlives] = weakref.WeakKeyDictionary()


def of_loop(loop: asyncio.AbstractEventLoop) -> KeepAlives:
    """The keep-alive wheel of `loop` (made at its first use; it holds the loop only while its timer is armed)."""
    wheel = _OF_LOOP.get(loop)
    if wheel is None:
        wheel = _OF_LOOP[loop] = KeepAlives(check)
    return wheel


def check(conn: MQTTConnection, now: float) -> None:
    """Close `conn` when its client was silent for 1.5 times its keep alive (the machine's `keepalive_expired`:
    5.0 with DISCONNECT 0x8D), else have it checked again when that time would come. A client whose reading is
    paused (backpressure, its read gate) is not silent by its own doing: it counts as active."""
    if conn.closing:
        return
    paused = conn.gate.paused
    if keepalive_expired(conn.keep_alive, conn.last_received, now) and not paused:
        close = conn.machine.keepalive_expired()
        conn.log.info(close.why, keep_alive=conn.keep_alive)
        conn.end(close)
        return
    check_after = keepalive_check_after(conn.keep_alive, now - conn.last_received)
    if check_after is None:
        return
    if paused:
        conn.last_received = now
    of_loop(conn.loop).schedule(conn, conn.loop, now + check_after)
