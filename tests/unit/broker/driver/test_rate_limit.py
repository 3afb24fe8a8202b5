"""The token bucket of `max_message_rate` (vmqpy/broker/driver/rate_limit.py): times in, waits out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.broker.driver.rate_limit import TokenBucket


@pytest.mark.parametrize(("rate", "times", "waits"), [
    # a full bucket lets a second's worth through at once, then one event per 1/rate
    (2, [0.0, 0.0, 0.0], [0.0, 0.0, 0.5]),
    (2, [0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.5]),
    # a sender that owes and waits it out exactly is at the rate: each event owes 1/rate again, more if sooner
    (1, [0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 2.0]),
    # idle time refills, but no more than the burst
    (4, [0.0, 0.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0, 100.0], [0, 0, 0, 0, 0, 0, 0, 0, 0.25]),
    # below one event a second: the burst is still one event
    (0.5, [0.0, 0.0, 2.0, 6.0], [0.0, 2.0, 2.0, 0.0]),
    # a clock that goes back is treated as no time passing
    (1, [10.0, 9.0], [0.0, 1.0]),
])
def test_waits(rate: float, times: list[float], waits: list[float]) -> None:
    bucket = TokenBucket(rate, now=times[0])
    assert [bucket.take(t) for t in times] == pytest.approx(waits)


def test_explicit_burst() -> None:
    bucket = TokenBucket(10, now=0.0, burst=3)
    assert [bucket.take(0.0) for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


def test_a_rate_of_zero_is_not_a_bucket() -> None:
    with pytest.raises(ValueError, match="rate above 0"):
        TokenBucket(0, now=0.0)


@given(st.integers(1, 50), st.lists(st.floats(0.0, 0.5), min_size=1, max_size=200))
def test_a_client_that_waits_as_told_stays_within_the_rate(rate: int, gaps: list[float]) -> None:
    """Whatever its timing, a sender that waits each time for what it owes sends at most burst + rate * elapsed."""
    bucket = TokenBucket(rate, now=0.0)
    now = 0.0
    for gap in gaps:
        now += gap
        now += bucket.take(now)  # the driver stops reading this long
    assert len(gaps) <= rate + rate * now + 1e-6
