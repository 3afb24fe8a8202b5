"""The restart fast paths of the metadata store give what the general ones give (docs/performance.md, "Restart").

`add_dots` builds each node's bitmap in one pass where `NodeClock.add_all` ORs one bit at a time;
`read_rows` decodes the common object row (one version, no context) without building a container. Both must
be invisible: the same clock, the same objects, and rows of any other shape still read (or refused) by the
general decoders.
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
from vmqpy.metadata.errors import DecodeError
from vmqpy.metadata.objects import StoredObject
from vmqpy.metadata.replica_clock import add_dots
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


ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
keys = st.tuples(st.one_of(st.text(max_size=5), ints, st.binary(max_size=4)))
values = st.one_of(st.none(), ints, st.text(max_size=8), st.lists(ints, max_size=3))
versions = st.dictionaries(dots, values, max_size=3)
contexts = st.dictionaries(nodes, st.integers(min_value=1, max_value=50), max_size=2)


@given(st.text(min_size=1, max_size=6), keys, versions, contexts)
def test_read_rows_decodes_every_object_as_the_general_decoders_do(
    prefix: str, key: tuple[object, ...], items: dict[tuple[str, int], object], ctx: dict[str, int]
) -> None:
    raw_key = pack_full_key(prefix, key)
    raw_obj = pack_container(CausalContainer(items, VersionVector(ctx)))
    expected = StoredObject.of(unpack_container(raw_obj))
    saved = read_rows({T_OBJ: [(raw_key, raw_obj)]})
    if expected.is_empty():
        assert saved.objects == []
    else:
        assert saved.objects == [(unpack_full_key(raw_key), expected)]


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
    with pytest.raises(DecodeError):
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
