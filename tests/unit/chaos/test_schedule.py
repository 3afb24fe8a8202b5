from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.experiments import EXPERIMENTS, SUITE, by_name
from chaos.schedule import FAULTS, Experiment, bridge, halves, isolate, plan, reachable, ring


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    e = by_name("partition-halves")
    assert plan(e, 5, 7) == plan(e, 5, 7)
    assert any(plan(e, 5, s) != plan(e, 5, 7) for s in range(8, 20))


def test_halves_of_five_cut_two_from_three() -> None:
    cut = halves(5, random.Random(1))
    view = reachable(5, cut)
    assert sorted(len(v) for v in view.values()) == [2, 2, 3, 3, 3]


def test_isolate_cuts_one_node_from_every_other() -> None:
    view = reachable(4, isolate(4, random.Random(3)))
    assert sorted(len(v) for v in view.values()) == [1, 3, 3, 3]


def test_bridge_node_reaches_everyone_the_halves_do_not_reach_each_other() -> None:
    view = reachable(5, bridge(5, random.Random(2)))
    sizes = sorted(len(v) for v in view.values())
    assert sizes == [3, 3, 3, 3, 5]


def test_ring_of_five_every_node_sees_a_majority_no_two_the_same() -> None:
    view = reachable(5, ring(5, random.Random(4)))
    assert all(len(v) == 3 for v in view.values())
    assert len({frozenset(v) for v in view.values()}) == 5


def test_ring_of_three_cuts_one_pair() -> None:
    assert len(ring(3, random.Random(0))) == 1


@pytest.mark.parametrize("fault", FAULTS)
def test_every_fault_is_undone_by_the_end(fault: str) -> None:
    e = Experiment("x", "", (fault,), duration=40.0)  # type: ignore[arg-type]
    steps = plan(e, 3, 5)
    assert steps, fault
    undo = {"cut": "heal", "kill": "restart", "pause": "resume", "skew": "unskew", "leave": "join", "lose": "replace"}
    pending: list[str] = []
    for step in steps:
        if step.action in undo:
            pending.append(undo[step.action])
        else:
            assert pending and pending.pop() == step.action
        assert 0 <= step.at <= 40.0
    assert pending == []


@pytest.mark.parametrize("nodes", [3, 4, 5])
@pytest.mark.parametrize("seed", range(10))
def test_churn_leaves_and_rejoins_across_a_split_the_victim_bridges(nodes: int, seed: int) -> None:
    """The victim reaches every node (it can hand its sessions to any); the leave runs on one side, the join
    goes through the other, so the two sides learn of each change at different times."""
    cut, leave, join, heal = plan(by_name("membership-churn"), nodes, seed)[:4]
    assert [s.action for s in (cut, leave, join, heal)] == ["cut", "leave", "join", "heal"]
    assert cut.at < leave.at < join.at < heal.at
    view = reachable(nodes, cut.cut)
    victim = leave.node
    assert victim is not None and victim == join.node and view[victim] == set(range(nodes))
    assert leave.other is not None and join.other is not None
    assert join.other not in view[leave.other], "commander and discovery node are on different sides"


def test_the_suite_names_exist_and_every_fault_is_in_it() -> None:
    names = {e.name for e in EXPERIMENTS}
    assert set(SUITE) <= names
    covered = {f for e in EXPERIMENTS if e.name in SUITE for f in e.faults}
    assert covered == set(FAULTS)
    with pytest.raises(KeyError):
        by_name("nope")


@given(st.integers(2, 9), st.integers(0, 10_000), st.sampled_from(["halves", "isolate", "bridge", "ring"]))
def test_cuts_only_name_real_distinct_pairs(nodes: int, seed: int, fault: str) -> None:
    e = Experiment("x", "", (fault,), duration=30.0)  # type: ignore[arg-type]
    for step in plan(e, nodes, seed):
        for a, b in step.cut:
            assert 0 <= a < b < nodes
