"""vmqpy.stall_watch: a tick that runs late by more than `warn_after` is a stall (a table and a property)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from vmqpy.stall_watch import StallSampler, StallWatch


@pytest.mark.parametrize(("times", "stalls"), [
    ([0.0, 0.1, 0.2, 0.3], [None, None, None, None]),  # on time
    ([0.0, 0.1, 0.45, 0.55], [None, None, None, None]),  # 0.25 late: not more than warn_after
    ([0.0, 0.1, 1.3, 1.4], [None, None, 1.1, None]),  # one turn of 1.2 s
    ([5.0, 7.0], [None, 1.9]),  # the first tick only starts the watch
])
def test_a_late_tick_is_a_stall(times: list[float], stalls: list[float | None]) -> None:
    watch = StallWatch(0.1, warn_after=0.25)
    got = [watch.tick(t) for t in times]
    assert got == pytest.approx(stalls)
    assert watch.stalls == sum(s is not None for s in stalls)
    assert watch.longest == pytest.approx(max([s for s in stalls if s is not None], default=0.0))


@given(st.lists(st.floats(0.0, 5.0), min_size=1, max_size=50))
def test_a_stall_is_reported_exactly_when_a_gap_exceeds_interval_plus_warn_after(gaps: list[float]) -> None:
    watch = StallWatch(0.1, warn_after=0.25)
    now = 0.0
    watch.tick(now)
    for gap in gaps:
        assume(abs(gap - 0.35) > 1e-6)  # the boundary itself is up to rounding
        now += gap
        late = watch.tick(now)
        assert (late is not None) == (gap - 0.1 > 0.25)
        if late is not None:
            assert late == pytest.approx(gap - 0.1)


@pytest.mark.parametrize(("interval", "warn_after"), [(0.0, 0.25), (-1.0, 0.25), (0.1, 0.0)])
def test_bad_settings_are_usage_errors(interval: float, warn_after: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        StallWatch(interval, warn_after)


def a_long_turn(sampler: StallSampler) -> None:
    """A loop turn that lasts until the sampler has seen it (bounded: 10 s)."""
    deadline = time.monotonic() + 10.0
    while not sampler.taken and time.monotonic() < deadline:
        time.sleep(0.005)


def test_the_sampler_says_where_the_loop_was_and_what_the_other_threads_did() -> None:
    sampler = StallSampler(interval=0.01, warn_after=0.01, period=0.005)
    idle = threading.Event()
    worker = threading.Thread(target=idle.wait, args=(10.0,), name="a-worker", daemon=True)
    worker.start()
    sampler.start()
    try:
        assert sampler.beat() is None  # nothing taken yet
        a_long_turn(sampler)
        where = sampler.beat()
    finally:
        sampler.stop()
        idle.set()
        worker.join(5.0)
    assert where is not None
    loop_part, *others = where.split(" || ")
    assert loop_part.startswith("tests.unit.test_stall_watch.a_long_turn:")  # the innermost frame first
    assert "test_the_sampler_says_where" in loop_part
    assert any(part.startswith("[a-worker] threading.Condition.wait") for part in others), others
    assert sampler.beat() is None  # once per stall


def test_the_sampler_sleeps_while_the_loop_beats() -> None:
    """It wakes when a stall could have begun (last beat + interval + warn_after), not every `period`: a loop
    beating every 0.1 s for 1.5 s wakes it a handful of times, not 30."""
    sampler = StallSampler(interval=0.1, warn_after=0.25, period=0.05)
    sampler.start()
    try:
        for _ in range(15):
            time.sleep(0.1)
            assert sampler.beat() is None
    finally:
        sampler.stop()
    assert 1 <= sampler.wakeups <= 10, sampler.wakeups
