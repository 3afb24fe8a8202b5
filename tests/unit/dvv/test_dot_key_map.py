"""DotKeyMap: table tests and a stateful test against a plain dict model."""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dvv import codec
from dvv.causal_container import CausalContainer
from dvv.dot_key_map import DotKeyMap, PruneResult
from dvv.dots import Dot
from dvv.errors import InvalidClockError
from dvv.node_clock import NodeClock
from dvv.watermark import Watermark


def k5() -> DotKeyMap:
    m = DotKeyMap().add(("a", 1), "k1").add(("a", 2), "k2").add(("b", 4), "kb")
    return m.add(("b", 2), "kb2").add(("c", 20), "kc")


def test_add_and_queries() -> None:
    m = k5()
    assert m.to_dict() == {("a", 1): "k1", ("a", 2): "k2", ("b", 2): "kb2", ("b", 4): "kb", ("c", 20): "kc"}
    assert len(m) == 5 and m.size("a") == 2 and m.size("b") == 2 and m.size("c") == 1 and m.size("d") == 0
    assert m.get(("b", 4)) == "kb" and m.get(("b", 5)) is None
    assert ("a", 1) in m and ("a", 3) not in m and "a" not in m
    assert not m.is_empty() and DotKeyMap().is_empty()
    assert m.nodes() == ("a", "b", "c")
    assert DotKeyMap().add(("a", 1), "k1") == DotKeyMap({("a", 1): "k1"})
    assert repr(DotKeyMap({("a", 1): "k1"})) == "DotKeyMap({('a', 1): 'k1'})"


def test_add_container_maps_every_version() -> None:
    o1 = CausalContainer({("z", 8): "red", ("z", 11): "purple", ("b", 3): "green"}, {"a": 11})
    o2 = CausalContainer({("b", 11): "purple"}, {"a": 4, "b": 20})
    m1 = DotKeyMap({("a", 1): "k1"})
    m6 = m1.add_container("k100", o1).add_container("k200", o2)
    m7 = m1.add_container("k200", o2).add_container("k100", o1)
    assert m6 == m7
    assert m6.to_dict() == {
        ("a", 1): "k1",
        ("b", 3): "k100",
        ("b", 11): "k200",
        ("z", 8): "k100",
        ("z", 11): "k100",
    }


def test_keys_for() -> None:
    m = k5()
    assert m.keys_for({"a": [1]}) == {"k1": (("a", 1),)}
    assert m.keys_for({"a": [1, 2]}) == {"k1": (("a", 1),), "k2": (("a", 2),)}
    assert m.keys_for({"a": [1, 2, 5, 6]}) == {"k1": (("a", 1),), "k2": (("a", 2),)}
    assert list(m.keys_for({"b": [4, 5, 11], "a": [1, 2, 22]})) == ["k1", "k2", "kb"]
    assert DotKeyMap({("a", 1): "k1"}).keys_for({"a": [2], "b": [4, 5]}) == {}
    same_key = DotKeyMap({("a", 1): "k", ("b", 7): "k"})
    assert same_key.keys_for({"a": [1], "b": range(1, 10)}) == {"k": (("a", 1), ("b", 7))}


def test_keys_for_takes_missing_dots_directly() -> None:
    m = DotKeyMap({("a", 9_000): "k1", ("a", 15_000): "k2", ("b", 3): "k3"})
    ahead = NodeClock({"a": (20_000, 0), "b": (3, 0)})
    behind = NodeClock({"a": (10_000, 0), "b": (3, 0)})
    assert m.keys_for(ahead.missing_dots(behind)) == {"k2": (("a", 15_000),)}


def test_prune() -> None:
    m = k5()
    m1 = Watermark()
    m2 = m1.update_cell("a", "c", 1)
    m3 = m2.update_cell("a", "a", 2)
    m4 = m3.update_cell("a", "c", 2)
    m5 = m4.update_cell("b", "x", 10)
    m6 = m5.update_cell("z", "c", 190)
    m7 = m6.update_cell("c", "c", 200)
    assert m.prune(m1) == PruneResult((), m)
    assert m.prune(m2) == ((("k1",)), DotKeyMap({("a", 2): "k2", ("b", 2): "kb2", ("b", 4): "kb", ("c", 20): "kc"}))
    assert m.prune(m3).keys == ("k1",)
    assert m.prune(m4) == (("k1", "k2"), DotKeyMap({("b", 2): "kb2", ("b", 4): "kb", ("c", 20): "kc"}))
    assert m.prune(m5) == (("k1", "k2", "kb2", "kb"), DotKeyMap({("c", 20): "kc"}))
    assert m.prune(m6).remaining == DotKeyMap({("c", 20): "kc"})
    keys, remaining = m.prune(m7)
    assert keys == ("k1", "k2", "kb2", "kb", "kc") and remaining.is_empty()


