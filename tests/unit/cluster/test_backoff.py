"""The dialer's back-off (backoff.py): delays per attempt for fixed draws of the random source, and which failed
attempts are logged."""

from __future__ import annotations

import pytest

from vmqpy.cluster.backoff import dial_delay, failure_logged

SHORTEST, LONGEST = 0.05, 2.0


@pytest.mark.parametrize(
    ("attempts", "draw", "delay"),
    [
        (1, 0.0, 0.025),  # the shortest step, jittered down to half
        (1, 0.5, 0.0375),
        (1, 0.999, 0.049975),
        (2, 0.0, 0.05),  # doubling per attempt
        (3, 0.0, 0.1),
        (6, 0.0, 0.8),
        (7, 0.0, 1.0),  # 3.2 s capped at the longest step
        (7, 0.5, 1.5),
        (31, 0.0, 1.0),
        (10**6, 0.0, 1.0),  # no overflow however long a peer stays down
    ],
)
def test_delay_per_attempt(attempts: int, draw: float, delay: float) -> None:
    assert dial_delay(attempts, SHORTEST, LONGEST, lambda: draw) == pytest.approx(delay)


def test_the_first_dial_is_at_once_and_draws_nothing() -> None:
    def no_draw() -> float:
        raise AssertionError("the first dial must not consume the random source")

    assert dial_delay(0, SHORTEST, LONGEST, no_draw) == 0.0


@pytest.mark.parametrize(("attempt", "logged"), [(1, True), (2, True), (3, False), (4, True), (6, False), (8, True)])
def test_failed_dials_logged_at_powers_of_two(attempt: int, logged: bool) -> None:
    assert failure_logged(attempt) is logged
