from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chaos.checkers.queues import check_queues
from tests.unit.chaos.histories import MS, H


def test_every_acknowledged_message_drained_is_safe() -> None:
    ops = H().publish("m1", "q0", 0, 5).publish("m2", "q0", 10, 15).drain("q0", ["m1", "m2"], 100, 200).ops()
    check = check_queues(ops)
    assert check.safe is True and check.figures["acknowledged"] == 2


def test_acknowledged_message_not_drained_is_lost() -> None:
    ops = H().publish("m1", "q0", 0, 5).publish("m2", "q0", 10, 15).drain("q0", ["m1"], 100, 200).ops()
    check = check_queues(ops)
    assert (check.safe, check.figures["lost"]) == (False, 1)
    assert "m2" in check.problems[0]


def test_loss_right_after_a_fault_is_told_apart() -> None:
    ops = (H().publish("m1", "q0", 1000, 1005).publish("m2", "q0", 5000, 5005)
           .drain("q0", [], 10_000, 10_100).ops())
    check = check_queues(ops, faults=[900 * MS], window_s=2.0)
    assert (check.safe, check.figures["lost"], check.figures["lost_in_detection_window"]) == (False, 2, 1)
    assert "detection window" in check.problems[0] and "detection window" not in check.problems[1]


def test_loss_is_reported_but_allowed_when_consistency_is_traded() -> None:
    ops = H().publish("m1", "q0", 0, 5).drain("q0", [], 100, 200).ops()
    check = check_queues(ops, loss_allowed=True)
    assert (check.safe, check.figures["lost"]) == (True, 1)


def test_duplicates_are_counted_per_extra_reception() -> None:
    ops = H().publish("m1", "q0", 0, 5).drain("q0", ["m1", "m1", "m1"], 100, 200).ops()
    check = check_queues(ops)
    assert (check.safe, check.figures["duplicates"]) == (True, 2)


def test_message_never_published_or_refused_is_unexpected() -> None:
    ops = (H().publish("m1", "q0", 0, 5).publish("m2", "q0", 6, 8, outcome="fail")
           .drain("q0", ["m1", "m2", "zz"], 100, 200).ops())
    check = check_queues(ops)
    assert (check.safe, check.figures["unexpected"]) == (False, 2)


def test_unknown_outcome_and_late_publishes_are_not_lost() -> None:
    ops = H().publish("m1", "q0", 0, None).drain("q0", [], 100, 200).publish("m3", "q0", 150, 160).ops()
    assert check_queues(ops).figures["lost"] == 0


def test_nothing_acknowledged_is_not_checked() -> None:
    ops = H().publish("m1", "q0", 0, None).publish("m2", "q0", 6, 8, outcome="fail").drain("q0", [], 100, 200).ops()
    check = check_queues(ops)
    assert check.safe is None and "not checked" in check.summary


def test_subscriber_that_never_drained_loses_its_messages() -> None:
    ops = H().publish("m1", "q0", 0, 5).drain("q1", [], 100, 200).ops()
    assert check_queues(ops).figures["lost"] == 1


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3)), min_size=1, max_size=30))
def test_lost_and_duplicates_match_a_plain_model(spec: list[tuple[bool, int]]) -> None:
    """Each message acknowledged; delivered `copies` times when the flag is set, else never."""
    h = H()
    drained: list[str] = []
    for i, (delivered, copies) in enumerate(spec):
        h.publish(f"m{i}", "q0", i * 10, i * 10 + 5)
        if delivered:
            drained += [f"m{i}"] * copies
    ops = h.drain("q0", drained, 10_000, 10_100).ops()
    check = check_queues(ops)
    assert check.figures["lost"] == sum(1 for d, _ in spec if not d)
    assert check.figures["duplicates"] == sum(c - 1 for d, c in spec if d)
