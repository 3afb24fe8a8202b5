"""The size of a bulk job's slices (vmqpy.broker.turn_budget.SlicePace): as many items as fit in the turn's
budget at the time per item measured so far, between 1 and `most`."""

from __future__ import annotations

import pytest

from vmqpy.broker.turn_budget import TURN_BUDGET, SlicePace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("per_item", "expected"), [
    (0.0, 256),  # free: the most a slice takes
    (TURN_BUDGET / 1000, 256),  # 1,000 would fit: capped at `most`
    (TURN_BUDGET / 20, 20),
    (TURN_BUDGET / 2.5, 2),
    (TURN_BUDGET * 3, 1),  # one item takes longer than the budget: one a slice, never none
])
def test_the_next_slice_fits_the_budget(per_item: float, expected: int) -> None:
    clock = Clock()
    pace = SlicePace(256, clock=clock)
    assert pace.start() == 16  # nothing measured yet
    clock.now += 16 * per_item
    pace.done(16)
    assert pace.start() == expected


def test_the_time_per_item_is_smoothed_over_the_slices() -> None:
    clock = Clock()
    pace = SlicePace(1000, budget=1.0, first=10, clock=clock)
    pace.start()
    clock.now += 10 * 0.01  # 0.01 s an item: 100 fit
    pace.done(10)
    assert pace.start() == 100
    clock.now += 100 * 0.03  # 0.03 s an item: the mean of the two, 0.02 s: 50 fit
    pace.done(100)
    assert pace.start() == 50


def test_an_empty_slice_teaches_nothing_and_bad_bounds_are_refused() -> None:
    clock = Clock()
    pace = SlicePace(64, first=100, clock=clock)
    assert pace.start() == 64  # `first` is capped at `most`
    clock.now += 5.0
    pace.done(0)
    assert pace.start() == 64
    for most, first, budget in ((0, 1, 1.0), (1, 0, 1.0), (1, 1, 0.0)):
        with pytest.raises(ValueError):
            SlicePace(most, budget=budget, first=first)
