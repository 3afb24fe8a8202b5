"""Give the C allocator's free memory back to the system: glibc's `malloc_trim(0)`, where the C library has it.

Python frees its objects into the allocators, and glibc keeps what was freed for reuse: after a burst (a flood of
refused admin requests, a storm of clients that left) the node's RSS stays at the burst's high-water mark
although the memory is free. `malloc_trim` hands the free pages back (docs/security.md, docs/performance.md).
It walks the heap, so it is called after a burst, not per request. Where the C library is not glibc (musl,
macOS), `trim` does nothing and says so (False).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


def _load() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        function = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim_function: Callable[[int], int] = function
    return trim_function


_MALLOC_TRIM = _load()


def trim() -> bool:
    """Hand the allocator's free memory back to the system; False where that is not possible here."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


TRIM_AFTER_CLOSES = 1000  # connections closed since the last trim that make a burst worth a trim


class BurstTrim:
    """Trims the heap once a burst of closed connections is over (a fleet that left, a flood of sockets the node
    closed): `tick(closed_total)`, called with the node's count of closed sockets at each of its ticks, trims
    when at least `after` sockets closed since the last trim and none since the previous tick. Each connection
    leaves its buffers, its session and its objects to the allocator; without a trim the RSS stays at the
    fleet's high-water mark (docs/performance.md, "Memory handed back after a storm")."""

    def __init__(self, after: int = TRIM_AFTER_CLOSES, trim: Callable[[], bool] = trim) -> None:
        if after < 1:
            raise ValueError(f"after must be at least 1, not {after!r}")
        self.after = after
        self.trim = trim
        self._seen: int | None = None
        self._since_trim = 0
        self.trims = 0

    def tick(self, closed_total: int) -> bool:
        """True when it trimmed now."""
        new = 0 if self._seen is None else max(closed_total - self._seen, 0)
        self._seen = closed_total
        self._since_trim += new
        if new or self._since_trim < self.after:
            return False
        self._since_trim = 0
        self.trims += 1
        self.trim()
        return True
