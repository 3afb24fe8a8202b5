"""Collect the garbage that refused admin requests leave, young and old, at a bounded cost.

A refused request can leave a reference cycle that aiohttp makes, not us: its parser's error held by a frame of
`data_received` whose locals hold the error again, with the bytes read; its router's 404/405 route and exception;
a connection's protocol, transport and buffers once the connection closes. Such a cycle holds the request's
buffers (a 16 KB query, a 10 KB header, a read of 64 KiB) until the collector runs, and on a node whose MQTT side
is quiet it does not run for thousands of admin requests: the node collects its youngest generation after 50,000
net allocations (`vmqpy.node.tune_garbage_collector`), and an admin request allocates few tracked objects and
large untracked buffers. 12,000 `bench.fuzz_admin` requests took such a node from 66 to 307 MiB (docs/security.md).

Two collections answer it:
* every `COLLECT_EVERY` refusals, the two younger generations (at most the 50,000 objects of the youngest and what
  survived one collection: cheap), which keeps the peak of a burst down;
* `FULL_AFTER` seconds after a refusal, if none is pending, one full collection, run by the event loop outside any
  request (measured: with 5 s instead of 1 s, RSS still settled, but 30 MiB higher). Collecting the young
  generation alone was not enough: a cycle still alive at a collection (a request in
  flight, a keep-alive connection) moves to an older generation, which the node collects far more rarely, and
  there it stayed: RSS grew ~6 KiB a request for ever (docs/security.md). A full collection walks only what the node
  built since its last freeze (`gc.freeze` at start and after bulk loads), and runs at most once per `FULL_AFTER`
  seconds however many requests are refused, so an attacker cannot make it cost more than that.

After the full collection, `trim_heap` hands what it freed back to the system: glibc's `malloc_trim(0)`, bound here
as vmqpy.heap_trim binds it for the node (admin imports nothing of vmqpy; docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
from collections.abc import Callable

COLLECT_EVERY = 100  # refused requests between two collections of the two younger generations
FULL_AFTER = 1.0  # seconds from a refusal to the full collection it schedules (at most one pending)

Schedule = Callable[[float, Callable[[], None]], object]


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None  # not glibc (musl, macOS): nothing to hand back this way
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim_function: Callable[[int], int] = function
    return trim_function


_MALLOC_TRIM = _malloc_trim()


def trim_heap() -> bool:
    """Hand the C allocator's free memory back to the system; False where the C library cannot."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def _call_later(delay: float, callback: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_later(delay, callback)


class YoungGarbage:
    """Counts refused requests; `refused()` runs `collect(1)` once every `every` of them, and schedules one full
    `collect(2)`, followed by `trim()` (`trim_heap`), `full_after` seconds later unless one is pending."""

    def __init__(self, every: int = COLLECT_EVERY, collect: Callable[[int], int] = gc.collect,
                 full_after: float = FULL_AFTER, schedule: Schedule = _call_later,
                 trim: Callable[[], bool] = trim_heap) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every!r}")
        if full_after <= 0:
            raise ValueError(f"full_after must be positive, not {full_after!r}")
        self.every = every
        self.collect = collect
        self.full_after = full_after
        self.schedule = schedule
        self.trim = trim
        self.pending = 0
        self.collections = 0
        self.full_collections = 0
        self.full_pending = False

    def refused(self) -> None:
        self.pending += 1
        if self.pending >= self.every:
            self.pending = 0
            self.collections += 1
            self.collect(1)
        if not self.full_pending:
            self.full_pending = True
            self.schedule(self.full_after, self._collect_all)

    def _collect_all(self) -> None:
        self.full_pending = False
        self.full_collections += 1
        self.collect(2)
        self.trim()  # what the collection freed goes back to the system, not only to the allocator
