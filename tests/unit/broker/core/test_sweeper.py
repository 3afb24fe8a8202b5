"""vmqpy.broker.core.sweeper.SubscriptionSweeper: the subscriptions of ended sessions removed a slice a turn, oldest
first; a client id's waiters run once its last one is gone; `flush` removes one client id's at once; without a
scheduler, or for a slice's worth, everything goes at once. The loop is a list of scheduled callbacks run by hand.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.turns import Loop
from vmqpy.broker.core.sweeper import AT_ONCE, SLICE, SubscriptionSweeper
from vmqpy.broker.core.turn_budget import SlicePace


def sweeper(removed: list[tuple[str, str]], scheduled: bool = True) -> tuple[SubscriptionSweeper, Loop]:
    loop = Loop()
    # a clock that never moves: every slice after the first (16) is a whole SLICE, as on an idle machine
    sweep = SubscriptionSweeper(lambda client_id, topic_filter: removed.append((client_id, topic_filter)),
                                SlicePace(SLICE, clock=lambda: 0.0))
    if scheduled:
        sweep.schedule = loop.call_soon
    return sweep, loop


@pytest.mark.parametrize(("count", "scheduled", "at_once"), [
    (0, True, 0),
    (1, True, 1),
    (AT_ONCE, True, AT_ONCE),  # a few: at once
    (AT_ONCE + 1, True, 0),  # more: nothing in the ending turn
    (SLICE + 1, True, 0),
    (SLICE + 1, False, SLICE + 1),  # no scheduler: at once
    (10 * SLICE, False, 10 * SLICE),
])
def test_what_goes_at_once(count: int, scheduled: bool, at_once: int) -> None:
    removed: list[tuple[str, str]] = []
    sweep, _loop = sweeper(removed, scheduled)
    sweep.add("c", [f"f/{i}" for i in range(count)])
    assert len(removed) == at_once
    assert len(sweep) == count - at_once
    assert sweep.pending("c") is (count > at_once)


def test_a_slice_a_turn_oldest_first_and_waiters_when_clear() -> None:
    removed: list[tuple[str, str]] = []
    sweep, loop = sweeper(removed)
    sweep.add("a", [f"a/{i}" for i in range(SLICE + 10)])
    sweep.add("b", [f"b/{i}" for i in range(SLICE * 2)])
    cleared: list[str] = []
    sweep.when_clear("a", lambda: cleared.append("a"))
    sweep.when_clear("b", lambda: cleared.append("b"))
    sweep.when_clear("nobody", lambda: cleared.append("nobody"))  # nothing waits for it: at once
    assert cleared == ["nobody"]
    turns = 0
    while loop.turn():
        turns += 1
        assert len(removed) <= turns * SLICE  # never more than a slice a turn
    assert turns == 4  # 16 (the first slice), then 256 a turn: 778 in 4 turns
    assert removed == [("a", f"a/{i}") for i in range(SLICE + 10)] + [("b", f"b/{i}") for i in range(SLICE * 2)]
    assert cleared == ["nobody", "a", "b"]
    assert len(sweep) == 0 and not sweep.pending("a") and sweep.removed == len(removed)


def test_flush_removes_one_client_id_at_once_and_the_rest_keeps_its_pace() -> None:
    removed: list[tuple[str, str]] = []
    sweep, loop = sweeper(removed)
    sweep.add("a", [f"a/{i}" for i in range(SLICE * 2)])
    sweep.add("b", [f"b/{i}" for i in range(SLICE * 2)])
    cleared: list[str] = []
    sweep.when_clear("b", lambda: cleared.append("b"))
    sweep.flush("b")
    assert removed == [("b", f"b/{i}") for i in range(SLICE * 2)] and cleared == ["b"]
    sweep.flush("b")  # nothing left: nothing happens
    assert len(removed) == SLICE * 2
    while loop.turn():
        pass
    assert removed[SLICE * 2:] == [("a", f"a/{i}") for i in range(SLICE * 2)]


def test_drain_removes_everything_waiting_oldest_first_and_runs_the_waiters() -> None:
    removed: list[tuple[str, str]] = []
    sweep, loop = sweeper(removed)
    sweep.add("a", [f"a/{i}" for i in range(SLICE * 2)])
    sweep.add("b", [f"b/{i}" for i in range(SLICE + 1)])
    loop.turn()  # a first slice of a's
    cleared: list[str] = []
    sweep.when_clear("b", lambda: cleared.append("b"))
    sweep.drain()
    assert removed == [("a", f"a/{i}") for i in range(SLICE * 2)] + [("b", f"b/{i}") for i in range(SLICE + 1)]
    assert cleared == ["b"] and len(sweep) == 0 and not sweep.pending("a")
    while loop.turn():  # the slice already scheduled finds nothing
        pass
    assert len(removed) == SLICE * 3 + 1


def test_a_second_session_of_the_same_client_id_queues_behind_the_first() -> None:
    removed: list[tuple[str, str]] = []
    sweep, loop = sweeper(removed)
    sweep.add("a", [f"old/{i}" for i in range(SLICE + 1)])
    sweep.add("a", ["new/0", "new/1"])  # small, but the client id has some waiting: in order after them
    assert removed == []
    while loop.turn():
        pass
    assert removed[-2:] == [("a", "new/0"), ("a", "new/1")] and len(removed) == SLICE + 3


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 3 * SLICE)), max_size=6),
       st.lists(st.sampled_from("abc"), max_size=3))
def test_every_subscription_is_removed_once_in_bounded_turns(adds: list[tuple[str, int]], flushes: list[str]) -> None:
    removed: list[tuple[str, str]] = []
    sweep, loop = sweeper(removed)
    expected = []
    for n, (client_id, count) in enumerate(adds):
        filters = [f"{n}/{i}" for i in range(count)]
        expected += [(client_id, f) for f in filters]
        sweep.add(client_id, filters)
    for client_id in flushes:
        sweep.flush(client_id)
    for _ in range(len(expected) // SLICE + 2):
        loop.turn()
    assert sorted(removed) == sorted(expected) and len(sweep) == 0
