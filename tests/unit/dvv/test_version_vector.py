"""VersionVector: table tests and lattice properties over vectors taken from write histories."""

from __future__ import annotations

import pytest
from hypothesis import given

from dvv import dvvset
from dvv.errors import InvalidClockError
from dvv.version_vector import VersionVector

from .histories import PROPS, DotHistory, DvvHistory, dvv_histories, node_clock_histories


def test_zero_counters_are_dropped_and_order_is_canonical() -> None:
    vv = VersionVector({"b": 2, "a": 0, "c": 1})
    assert dict(vv) == {"b": 2, "c": 1}
    assert list(vv) == ["b", "c"]
    assert vv == VersionVector([("c", 1), ("b", 2)])
    assert vv == {"b": 2, "c": 1, "z": 0}
    assert hash(vv) == hash(VersionVector({"c": 1, "b": 2}))
    assert repr(vv) == "VersionVector({'b': 2, 'c': 1})"


def test_queries() -> None:
    vv = VersionVector({"a": 3})
    assert vv.counter("a") == 3 and vv.counter("zz") == 0
    assert vv["a"] == 3 and "a" in vv and "b" not in vv and len(vv) == 1
    with pytest.raises(KeyError):
        vv["b"]
    assert vv.covers(("a", 3)) and not vv.covers(("a", 4)) and not vv.covers(("b", 1))


def test_merge_glb_increment_add() -> None:
    a = VersionVector({"a": 3, "b": 1})
    b = VersionVector({"b": 4, "c": 2})
    assert a.merge(b) == {"a": 3, "b": 4, "c": 2}
    assert a.glb(b) == {"b": 1}
    assert a.glb({"a": 1, "b": 7}) == {"a": 1, "b": 1}
    assert a.increment("a") == {"a": 4, "b": 1}
    assert a.increment("z") == {"a": 3, "b": 1, "z": 1}
    assert a.add(("a", 2)) is a
    assert a.add(("a", 9)) == {"a": 9, "b": 1}
    assert a == {"a": 3, "b": 1}  # operations never mutate


def test_descends_dominates_concurrent() -> None:
    small = VersionVector({"a": 1})
    big = VersionVector({"a": 2, "b": 1})
    other = VersionVector({"c": 1})
    assert big.descends(small) and big.dominates(small)
    assert big.descends(big) and not big.dominates(big)
    assert not small.descends(big) and not small.dominates(big)
    assert small.concurrent(other) and not big.concurrent(small)
    assert VersionVector().descends({}) and not VersionVector().dominates({})


@pytest.mark.parametrize("bad", [{"a": -1}, {1: 2}, {"a": 1.5}, {"a": True}])
def test_invalid_vectors_are_rejected(bad: dict[object, object]) -> None:
    with pytest.raises(InvalidClockError):
        VersionVector(bad)  # type: ignore[arg-type]


@PROPS
@given(dvv_histories(), node_clock_histories())
def test_lattice_laws(h: DvvHistory, d: DotHistory) -> None:
    vectors = [dvvset.join(c) for c in h.snapshots[:6]] + [c.base() for c in d.clocks]
    for x in vectors:
        for y in vectors:
            m = x.merge(y)
            g = x.glb(y)
            assert m == y.merge(x) and g == y.glb(x)
            assert m.descends(x) and m.descends(y)
            assert x.descends(g) and y.descends(g)
            assert x.merge(g) == x  # absorption
            assert x.glb(m) == x
            assert x.dominates(y) == (x.descends(y) and x != y)
            assert not (x.dominates(y) and y.dominates(x))
