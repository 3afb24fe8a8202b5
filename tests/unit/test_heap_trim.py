"""vmqpy.heap_trim: on this machine's glibc, `trim()` hands freed memory back to the system. A child process
fills 80 MB in 4 KB objects, frees all but every fiftieth (holes the allocator keeps for reuse: RSS stays up),
then trims: its RSS falls back near where it started. And where the C library has no `malloc_trim`, `trim`
says False and does nothing. `BurstTrim` trims once a burst of closed connections is over (a table and a
property)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize(("after", "totals", "trimmed_at"), [
    (3, [0, 0, 0], []),  # nothing closed
    (3, [0, 1, 2, 3, 3], [4]),  # three closed one by one: the tick after the last one trims
    (3, [0, 5, 5, 5], [2]),  # once only
    (3, [0, 2, 2, 3, 3], [4]),  # 2, a pause, 1 more: three since the last trim
    (3, [0, 3, 6, 9, 9, 12, 12], [4, 6]),  # a burst, then another
    (1, [10, 10], []),  # the first tick only learns the count
])
def test_a_burst_of_closes_is_trimmed_after_when_it_is_over(after: int, totals: list[int],
                                                           trimmed_at: list[int]) -> None:
    trims: list[int] = []

    def trim() -> bool:
        trims.append(len(trims))
        return True

    burst = heap_trim.BurstTrim(after, trim)
    at = [i for i, total in enumerate(totals) if burst.tick(total)]
    assert at == trimmed_at and burst.trims == len(trims) == len(trimmed_at)


@given(st.integers(1, 50), st.lists(st.integers(0, 40), max_size=60))
def test_never_two_trims_without_after_closes_between_and_never_during_a_burst(after: int,
                                                                               steps: list[int]) -> None:
    burst = heap_trim.BurstTrim(after, lambda: True)
    total, since = 0, 0
    burst.tick(total)
    for step in steps:
        total += step
        since += step
        if burst.tick(total):
            assert step == 0 and since >= after
            since = 0


@pytest.mark.parametrize("after", [0, -1])
def test_after_below_one_is_a_usage_error(after: int) -> None:
    with pytest.raises(ValueError, match="after must be at least 1"):
        heap_trim.BurstTrim(after)
