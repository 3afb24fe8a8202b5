"""vmqpy.heap_trim: on this machine's glibc, `trim()` hands freed memory back to the system. A child process
fills 80 MB in 4 KB objects, frees all but every fiftieth (holes the allocator keeps for reuse: RSS stays up),
then trims: its RSS falls back near where it started. And where the C library has no `malloc_trim`, `trim`
says False and does nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vmqpy import heap_trim

CHILD = """
import sys
from pathlib import Path
from vmqpy import heap_trim

def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")

start = rss()
blocks = [bytes(4000) + i.to_bytes(4, "big") for i in range(20000)]
kept = blocks[::50]
del blocks
held = rss()
heap_trim.trim()
print(start, held, rss())
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists() or heap_trim._MALLOC_TRIM is None,
                    reason="needs Linux's /proc and glibc's malloc_trim")
def test_trim_hands_the_freed_memory_back() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    start, held, trimmed = map(int, done.stdout.split())
    assert held - start > 40_000, (start, held, trimmed)  # the holes: still counted before the trim
    assert trimmed - start < (held - start) / 4, (start, held, trimmed)


def test_without_malloc_trim_trim_says_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_trim, "_MALLOC_TRIM", None)
    assert heap_trim.trim() is False
