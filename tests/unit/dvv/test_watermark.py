"""Watermark (version-vector matrix): table tests."""

from __future__ import annotations

import pytest

from dvv.errors import InvalidClockError
from dvv.node_clock import NodeClock
from dvv.watermark import Watermark

C1 = NodeClock(
    {"a": (12, 0), "b": (7, 0), "c": (4, 0), "d": (5, 0), "e": (5, 0), "f": (7, 10), "g": (5, 10), "h": (5, 14)}
)
C2 = NodeClock(
    {"a": (5, 14), "b": (5, 14), "c": (50, 14), "d": (5, 14), "e": (15, 0), "f": (5, 14), "g": (7, 10), "h": (7, 10)}
)


def cells() -> Watermark:
    m = Watermark()
    m = m.update_cell("a", "b", 4)
    m = m.update_cell("a", "c", 10)
    m = m.update_cell("c", "c", 2)
    m = m.update_cell("c", "c", 20)
    return m.update_cell("c", "c", 15)  # cells never go down


def test_update_cell_keeps_the_maximum() -> None:
    assert Watermark().update_cell("a", "b", 4) == Watermark({"a": {"b": 4}})
    assert cells() == Watermark({"a": {"b": 4, "c": 10}, "c": {"c": 20}})


@pytest.mark.parametrize(
    ("peer", "clock", "expected"),
    [
        ("c", C1, {"a": {"b": 4, "c": 12}, "c": {"c": 20}}),
        ("c", C2, {"a": {"b": 4, "c": 10}, "c": {"c": 50}}),
        ("a", C1, {"a": {"b": 4, "c": 10}, "c": {"c": 20}}),
        ("a", C2, {"a": {"b": 4, "c": 10}, "c": {"c": 20}}),
        ("b", C1, {"a": {"b": 12, "c": 10}, "c": {"c": 20}}),
        ("b", C2, {"a": {"b": 5, "c": 10}, "c": {"c": 20}}),
    ],
)
def test_update_peer_uses_the_peer_base_of_each_row(
    peer: str, clock: NodeClock, expected: dict[str, dict[str, int]]
) -> None:
    assert cells().update_peer(peer, clock) == Watermark(expected)


def test_min() -> None:
    m = cells()
    assert Watermark().min("a") == 0
    assert Watermark().update_cell("a", "b", 4).min("a") == 4
    assert m.min("a") == 4 and m.min("c") == 20 and m.min("b") == 0
    assert Watermark({"a": {}}).min("a") == 0


def test_get_peers_row_reset() -> None:
    m = cells()
    assert m.get("a", "a") == 0 and m.get("c", "c") == 20 and m.get("a", "c") == 10 and m.get("x", "y") == 0
    assert m.peers() == ("a", "c")
    assert m.row("a") == {"b": 4, "c": 10} and m.row("zz") == {}
    assert m.reset() == Watermark({"a": {"b": 0, "c": 0}, "c": {"c": 0}})


def test_left_join_only_takes_rows_and_columns_self_has() -> None:
    a = Watermark({"a": {"b": 4, "c": 10}, "c": {"c": 20}, "z": {"t1": 0, "t2": 0, "z": 0}})
    b = Watermark({"a": {"b": 2, "c": 10}, "b": {}, "c": {"c": 22}})
    c = Watermark({"z": {"a": 1, "b": 0, "z": 4}})
    assert a.left_join(b) == Watermark({"a": {"b": 4, "c": 10}, "c": {"c": 22}, "z": {"t1": 0, "t2": 0, "z": 0}})
    assert a.left_join(c) == Watermark({"a": {"b": 4, "c": 10}, "c": {"c": 20}, "z": {"t1": 0, "t2": 0, "z": 4}})
    assert b.left_join(a) == Watermark({"a": {"b": 4, "c": 10}, "b": {}, "c": {"c": 22}})
    assert b.left_join(c) == b
    assert c.left_join(a) == Watermark({"z": {"a": 1, "b": 0, "z": 4}})


def test_new_and_add_peer() -> None:
    m = Watermark.new(["b", "a"])
    assert m == Watermark({"a": {"a": 0, "b": 0}, "b": {"a": 0, "b": 0}})
    m = m.update_cell("a", "a", 5).update_cell("a", "b", 3)
    assert m.min("a") == 3
    grown = m.add_peer("c")
    # The newcomer holds nothing yet: no row can be pruned beyond 0 until it catches up.
    assert grown.row("a") == {"a": 5, "b": 3, "c": 0} and grown.min("a") == 0
    assert grown.row("c") == {"a": 0, "b": 0, "c": 0}
    assert grown.peers() == ("a", "b", "c")
    assert Watermark().add_peer("z", ["a", "b"]) == Watermark({"z": {"a": 0, "b": 0, "z": 0}})


def test_retire_peer_keeps_its_row_and_drops_its_column() -> None:
    m = Watermark.new(["a", "b", "c"])
    for peer, base in (("a", 9), ("b", 2), ("c", 7)):
        m = m.update_cell("b", peer, base).update_cell("a", peer, base)
    assert m.min("b") == 2
    retired = m.retire_peer("b")
    assert retired.peers() == ("a", "c") and retired.retired() == ("b",)
    assert retired.row("b") == {"a": 9, "c": 7} and retired.min("b") == 7
    assert retired.row("a") == {"a": 9, "c": 7}
    # retired rows still follow the remaining peers' clocks
    bumped = retired.update_peer("c", NodeClock({"b": (8, 0)}))
    assert bumped.row("b") == {"a": 9, "c": 8} and bumped.min("b") == 8
    assert bumped.left_join(bumped) == bumped


def test_remove_peer_forgets_everything() -> None:
    m = cells()
    assert Watermark().update_cell("a", "b", 4).remove_peer("a") == Watermark()
    assert Watermark().update_cell("a", "b", 4).remove_peer("b") == Watermark({"a": {}})
    assert m.remove_peer("a") == Watermark({"c": {"c": 20}})
    assert m.remove_peer("c") == Watermark({"a": {"b": 4}})
    assert Watermark.new(["a", "b"]).retire_peer("b").remove_peer("b") == Watermark({"a": {"a": 0}})


def test_invalid_and_repr() -> None:
    with pytest.raises(InvalidClockError):
        Watermark({"a": {"b": -1}})
    with pytest.raises(InvalidClockError):
        Watermark({"a": {}}, {"a": {}})
    assert repr(Watermark({"a": {"b": 1}})) == "Watermark({'a': {'b': 1}})"
    assert "retired" in repr(Watermark.new(["a", "b"]).retire_peer("a"))
