"""The verdict table is read by a person: a figure that does not exist is said in words, never printed as None."""

from __future__ import annotations

from chaos.checkers.registration import check_registration
from chaos.checkers.subscriptions import check_subscriptions
from chaos.verdict import table
from tests.unit.chaos.histories import MS, H


def test_registration_without_a_duplicate_across_a_heal_says_so() -> None:
    h = H()
    h.op("a", "connect", {"client": "c"}, "n1", 0, 1)
    h.op("a", "disconnect", {"client": "c"}, "n1", 100, 101)
    check = check_registration(h.ops(), heals=[50 * MS])
    assert check.figures["resolved_after_heal_s"]["max"] is None
    assert "none live across a heal" in check.summary
    assert "None" not in table([check])


def test_registration_with_a_duplicate_across_a_heal_gives_the_seconds() -> None:
    h = H()
    h.op("a", "connect", {"client": "c"}, "n1", 0, 1)
    h.op("a", "server-disconnect", {"client": "c"}, "n1", 5_000, None)
    h.op("b", "connect", {"client": "c"}, "n2", 1_000, 1_001)
    h.op("b", "disconnect", {"client": "c"}, "n2", 6_000, 6_001)
    assert "resolved after heal within 2.0 s" in check_registration(h.ops(), heals=[3_000 * MS]).summary


def test_subscriptions_without_a_measured_change_say_so() -> None:
    check = check_subscriptions([], {"n1": {}})
    assert "no change measured" in check.summary
    assert "None" not in table([check])
