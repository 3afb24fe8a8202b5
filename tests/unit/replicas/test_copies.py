"""The replica side's copies (vmqpy.replicas.copies): applied in any order, the same state as in order; the disk
and the memory agree; tombstones are pruned."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.replicas.tables import MemoryTable, state
from vmqpy.replicas.copies import REPLICA_TABLE, Copy, ReplicaCopies
from vmqpy.replicas.ops import Op


def test_a_session_copy_is_put_changed_and_dropped() -> None:
    disk = MemoryTable()
    copies = ReplicaCopies(disk)
    copies.apply("a", Op("session", "c1", value=b"s"), 1)
    copies.apply("a", Op("put", "c1", seq=1, value=b"m1"), 2)
    copies.apply("a", Op("put", "c1", seq=2, value=b"m2"), 3)
    copies.apply("a", Op("in", "c1", packet_id=9, present=True), 4)
    copies.apply("a", Op("del", "c1", seq=1), 5)
    copies.apply("b", Op("put", "c1", seq=1, value=b"other owner"), 1)
    assert copies.copies_of("c1") == {
        "a": Copy(b"s", {2: b"m2"}, {9}, copies.copies_of("c1")["a"].versions),
        "b": Copy(None, {1: b"other owner"}, set(), {("m", 1): 1}),
    }
    assert copies.counts_for("a") == {"c1": 1}
    reloaded = ReplicaCopies(disk)
    reloaded.load()
    assert state(reloaded, ["c1"]) == state(copies, ["c1"])
    copies.apply("a", Op("drop", "c1"), 6)
    assert list(copies.copies_of("c1")) == ["b"]
    assert all(not k.startswith(b"a\0") for _t, k in disk.rows)
    copies.apply("a", Op("put", "c1", seq=3, value=b"late"), 4)  # numbered before the drop: ignored
    assert list(copies.copies_of("c1")) == ["b"]


def test_operations_overtaken_by_newer_ones_are_not_applied() -> None:
    copies = ReplicaCopies(MemoryTable())
    assert copies.apply("a", Op("del", "c", seq=1), 2)
    assert not copies.apply("a", Op("put", "c", seq=1, value=b"x"), 1)  # the deleted message stays deleted
    assert copies.copies_of("c") == {}
    assert copies.tombstones() == 1
    copies.prune("a", 2)  # every operation up to 2 arrived: the tombstone goes
    assert copies.tombstones() == 0
    copies.apply("a", Op("put", "c", seq=5, value=b"y"), 7)
    copies.new_run("a")  # the owner restarted: its numbers start at 1 again
    assert copies.apply("a", Op("del", "c", seq=5), 1)
    assert copies.copies_of("c") == {}


def test_a_drop_overtaken_by_newer_operations_keeps_them() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("a", Op("put", "c", seq=1, value=b"old"), 1)
    copies.apply("a", Op("put", "c", seq=2, value=b"new"), 3)  # arrived before the drop numbered 2
    copies.apply("a", Op("drop", "c"), 2)
    assert copies.copies_of("c")["a"].messages == {2: b"new"}


OPS = st.one_of(
    st.builds(lambda s, v: Op("put", "c", seq=s, value=v), st.integers(1, 4), st.binary(max_size=3)),
    st.builds(lambda s: Op("del", "c", seq=s), st.integers(1, 4)),
    st.builds(lambda p, b: Op("in", "c", packet_id=p, present=b), st.integers(1, 3), st.booleans()),
    st.builds(lambda v: Op("session", "c", value=v), st.binary(min_size=1, max_size=3)),
    st.just(Op("drop", "c")),
)


@given(st.lists(OPS, max_size=25), st.randoms(use_true_random=False))
def test_any_arrival_order_gives_the_state_of_the_numbered_order(ops: list[Op], rng: random.Random) -> None:
    in_order = ReplicaCopies(MemoryTable())
    for number, op in enumerate(ops, 1):
        in_order.apply("a", op, number)
    disk = MemoryTable()
    shuffled = ReplicaCopies(disk)
    numbered = list(enumerate(ops, 1))
    rng.shuffle(numbered)
    for number, op in numbered:
        shuffled.apply("a", op, number)
    assert state(shuffled, ["c"]) == state(in_order, ["c"])
    reloaded = ReplicaCopies(disk)
    reloaded.load()
    assert state(reloaded, ["c"]) == state(in_order, ["c"])
    shuffled.prune("a", len(ops))
    assert shuffled.tombstones() == 0
    assert all(t == REPLICA_TABLE for t, _k in disk.rows)


def test_lineage_batches_are_added_kept_across_a_restart_and_replaced_by_a_sync() -> None:
    disk = MemoryTable()
    copies = ReplicaCopies(disk)
    copies.apply("a", Op("session", "c1", value=b"s"), 1)
    copies.apply("a", Op("lin", "c1", value=b"first"), 2)
    copies.apply("a", Op("lin", "c1", value=b"second"), 3)
    assert copies.copies_of("c1")["a"].lineage == {1: b"first", 2: b"second"}
    reloaded = ReplicaCopies(disk)
    reloaded.load()
    assert reloaded.copies_of("c1")["a"].lineage == {1: b"first", 2: b"second"}
    copies.apply("a", Op("lin", "c1", value=b"after the sync"), 6)  # overtook the sync below
    copies.apply("a", Op("sync", "c1", value=b"s2"), 5)  # the owner's whole state as of 5: older batches go
    assert sorted(copies.copies_of("c1")["a"].lineage.values()) == [b"after the sync"]
    copies.apply("a", Op("lin", "c1", value=b"numbered before the sync"), 4)
    assert sorted(copies.copies_of("c1")["a"].lineage.values()) == [b"after the sync"]
    copies.apply("a", Op("drop", "c1"), 7)
    assert copies.copies_of("c1") == {} and not any(k.startswith(b"a\0") for _t, k in disk.rows)
