"""CausalContainer (dotted causal container): table tests and the strip/fill property."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dvv.causal_container import CausalContainer
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector

from .histories import PROPS, DotHistory, DvvHistory, dvv_histories, dvv_to_container, node_clock_histories, unhashable

D1 = CausalContainer({("a", 8): "red", ("b", 2): "green"}, {})
D2 = CausalContainer({}, {"a": 4, "b": 20})
D3 = CausalContainer({("a", 1): "black", ("a", 3): "red", ("b", 1): "green", ("b", 2): "green"}, {"a": 4, "b": 7})
D4 = CausalContainer({("a", 2): "gray", ("a", 3): "red", ("a", 5): "red", ("b", 2): "green"}, {"a": 5, "b": 5})
D5 = CausalContainer({("a", 5): "gray"}, {"a": 5, "b": 5, "c": 4})


def test_values_and_context() -> None:
    assert D1.values() == ["red", "green"]
    assert D2.values() == [] and D2.context() == {"a": 4, "b": 20}
    assert D1.context() == VersionVector()
    assert D1.dots() == (("a", 8), ("b", 2))


def test_sync() -> None:
    assert D3.sync(D3) == D3
    assert D4.sync(D4) == D4
    expected = CausalContainer({("a", 3): "red", ("a", 5): "red", ("b", 2): "green"}, {"a": 5, "b": 7})
    assert D3.sync(D4) == expected
    assert D4.sync(D3) == expected


def test_add() -> None:
    assert D1.add(("a", 11), "purple") == CausalContainer(
        {("a", 8): "red", ("a", 11): "purple", ("b", 2): "green"}, {"a": 11}
    )
    assert D2.add(("b", 11), "purple") == CausalContainer({("b", 11): "purple"}, {"a": 4, "b": 20})


def test_discard() -> None:
    assert D3.discard({}) == D3
    assert D3.discard({"a": 2, "b": 15, "c": 15}) == CausalContainer({("a", 3): "red"}, {"a": 4, "b": 15, "c": 15})
    assert D3.discard({"a": 3, "b": 15, "c": 15}) == CausalContainer({}, {"a": 4, "b": 15, "c": 15})


def test_delete_keeps_a_context_that_covers_what_it_deleted() -> None:
    deleted = D3.delete(D3.context(), ("a", 9))
    assert deleted.values() == [] and deleted.is_deleted() and not deleted.is_empty()
    assert deleted.context() == {"a": 9, "b": 7}
    # An old replica still holding the values loses them when it syncs with the delete.
    assert D3.sync(deleted) == deleted
    # A concurrent write (not covered) survives the delete.
    concurrent = D3.add(("c", 1), "blue")
    assert concurrent.sync(deleted).values() == ["blue"]


def test_strip() -> None:
    assert D5.strip(NodeClock({"a": (4, 4)})) == D5
    assert D5.strip(NodeClock({"a": (5, 0)})) == CausalContainer({("a", 5): "gray"}, {"b": 5, "c": 4})
    assert D5.strip(NodeClock({"a": (15, 0)})) == CausalContainer({("a", 5): "gray"}, {"b": 5, "c": 4})
    assert D5.strip(NodeClock({"a": (15, 4), "b": (1, 2)})) == CausalContainer({("a", 5): "gray"}, {"b": 5, "c": 4})
    assert D5.strip(NodeClock({"b": (15, 4), "c": (1, 2)})) == CausalContainer({("a", 5): "gray"}, {"a": 5, "c": 4})
    assert D5.strip(NodeClock({"a": (15, 4), "b": (15, 4), "c": (5, 2)})) == CausalContainer({("a", 5): "gray"}, {})


def test_fill() -> None:
    nc = NodeClock({"a": (9, 6), "d": (15, 12)})
    assert D5.fill(NodeClock({"a": (4, 4)})) == D5
    assert D5.fill(NodeClock({"a": (5, 0)})) == D5
    assert D5.fill(NodeClock({"a": (6, 0)})) == CausalContainer({("a", 5): "gray"}, {"a": 6, "b": 5, "c": 4})
    assert D5.fill(NodeClock({"a": (15, 12)})) == CausalContainer({("a", 5): "gray"}, {"a": 15, "b": 5, "c": 4})
    assert D5.fill(NodeClock({"d": (15, 12)})) == CausalContainer({("a", 5): "gray"}, {"a": 5, "b": 5, "c": 4, "d": 15})
    assert D5.fill(nc) == CausalContainer({("a", 5): "gray"}, {"a": 9, "b": 5, "c": 4, "d": 15})
    assert D5.fill(nc, ["a"]) == CausalContainer({("a", 5): "gray"}, {"a": 9, "b": 5, "c": 4})
    assert D5.fill(nc, ["b", "a"]) == CausalContainer({("a", 5): "gray"}, {"a": 9, "b": 5, "c": 4})
    assert D5.fill(nc, ["d", "a"]) == CausalContainer({("a", 5): "gray"}, {"a": 9, "b": 5, "c": 4, "d": 15})
    assert D5.fill(nc, ["b"]) == D5
    assert D5.fill(nc, ["f"]) == D5


def test_empty_and_repr_and_unhashable_values() -> None:
    assert CausalContainer().is_empty() and not CausalContainer().is_deleted()
    assert not D1.is_empty() and not D2.is_empty() and D2.is_deleted()
    assert repr(D5) == "CausalContainer({('a', 5): 'gray'}, context={'a': 5, 'b': 5, 'c': 4})"
    v = unhashable("x")
    c = CausalContainer().add(("a", 1), v)
    assert c.sync(c).values() == [v] and hash(c) == hash(c.sync(c))


@PROPS
@given(dvv_histories(), node_clock_histories(), st.data())
def test_fill_of_strip_keeps_every_value(h: DvvHistory, d: DotHistory, data: st.DataObject) -> None:
    container = dvv_to_container(data.draw(st.sampled_from(h.snapshots)))
    nc = data.draw(st.sampled_from(d.clocks))
    stripped = container.strip(nc)
    restored = stripped.fill(nc)
    assert restored.items() == container.items()
    assert restored.context() == container.context().merge(nc.base())
    assert all(counter > nc.base().counter(node) for node, counter in stripped.context().items())
    assert restored.strip(nc) == stripped  # strip after fill gives the stored form back


@PROPS
@given(dvv_histories(), st.data())
def test_sync_laws(h: DvvHistory, data: st.DataObject) -> None:
    a, b, c = (dvv_to_container(data.draw(st.sampled_from(h.snapshots))) for _ in range(3))
    assert a.sync(b) == b.sync(a)
    assert a.sync(b).sync(c) == a.sync(b.sync(c))
    assert a.sync(a) == a
