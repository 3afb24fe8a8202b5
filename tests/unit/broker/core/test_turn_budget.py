"""vmqpy.broker.core.turn_budget: the size of a bulk job's slices (`SlicePace`: as many items as fit in the lane's
budget at the time per item measured so far, between 1 and `most`) and the bulk lane (`BulkLane`: its steps round
robin, at most its budget a loop turn)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.broker.turns import Loop
from tests.unit.clocks import Clock
from vmqpy.broker.core.turn_budget import LANE_BUDGET, BulkLane, SlicePace


@pytest.mark.parametrize(("per_item", "expected"), [
    (0.0, 256),  # free: the most a slice takes
    (LANE_BUDGET / 1000, 256),  # 1,000 would fit: capped at `most`
    (LANE_BUDGET / 20, 20),
    (LANE_BUDGET / 2.5, 2),
    (LANE_BUDGET * 3, 1),  # one item takes longer than the budget: one a slice, never none
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


def test_the_lane_runs_its_steps_round_robin_within_its_budget_a_turn() -> None:
    """Each step costs 0.3 s of a fake clock and the lane's budget is 1 s: at most 4 steps a turn (the step that
    passes the budget ends its turn), in the order they came; a step that adds itself again goes to the back."""
    clock = Clock()
    turns = Loop()
    lane = BulkLane(budget=1.0, clock=clock)
    lane.schedule = turns.call_soon
    ran: list[str] = []
    left = {"a": 3, "b": 1, "c": 2}

    def step(name: str) -> Callable[[], None]:
        def run() -> None:
            clock.now += 0.3
            ran.append(name)
            left[name] -= 1
            if left[name]:
                lane.add(run, turns.call_soon)
        return run

    for name in "abc":
        lane.add(step(name), turns.call_soon)
    assert len(turns.ready) == 1  # one lane callback a turn, however many steps
    per_turn = []
    for _ in range(10):
        before = len(ran)
        if not turns.turn():
            break
        per_turn.append(len(ran) - before)
    assert per_turn == [3, 2, 1]  # those waiting at the start of each turn (4 would fit), re-added ones next turn
    assert ran == ["a", "b", "c", "a", "c", "a"]
    assert len(lane) == 0


def test_a_lane_over_budget_leaves_the_rest_for_the_next_turn_and_survives_a_failing_step() -> None:
    clock = Clock()
    turns = Loop()
    lane = BulkLane(budget=1.0, clock=clock)
    lane.schedule = turns.call_soon
    ran: list[int] = []

    def slow(n: int) -> Callable[[], None]:
        def run() -> None:
            clock.now += 0.6
            ran.append(n)
            if n == 1:
                raise RuntimeError("a bug in one step")
        return run

    for n in range(5):
        lane.add(slow(n), turns.call_soon)
    turns.turn()
    assert ran == [0, 1]  # 1.2 s: over the budget after the second
    turns.turn()
    assert ran == [0, 1, 2, 3]
    turns.turn()
    assert ran == [0, 1, 2, 3, 4] and not turns.ready and len(lane) == 0


def test_without_a_schedule_each_step_takes_the_fallback() -> None:
    turns = Loop()
    lane = BulkLane()
    ran: list[int] = []
    lane.add(lambda: ran.append(1), turns.call_soon)
    assert len(turns.ready) == 1 and len(lane) == 0
    turns.turn()
    assert ran == [1]
