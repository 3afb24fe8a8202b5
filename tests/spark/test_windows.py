"""Which partitions of the views count, and the nemesis's fault windows (pure: no Spark)."""

from __future__ import annotations

import pytest

from spark_analytics.windows import (
    FaultWindow,
    NemesisStep,
    Partition,
    fault_windows,
    pair_steps,
    sort_out,
    split_off,
)

S = 1_000_000_000
DETECT = 1 * S
JOINED = {"n1": 0, "n2": 5 * S, "n3": 6 * S}
LAST = {"n1": 100 * S, "n2": 101 * S, "n3": 102 * S}


def test_split_off_is_everyone_outside_the_viewers_group() -> None:
    assert split_off("n1", [["n1", "n2"], ["n3"]]) == ("n3",)
    assert split_off("n3", [["n1"], ["n3"], ["n2"]]) == ("n1", "n2")
    assert split_off(None, None) == ()


@pytest.mark.parametrize(("partition", "reason"), [
    # a real partition: long, far from any join and stop
    (Partition(20 * S, 26 * S, "n1", ("n3",)), None),
    # n2's join: its view lists n1 before the link is up, for 2 ms
    (Partition(5 * S, 5 * S + 2_000_000, "n2", ("n1",)), "the join of n2"),
    # n3's join, seen from n1, even when it takes longer than the detection time
    (Partition(6 * S + 500_000_000, 8 * S, "n1", ("n3",)), "the join of n3"),
    # a short blip in the middle of the run
    (Partition(50 * S, 50 * S + 900_000_000, "n2", ("n3",)), "lasted 0.900 s, not longer than the detection time"),
    # exactly the detection time is not longer than it
    (Partition(50 * S, 51 * S, "n2", ("n3",)), "not longer than the detection time"),
    # the stop at the end: n1's log ends at 100 s, the others see it go (never healed)
    (Partition(100 * S + 300_000_000, None, "n2", ("n1",)), "the stop of n1"),
    # n1 itself sees the others go as it stops, just before its last line
    (Partition(99 * S + 500_000_000, None, "n1", ("n2", "n3")), "the stop of n1"),
    # open at the end of the logs but began long before any stop: a partition the logs end in
    (Partition(80 * S, None, "n1", ("n3",)), None),
])
def test_sort_out(partition: Partition, reason: str | None) -> None:
    kept, dropped = sort_out([partition], JOINED, LAST, end_of_logs=102 * S, detect_ns=DETECT)
    if reason is None:
        assert (kept, dropped) == ([partition], [])
    else:
        assert kept == [] and len(dropped) == 1 and reason in dropped[0].reason


def test_sort_out_keeps_the_start_order() -> None:
    parts = [Partition(40 * S, 45 * S, "n1", ("n2",)), Partition(20 * S, 26 * S, "n1", ("n3",)),
             Partition(5 * S, 5 * S + 1, "n2", ("n1",))]
    kept, dropped = sort_out(parts, JOINED, LAST, 102 * S, DETECT)
    assert [p.start_ts for p in kept] == [20 * S, 40 * S]
    assert [d.partition.start_ts for d in dropped] == [5 * S]


def _history(*lines: tuple[str, int, str]) -> list[NemesisStep]:
    return pair_steps(lines)


def test_pair_steps_matches_invokes_with_completions() -> None:
    steps = _history(("invoke", 1, "halves: n1-x-n3"), ("ok", 2, "halves: n1-x-n3"), ("invoke", 9, "heal"),
                     ("ok", 10, "heal"), ("invoke", 20, "kill n2"))
    assert steps == [NemesisStep(1, 2, "ok", "halves: n1-x-n3"), NemesisStep(9, 10, "ok", "heal"),
                     NemesisStep(20, None, "info", "kill n2")]


def test_one_cut_and_heal_is_one_window_from_the_cut_to_the_start_of_the_heal() -> None:
    steps = _history(("invoke", 3 * S, "halves: n1-x-n3, n2-x-n3"), ("ok", 3 * S + 5, "halves: n1-x-n3, n2-x-n3"),
                     ("invoke", 9 * S, "heal"), ("ok", 9 * S + 7, "heal"))
    assert fault_windows(steps) == [FaultWindow(3 * S, 9 * S, ("halves: n1-x-n3, n2-x-n3", "heal"))]


def test_windows_of_every_kind_of_fault() -> None:
    steps = _history(
        ("invoke", 1 * S, "kill n2"), ("ok", 2 * S, "kill n2"),
        ("invoke", 5 * S, "restart n2"), ("ok", 6 * S, "restart n2"),  # in force until n2 is up: 6 s
        ("invoke", 10 * S, "pause n1"), ("ok", 10 * S, "pause n1"),
        ("invoke", 12 * S, "resume n1"), ("ok", 13 * S, "resume n1"),  # undone as the step begins: 12 s
        ("invoke", 20 * S, "skew n3 by +30s"), ("ok", 20 * S, "skew n3 by +30s"),
        ("invoke", 21 * S, "unskew n3"), ("ok", 21 * S, "unskew n3"),
    )
    assert [(w.start_ts, w.end_ts) for w in fault_windows(steps)] == [(1 * S, 6 * S), (10 * S, 12 * S),
                                                                      (20 * S, 21 * S)]


def test_churn_is_one_window_until_the_last_fault_is_undone() -> None:
    steps = _history(
        ("invoke", 1 * S, "churn: n1-x-n2"), ("ok", 1 * S, "churn: n1-x-n2"),
        ("invoke", 2 * S, "leave n3 -k (run on n1)"), ("ok", 3 * S, "leave n3 -k (run on n1)"),
        ("invoke", 7 * S, "join n3 (discovery n2)"), ("ok", 8 * S, "join n3 (discovery n2)"),
        ("invoke", 11 * S, "heal"), ("ok", 11 * S, "heal"),
    )
    windows = fault_windows(steps)
    assert [(w.start_ts, w.end_ts) for w in windows] == [(1 * S, 11 * S)]
    assert len(windows[0].steps) == 4


def test_a_failed_step_changes_nothing_and_an_open_fault_stays_open() -> None:
    steps = _history(("invoke", 1 * S, "kill n2"), ("info", 2 * S, "kill n2"),
                     ("invoke", 5 * S, "isolate: n1-x-n2, n1-x-n3"), ("ok", 5 * S, "isolate: n1-x-n2, n1-x-n3"))
    assert fault_windows(steps) == [FaultWindow(5 * S, None, ("isolate: n1-x-n2, n1-x-n3",))]
    assert fault_windows([]) == []


def test_a_heal_without_a_fault_opens_nothing() -> None:
    assert fault_windows(_history(("invoke", 1, "heal"), ("ok", 2, "heal"))) == []
