"""The restart fast paths of the metadata store give what the general ones give (docs/performance.md, "Restart").

`add_dots` builds each node's bitmap in one pass where `NodeClock.add_all` ORs one bit at a time;
`read_rows` decodes the common object row (one version, no context) without building a container, straight into
the tables the replica adopts (`ObjectTable.adopt`, `DotIndex.adopt`, `add_counters`). All must be invisible: the
same clock, the same tables and index as decoding every row with the general decoders and keeping them one by
one, and rows of any other shape still read (or refused) by the general decoders.
"""

from __future__ import annotations

import gc

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvv.causal_container import CausalContainer
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from vmqpy.bulk_load import FREEZE_AT, bulk_load
from vmqpy.metadata.dot_index import DotIndex
from vmqpy.metadata.errors import MessageDecodeError
from vmqpy.metadata.objects import ObjectTable, StoredObject
from vmqpy.metadata.replica_clock import add_counters, add_dots
from vmqpy.metadata.rows import T_OBJ, pack_container, pack_full_key, read_rows, unpack_container, unpack_full_key

nodes = st.sampled_from(["a", "b", "c#2"])
dots = st.tuples(nodes, st.integers(min_value=1, max_value=300))
clocks = st.lists(dots, max_size=40).map(lambda ds: NodeClock().add_all(ds))


@given(clocks, st.lists(dots, max_size=200))
def test_add_dots_is_add_all(clock: NodeClock, more: list[tuple[str, int]]) -> None:
    assert add_dots(clock, more) == clock.add_all(more)


def test_add_dots_table() -> None:
    assert add_dots(NodeClock(), []) == NodeClock()
    assert add_dots(NodeClock(), [("a", 1), ("a", 2), ("a", 4)]).entry("a") == (2, 0b10)
    assert add_dots(NodeClock({"a": (5, 0)}), [("a", 3), ("a", 7)]).entry("a") == (5, 0b10), "3 is below the base"
    big = add_dots(NodeClock(), [("a", c) for c in range(2, 200_001)])  # a gap at 1: the bitmap holds them all
    assert big.entry("a") == (0, (1 << 200_000) - 2)


@given(clocks, st.dictionaries(nodes, st.lists(st.integers(min_value=1, max_value=300), max_size=50), max_size=3))
def test_add_counters_is_add_dots(clock: NodeClock, by_node: dict[str, list[int]]) -> None:
    assert add_counters(clock, by_node) == add_dots(clock, [(n, c) for n, cs in by_node.items() for c in cs])


ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
keys = st.tuples(st.one_of(st.text(max_size=5), ints, st.binary(max_size=4)))
values = st.one_of(st.none(), ints, st.text(max_size=8), st.lists(ints, max_size=3))
versions = st.dictionaries(dots, values, max_size=3)
contexts = st.dictionaries(nodes, st.integers(min_value=1, max_value=50), max_size=2)


def one_by_one(rows: list[tuple[bytes, bytes]]) -> tuple[ObjectTable, DotIndex]:
    """The tables as the general decoders and `ObjectTable.keep` make them, row by row (what `read_rows` must give)."""
    table, index = ObjectTable(), DotIndex()
    for raw_key, raw_obj in rows:
        fk, obj = unpack_full_key(raw_key), StoredObject.of(unpack_container(raw_obj))
        if obj.is_empty():
            continue
        table.keep(fk, obj)
        for dot, _value in obj.versions:
            index.add(dot, fk)
    return table, index


def adopted(rows: list[tuple[bytes, bytes]]) -> tuple[ObjectTable, DotIndex]:
    saved = read_rows({T_OBJ: rows})
    table, index = ObjectTable(), DotIndex()
    table.adopt(saved.objects, saved.odd)
    index.adopt(saved.dots)
    return table, index


def same_tables(got: tuple[ObjectTable, DotIndex], expected: tuple[ObjectTable, DotIndex]) -> None:
    (table, index), (want_table, want_index) = got, expected
    for prefix in {*table._by_prefix, *want_table._by_prefix}:
        assert table.items(prefix) == want_table.items(prefix), "same objects, in row order"
    assert table._by_prefix.keys() == want_table._by_prefix.keys()
    assert table._with_context == want_table._with_context and table._dead == want_table._dead
    assert table._with_siblings == want_table._with_siblings and table.sizes() == want_table.sizes()
    assert index.by_node == want_index.by_node


