from __future__ import annotations

from chaos.checkers.subscriptions import KeyChange, check_subscriptions
from tests.unit.chaos.histories import MS, H


def test_clean_history_is_safe() -> None:
    ops = H().sub("c1", "a", 0, 5).sub("c1", "b", 10, 15).unsub("c1", "a", 20, 25).ops()
    check = check_subscriptions(ops, {"n1": {"c1": ["b"]}, "n2": {"c1": ["b"]}})
    assert check.safe is True
    assert check.figures["lost"] == check.figures["unexpected"] == check.figures["resurrected"] == 0


def test_acknowledged_subscription_missing_on_one_node_is_lost() -> None:
    ops = H().sub("c1", "a", 0, 5).sub("c1", "b", 10, 15).ops()
    check = check_subscriptions(ops, {"n1": {"c1": ["a", "b"]}, "n2": {"c1": ["a"]}})
    assert check.safe is False
    assert check.figures["lost"] == 1
    assert "c1 b" in check.problems[0] and "n2" in check.problems[0]


def test_subscription_never_attempted_is_unexpected() -> None:
    ops = H().sub("c1", "a", 0, 5).ops()
    check = check_subscriptions(ops, {"n1": {"c1": ["a"], "ghost": ["x"]}})
    assert (check.safe, check.figures["unexpected"]) == (False, 1)


def test_refused_subscribe_that_appears_is_unexpected() -> None:
    ops = H().sub("c1", "a", 0, 5, outcome="fail").ops()
    assert check_subscriptions(ops, {"n1": {"c1": ["a"]}}).figures["unexpected"] == 1


def test_unsubscribe_acknowledged_after_the_subscribe_completed_is_not_undone() -> None:
    ops = H().sub("c1", "a", 0, 5).unsub("c1", "a", 10, 15).ops()
    check = check_subscriptions(ops, {"n1": {"c1": ["a"]}})
    assert (check.safe, check.figures["resurrected"]) == (False, 1)


def test_concurrent_subscribe_and_unsubscribe_may_end_either_way() -> None:
    ops = H().sub("c1", "a", 0, 10).unsub("c1", "a", 5, 12).ops()
    assert check_subscriptions(ops, {"n1": {"c1": ["a"]}}).safe is True
    assert check_subscriptions(ops, {"n1": {}}).safe is True


def test_unknown_outcome_may_or_may_not_have_happened() -> None:
    ops = H().sub("c1", "a", 0, None).ops()
    assert check_subscriptions(ops, {"n1": {"c1": ["a"]}}).safe is True
    assert check_subscriptions(ops, {"n1": {}}).safe is True


def test_no_read_means_not_checked() -> None:
    assert check_subscriptions(H().sub("c1", "a", 0, 5).ops(), {}).safe is None


def test_stable_latency_is_the_last_node_to_show_the_change() -> None:
    ops = H().sub("c1", "a", 0, 5).ops()
    changes = [KeyChange("n1", 3 * MS, "c1", "a", True), KeyChange("n2", 45 * MS, "c1", "a", True)]
    check = check_subscriptions(ops, {"n1": {"c1": ["a"]}, "n2": {"c1": ["a"]}}, changes)
    assert check.figures["stable_latency_ms"]["max"] == 40.0
    assert check.figures["never_stable"] == 0
    check = check_subscriptions(ops, {"n1": {"c1": ["a"]}, "n2": {"c1": ["a"]}}, changes[:1])
    assert check.figures["never_stable"] == 1


def test_traded_consistency_allows_a_concurrent_subscribe_to_win_but_not_a_loss() -> None:
    ops = H().sub("c1", "a", 0, 5).unsub("c1", "a", 10, 15).sub("c1", "b", 20, 25).ops()
    check = check_subscriptions(ops, {"n1": {"c1": ["a", "b"]}}, consistency_traded=True)
    assert (check.safe, check.figures["resurrected"]) == (True, 1)
    check = check_subscriptions(ops, {"n1": {"c1": ["a"]}}, consistency_traded=True)
    assert (check.safe, check.figures["lost"]) == (False, 1)
