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