small_keys = st.tuples(st.sampled_from(["k", "l", 7, b"\x00"]))
rows_of = st.lists(st.tuples(st.sampled_from(["p", "q"]), st.one_of(small_keys, keys), versions, contexts), max_size=8)


@given(rows_of)
def test_read_rows_gives_the_tables_of_the_general_decoders(rows: list[tuple[str, tuple[object, ...],
                                                                               dict[tuple[str, int], object],
                                                                               dict[str, int]]]) -> None:
    """Any mix of rows (common ones, siblings, contexts, tombstones, empty objects, two rows of one key)."""
    packed = [(pack_full_key(p, k), pack_container(CausalContainer(items, VersionVector(ctx))))
              for p, k, items, ctx in rows]
    same_tables(adopted(packed), one_by_one(packed))


def test_read_rows_table() -> None:
    def row(key: str, items: dict[tuple[str, int], object], ctx: dict[str, int] | None = None) -> tuple[bytes, bytes]:
        return pack_full_key("p", (key,)), pack_container(CausalContainer(items, VersionVector(ctx or {})))

    saved = read_rows({T_OBJ: [row("a", {("n", 1): 1}), row("b", {("n", 2): 2, ("m", 1): 3}),
                               row("c", {}, {"n": 3}), row("d", {}), row("a", {("n", 4): 4})]})
    a = saved.objects["p"][("a",)]
    assert list(saved.objects["p"]) == [("a",), ("b",), ("c",)], "an empty object is left out; a's later row wins"
    assert a.versions == ((("n", 4), 4),) and a.ctx == VersionVector()
    assert saved.odd == [("p", ("b",)), ("p", ("c",))], "siblings and a tombstone with a context"
    assert saved.dots == {"n": {1: ("p", ("a",)), 2: ("p", ("b",)), 4: ("p", ("a",))}, "m": {1: ("p", ("b",))}}
    assert read_rows({}).objects == {} and read_rows({}).dots == {}


def test_adopt_needs_empty_tables() -> None:
    table, index = adopted([(pack_full_key("p", ("k",)), pack_container(CausalContainer({("n", 1): 0})))])
    with pytest.raises(ValueError, match="empty"):
        table.adopt({}, [])
    with pytest.raises(ValueError, match="empty"):
        index.adopt({})


@pytest.mark.parametrize(
    ("raw_key", "raw_obj", "message"),
    [
        (b"\x01" + msgpack.packb(["p", [True]]), b"\x01" + msgpack.packb([["a", 1, 0], []]), "key items"),
        (b"\x01" + msgpack.packb(["p", ["k"]]), b"\x01" + msgpack.packb([["a", 0, 0], []]), "counter"),
        (b"\x01" + msgpack.packb(["p", ["k"]]), b"\x01" + msgpack.packb([[1, 1, 0], []]), "dot node"),
        (b"\x01" + msgpack.packb(["p", ["k"]]), b"\x01\xc1", "not msgpack"),
        (b"\x02" + msgpack.packb(["p", ["k"]]), b"\x01" + msgpack.packb([["a", 1, 0], []]), "row version"),
        (b"\x01" + msgpack.packb(["p", ["k"]]), b"\x01" + msgpack.packb([["a", 1, 0], ["a"]]), "context"),
    ],
)
def test_rows_that_are_not_ours_are_still_refused(raw_key: bytes, raw_obj: bytes, message: str) -> None:
    with pytest.raises(MessageDecodeError):
        read_rows({T_OBJ: [(raw_key, raw_obj)]})


def test_bulk_load_pauses_the_collector_and_freezes_only_large_loads() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with bulk_load() as load:
        assert not gc.isenabled()
        with bulk_load() as inner:  # nested: the inner one leaves the collector to the outer one
            inner.records = FREEZE_AT
        assert not gc.isenabled() and gc.get_freeze_count() == frozen
        load.records = FREEZE_AT - 1
    assert gc.isenabled() and gc.get_freeze_count() == frozen, "a small load is not frozen"
    try:
        with bulk_load() as load:
            load.records = FREEZE_AT
        assert gc.isenabled() and gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
    with pytest.raises(RuntimeError), bulk_load():
        raise RuntimeError("a failed load")
    assert gc.isenabled(), "the collector comes back after a failed load"
