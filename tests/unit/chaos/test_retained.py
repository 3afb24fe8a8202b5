from __future__ import annotations

from chaos.checkers.retained import RetainWrite, check_retained, winner
from tests.unit.chaos.histories import H


def test_last_acknowledged_value_everywhere_is_safe() -> None:
    ops = H().retain("t", "a", 0, 5).retain("t", "b", 10, 15).ops()
    check = check_retained(ops, {"n1": {"t": "b"}, "n2": {"t": "b"}})
    assert check.safe is True


def test_nodes_that_disagree_fail() -> None:
    ops = H().retain("t", "a", 0, 10).retain("t", "b", 5, 15, process="w2").ops()
    check = check_retained(ops, {"n1": {"t": "a"}, "n2": {"t": "b"}})
    assert (check.safe, check.figures["disagreeing_topics"]) == (False, 1)


def test_overwritten_value_is_stale() -> None:
    ops = H().retain("t", "a", 0, 5).retain("t", "b", 10, 15).ops()
    check = check_retained(ops, {"n1": {"t": "a"}})
    assert (check.safe, check.figures["stale"]) == (False, 1)


def test_value_back_after_an_acknowledged_clear_is_a_clear_undone() -> None:
    ops = H().retain("t", "a", 0, 5).retain("t", None, 10, 15).ops()
    check = check_retained(ops, {"n1": {"t": "a"}})
    assert (check.safe, check.figures["clear_undone"]) == (False, 1)


def test_acknowledged_value_gone_is_lost() -> None:
    ops = H().retain("t", "a", 0, 5).ops()
    check = check_retained(ops, {"n1": {"t": None}})
    assert (check.safe, check.figures["lost"]) == (False, 1)


def test_never_published_value_is_unexpected() -> None:
    ops = H().retain("t", "a", 0, 5).ops()
    assert check_retained(ops, {"n1": {"t": "zzz"}}).figures["unexpected"] == 1


def test_winner_is_the_surviving_put_with_the_greatest_stamp() -> None:
    a = RetainWrite("t", ("n1#1", 1), {}, (100, 0, "n1#1"), "a")
    b = RetainWrite("t", ("n2#1", 1), {}, (90, 0, "n2#1"), "b")  # concurrent, older stamp
    assert winner([a, b]) == "a"
    c = RetainWrite("t", ("n2#1", 2), {"n1#1": 1, "n2#1": 1}, (80, 0, "n2#1"), "c")  # saw both: replaces them
    assert winner([a, b, c]) == "c"
    clear = RetainWrite("t", ("n1#1", 2), {"n1#1": 1}, (120, 0, "n1#1"), None)  # clears a, not the concurrent b
    assert winner([a, b, clear]) == "b"
    assert winner([a, RetainWrite("t", ("n1#1", 2), {"n1#1": 1}, (120, 0, "n1#1"), None)]) is None
    tie = RetainWrite("t", ("n3#1", 1), {}, (100, 0, "n3#1"), "tie")  # same wall and logical: node breaks the tie
    assert winner([a, tie]) == "tie"


def test_agreed_value_that_is_not_the_resolution_winner_fails() -> None:
    ops = H().retain("t", "a", 0, 10).retain("t", "b", 5, 15, process="w2").ops()
    log = [RetainWrite("t", ("n1#1", 1), {}, (100, 0, "n1#1"), "a"),
           RetainWrite("t", ("n2#1", 1), {}, (101, 0, "n2#1"), "b")]
    assert check_retained(ops, {"n1": {"t": "b"}, "n2": {"t": "b"}}, log).safe is True
    check = check_retained(ops, {"n1": {"t": "a"}, "n2": {"t": "a"}}, log)
    assert (check.safe, check.figures["not_winner"]) == (False, 2)


def test_winner_not_computed_when_a_log_lost_an_acknowledged_write() -> None:
    ops = H().retain("t", "a", 0, 10).retain("t", "b", 5, 15, process="w2").ops()
    log = [RetainWrite("t", ("n1#1", 1), {}, (100, 0, "n1#1"), "a")]
    check = check_retained(ops, {"n1": {"t": "b"}}, log)
    assert check.figures["winner_undetermined"] == 1 and check.safe is True


def test_traded_consistency_reports_a_real_time_clear_undone_but_keeps_the_winner_check() -> None:
    ops = H().retain("t", "a", 0, 5).retain("t", None, 10, 15).ops()
    log = [RetainWrite("t", ("n2#1", 1), {}, (100, 0, "n2#1"), "a"),
           RetainWrite("t", ("n1#1", 1), {}, (101, 0, "n1#1"), None)]  # the clear did not see "a": concurrent
    check = check_retained(ops, {"n1": {"t": "a"}, "n2": {"t": "a"}}, log, consistency_traded=True)
    assert (check.safe, check.figures["clear_undone"]) == (True, 2)
    assert check_retained(ops, {"n1": {"t": "a"}, "n2": {"t": "a"}}, log).safe is False
    causal = [log[0], RetainWrite("t", ("n1#1", 1), {"n2#1": 1}, (101, 0, "n1#1"), None)]  # the clear saw "a"
    check = check_retained(ops, {"n1": {"t": "a"}, "n2": {"t": "a"}}, causal, consistency_traded=True)
    assert (check.safe, check.figures["not_winner"]) == (False, 2)
