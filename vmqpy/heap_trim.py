"""Give the C allocator's free memory back to the system: glibc's `malloc_trim(0)`, where the C library has it.

Python frees its objects into the allocators, and glibc keeps what was freed for reuse: after a burst (a flood of
refused admin requests, a storm of clients that left) the node's RSS stays at the burst's high-water mark
although the memory is free. `malloc_trim` hands the free pages back (docs/security.md, docs/performance.md).
It walks the heap, so it is called after a burst, not per request. Where the C library is not glibc (musl,
macOS), `trim` does nothing and says so (False).
"""

from __future__ import annotations

import functools
import gc
import sys
import time
from collections.abc import Callable


@functools.cache
def _load() -> Callable[[int], int] | None:
    """`malloc_trim` from the C library the process already has (the program's own symbols: no search for
    libc, which `ctypes.util.find_library` makes with `ldconfig` and `tempfile`). Loaded by the first trim: an
    empty node does not carry ctypes (about 0.4 MiB) and the search (about 1 MiB) in its RSS."""
    import ctypes

    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim_function: Callable[[int], int] = function
    return trim_function


def trim() -> bool:
    """Hand the allocator's free memory back to the system; False where that is not possible here."""
    function = _load()
    if function is None:
        return False
    function(0)
    return True


COLLECT_MAX_BLOCKS = 600_000  # heap size (pymalloc blocks in use) up to which a trim starts with a full collection


def collect_and_trim(max_blocks: int = COLLECT_MAX_BLOCKS) -> bool:
    """A full collection, then `trim`. The collection matters: it empties the interpreter's free lists (tuples,
    lists, dicts, floats kept for reuse), whose blocks are spread over the allocator's arenas and keep them
    from being handed back; after a storm of 10,000 clean clients it took the RSS left behind from 1.33-1.36x
    to 1.19-1.21x of before (docs/performance.md). Only a full collection empties them (a collection of the
    younger generations left 1.34-1.37x), and it walks every object the node built since its last `gc.freeze`:
    about 150 ns each, so 1.2 s on a node holding 10,000 offline sessions with 100,000 subscriptions, a stall
    its peers would take for a netsplit. So the collection is made only while the heap holds at most
    `max_blocks` blocks (`sys.getallocatedblocks`, a count that costs about 0.2 ms): a collection of at most
    about 90 ms. A larger node gets the trim alone."""
    if sys.getallocatedblocks() <= max_blocks:
        gc.collect()
    return trim()


TRIM_AFTER_CLOSES = 1000  # connections closed since the last trim that make a burst worth a trim
TRIM_BUDGET = 0.01  # at most this share of the node's time goes to trims, however the bursts come


class BurstTrim:
    """Trims the heap once a burst of closed connections is over (a fleet that left, a flood of sockets the node
    closed): `tick(closed_total)`, called with the node's count of closed sockets at each of its ticks, trims
    when at least `after` sockets closed since the last trim and none since the previous tick. Each connection
    leaves its buffers, its session and its objects to the allocator; without a trim the RSS stays at the
    fleet's high-water mark (docs/performance.md, "Memory handed back after a storm").

    A trim (by default a full collection and `malloc_trim`) walks the heap, so its cost grows with what the node
    holds: after each one the next waits `duration / budget` (a trim of 50 ms: 5 s at the 1 % budget), so
    bursts that an attacker times cannot make trims take more than `budget` of the node's time; a burst that
    ends within the wait is trimmed at the first quiet tick after it."""

    def __init__(self, after: int = TRIM_AFTER_CLOSES, trim: Callable[[], bool] = collect_and_trim,
                 budget: float = TRIM_BUDGET, clock: Callable[[], float] = time.monotonic) -> None:
        if after < 1:
            raise ValueError(f"after must be at least 1, not {after!r}")
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be in (0, 1], not {budget!r}")
        self.after = after
        self.trim = trim
        self.budget = budget
        self.clock = clock
        self._seen: int | None = None
        self._since_trim = 0
        self._not_before = float("-inf")
        self.trims = 0

    def tick(self, closed_total: int) -> bool:
        """True when it trimmed now."""
        new = 0 if self._seen is None else max(closed_total - self._seen, 0)
        self._seen = closed_total
        self._since_trim += new
        if new or self._since_trim < self.after or self.clock() < self._not_before:
            return False
        self._since_trim = 0
        self.trims += 1
        started = self.clock()
        self.trim()
        ended = self.clock()
        self._not_before = ended + (ended - started) / self.budget
        return True