def test_prune_reports_a_key_once() -> None:
    m = DotKeyMap({("a", 1): "k", ("a", 2): "k", ("b", 1): "k", ("b", 5): "other"})
    wm = Watermark({"a": {"x": 2}, "b": {"x": 9}})
    assert m.prune(wm) == (("k", "other"), DotKeyMap())


def test_remove_and_invalid() -> None:
    m = k5()
    assert m.remove(("a", 1)).get(("a", 1)) is None and len(m.remove(("a", 1))) == 4
    assert m.remove(("q", 1)) is m
    with pytest.raises(InvalidClockError):
        m.add(("a", 3), ["unhashable"])  # type: ignore[arg-type]  # deliberately unhashable: refused
    with pytest.raises(InvalidClockError):
        m.add(("a", 0), "k")


# -- stateful test against a dict model --------------------------------------------------------------
NODES = ["a", "b", "c"]
dots_st = st.tuples(st.sampled_from(NODES), st.integers(1, 12))
keys_st = st.sampled_from(["k1", "k2", "k3", ("t", 1), 7])


class DotKeyMapMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dkm = DotKeyMap()
        self.model: dict[Dot, Hashable] = {}

    @rule(dot=dots_st, key=keys_st)
    def add(self, dot: Dot, key: Hashable) -> None:
        before, old = self.dkm, self.model.get(dot)
        self.dkm = self.dkm.add(dot, key)
        self.model[dot] = key
        assert before.get(dot) == old  # the old map is untouched (copy-on-write)
        assert self.dkm.get(dot) == key

    @rule(items=st.lists(st.tuples(dots_st, keys_st), max_size=6))
    def add_many(self, items: list[tuple[Dot, Hashable]]) -> None:
        self.dkm = self.dkm.add_many(items)
        self.model.update(items)

    @rule(dot=dots_st)
    def remove(self, dot: Dot) -> None:
        self.dkm = self.dkm.remove(dot)
        self.model.pop(dot, None)

    @rule(floors=st.dictionaries(st.sampled_from(NODES), st.lists(st.integers(0, 12), min_size=1, max_size=3)))
    def prune(self, floors: dict[str, list[int]]) -> None:
        wm = Watermark({node: {f"p{i}": c for i, c in enumerate(cs)} for node, cs in floors.items()})
        keys, remaining = self.dkm.prune(wm)
        gone = sorted(d for d in self.model if d[1] <= (min(floors[d[0]]) if d[0] in floors else 0))
        assert keys == tuple(dict.fromkeys(self.model[d] for d in gone))
        for d in gone:
            del self.model[d]
        self.dkm = remaining

    @rule(missing=st.dictionaries(st.sampled_from([*NODES, "zz"]), st.sets(st.integers(1, 14), max_size=6)))
    def keys_for(self, missing: dict[str, set[int]]) -> None:
        asked = sorted((n, c) for n, cs in missing.items() for c in cs if (n, c) in self.model)
        expected: dict[Hashable, list[Dot]] = {}
        for dot in asked:
            expected.setdefault(self.model[dot], []).append(dot)
        assert self.dkm.keys_for(missing) == {k: tuple(v) for k, v in expected.items()}

    @invariant()
    def matches_model(self) -> None:
        assert self.dkm.to_dict() == dict(sorted(self.model.items()))
        assert len(self.dkm) == len(self.model)
        assert self.dkm.is_empty() == (not self.model)
        for node in NODES:
            assert self.dkm.size(node) == sum(1 for d in self.model if d[0] == node)

    @invariant()
    def survives_the_codec(self) -> None:
        assert codec.from_bytes(codec.to_bytes(self.dkm)) == self.dkm


DotKeyMapMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestDotKeyMapAgainstDict = DotKeyMapMachine.TestCase
