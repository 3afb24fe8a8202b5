"""vmqpy.heap_trim: on this machine's glibc, `trim()` hands freed memory back to the system. A child process
fills 80 MB in 4 KB objects, frees all but every fiftieth (holes the allocator keeps for reuse: RSS stays up),
then trims: its RSS falls back near where it started. And where the C library has no `malloc_trim`, `trim`
says False and does nothing. `BurstTrim` trims once a burst of closed connections is over (a table and a
property)."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.clocks import Clock
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


@pytest.mark.skipif(not Path("/proc/self/status").exists() or heap_trim._load() is None,
                    reason="needs Linux's /proc and glibc's malloc_trim")
def test_trim_hands_the_freed_memory_back() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    start, held, trimmed = map(int, done.stdout.split())
    assert held - start > 40_000, (start, held, trimmed)  # the holes: still counted before the trim
    assert trimmed - start < (held - start) / 4, (start, held, trimmed)


def test_without_malloc_trim_trim_says_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_trim, "_load", lambda: None)
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

    burst = heap_trim.BurstTrim(after, trim, clock=lambda: 0.0)
    at = [i for i, total in enumerate(totals) if burst.tick(total)]
    assert at == trimmed_at and burst.trims == len(trims) == len(trimmed_at)


@given(st.integers(1, 50), st.lists(st.integers(0, 40), max_size=60))
def test_never_two_trims_without_after_closes_between_and_never_during_a_burst(after: int,
                                                                               steps: list[int]) -> None:
    burst = heap_trim.BurstTrim(after, lambda: True, clock=lambda: 0.0)
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


@pytest.mark.parametrize("budget", [0.0, -0.5, 1.5])
def test_a_budget_outside_zero_to_one_is_a_usage_error(budget: float) -> None:
    with pytest.raises(ValueError, match="budget must be in"):
        heap_trim.BurstTrim(budget=budget)


@pytest.mark.parametrize(("cost", "budget", "totals", "trimmed_at"), [
    # a trim of 0.05 s at 1 %: the next waits 5 s (50 ticks); the second burst ends at tick 4, trimmed at tick 52
    (0.05, 0.01, [0, 3, 3, 6, 6] + [6] * 60, [2, 52]),
    # a free trim waits for nothing
    (0.0, 0.01, [0, 3, 3, 6, 6], [2, 4]),
    # closes during the wait keep counting and are trimmed together once the wait is over
    (0.05, 0.01, [0, 3, 3, 6, 6, 9, 9] + [9] * 60, [2, 52]),
    # a larger budget waits less: 0.05 / 0.5 = 0.1 s, one tick
    (0.05, 0.5, [0, 3, 3, 6, 6, 6], [2, 4]),
])
def test_trims_wait_for_their_budget(cost: float, budget: float, totals: list[int], trimmed_at: list[int]) -> None:
    clock = Clock()

    def trim() -> bool:
        clock.now += cost
        return True

    burst = heap_trim.BurstTrim(3, trim, budget=budget, clock=clock)
    at = []
    for i, total in enumerate(totals):
        clock.now = round(clock.now + 0.1, 9)
        if burst.tick(total):
            at.append(i)
    assert at == trimmed_at


@given(st.floats(0.0, 2.0), st.sampled_from([0.01, 0.1, 0.5]), st.lists(st.integers(0, 40), max_size=300))
def test_trims_never_take_more_than_their_budget_of_the_time(cost: float, budget: float,
                                                             steps: list[int]) -> None:
    clock = Clock()
    spent = 0.0

    def trim() -> bool:
        nonlocal spent
        clock.now += cost
        spent += cost
        return True

    burst = heap_trim.BurstTrim(1, trim, budget=budget, clock=clock)
    total = 0
    for step in steps:
        clock.now += 0.1
        total += step
        burst.tick(total)
    assert spent <= budget * clock.now + cost + 1e-9  # one trim may start the account


def test_collect_and_trim_collects_all_generations_first_on_a_small_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def collect(*generation: int) -> int:
        calls.append(f"collect{generation}")
        return 0

    def trim() -> bool:
        calls.append("trim")
        return True

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(heap_trim, "trim", trim)
    monkeypatch.setattr(sys, "getallocatedblocks", lambda: 1000)
    assert heap_trim.collect_and_trim(max_blocks=1000) is True
    assert calls == ["collect()", "trim"]
    calls.clear()  # a larger heap: its collection would stall the node, so the trim alone
    assert heap_trim.collect_and_trim(max_blocks=999) is True
    assert calls == ["trim"]
