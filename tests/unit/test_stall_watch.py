"""vmqpy.stall_watch: a tick that runs late by more than `warn_after` is a stall (a table and a property)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from vmqpy.stall_watch import StallWatch


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
