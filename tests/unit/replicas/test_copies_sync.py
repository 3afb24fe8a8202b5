"""The `sync` operation on the replica side (vmqpy.replicas.copies): it replaces the owner's copy of a session
as of its number, whatever order the operations arrive in."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.replicas.tables import MemoryTable, state
from vmqpy.replicas.copies import REPLICA_TABLE, ReplicaCopies
from vmqpy.replicas.ops import Op


def test_a_sync_replaces_the_copy_and_the_messages_follow_it() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("a", Op("put", "c", seq=1, value=b"stale"), 1)  # delivered later; its del was lost
    copies.apply("a", Op("in", "c", packet_id=9, present=True), 2)
    copies.apply("a", Op("sync", "c", value=b"rec", incoming=(4,)), 3)
    copies.apply("a", Op("put", "c", seq=2, value=b"queued"), 4)
    assert state(copies, ["c"]) == {("a", "c"): (b"rec", {2: b"queued"}, {4})}


def test_operations_numbered_before_a_sync_that_arrive_after_it_are_ignored() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("a", Op("sync", "c", value=b"rec"), 5)
    assert not copies.apply("a", Op("put", "c", seq=1, value=b"old"), 2)
    assert not copies.apply("a", Op("session", "c", value=b"older"), 3)
    assert state(copies, ["c"]) == {("a", "c"): (b"rec", {}, set())}


def test_a_sync_overtaken_by_newer_operations_keeps_them() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("a", Op("del", "c", seq=2), 6)  # the message was delivered after the snapshot was taken
    copies.apply("a", Op("session", "c", value=b"newer"), 7)
    copies.apply("a", Op("sync", "c", value=b"rec", incoming=(1,)), 4)
    assert not copies.apply("a", Op("put", "c", seq=2, value=b"m"), 5)  # the snapshot's copy of it: deleted since
    assert state(copies, ["c"]) == {("a", "c"): (b"newer", {}, {1})}


def test_a_sync_without_numbers_replaces_the_copy() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("a", Op("put", "c", seq=1, value=b"x"))
    copies.apply("a", Op("sync", "c", value=b"rec"))
    assert state(copies, ["c"]) == {("a", "c"): (b"rec", {}, set())}


def test_a_sync_from_one_owner_leaves_another_owners_copy() -> None:
    copies = ReplicaCopies(MemoryTable())
    copies.apply("b", Op("put", "c", seq=1, value=b"b's"), 1)
    copies.apply("a", Op("sync", "c", value=b"rec"), 1)
    assert set(copies.copies_of("c")) == {"a", "b"}


def model(ops: list[Op]) -> dict[tuple[str, str], tuple[object, ...]]:
    """The owner's state after `ops` in their numbered order, written without copies.py."""
    session: bytes | None = None
    messages: dict[int, bytes] = {}
    incoming: set[int] = set()
    for op in ops:
        if op.kind == "put":
            messages[op.seq] = op.value
        elif op.kind == "del":
            messages.pop(op.seq, None)
        elif op.kind == "in":
            (incoming.add if op.present else incoming.discard)(op.packet_id)
        elif op.kind == "session":
            session = op.value
        else:
            session, messages, incoming = None, {}, set()
            if op.kind == "sync":
                session, incoming = op.value, set(op.incoming)
    if session is None and not messages and not incoming:
        return {}
    return {("a", "c"): (session, messages, incoming)}


OPS = st.one_of(
    st.builds(lambda s, v: Op("put", "c", seq=s, value=v), st.integers(1, 4), st.binary(max_size=3)),
    st.builds(lambda s: Op("del", "c", seq=s), st.integers(1, 4)),
    st.builds(lambda p, b: Op("in", "c", packet_id=p, present=b), st.integers(1, 3), st.booleans()),
    st.builds(lambda v: Op("session", "c", value=v), st.binary(min_size=1, max_size=3)),
    st.just(Op("drop", "c")),
    st.builds(lambda v, ids: Op("sync", "c", value=v, incoming=tuple(sorted(ids))),
              st.binary(min_size=1, max_size=3), st.sets(st.integers(1, 3))),
)


@given(st.lists(OPS, max_size=25), st.randoms(use_true_random=False))
def test_with_syncs_any_arrival_order_gives_the_state_of_the_numbered_order(ops: list[Op],
                                                                           rng: random.Random) -> None:
    disk = MemoryTable()
    shuffled = ReplicaCopies(disk)
    numbered = list(enumerate(ops, 1))
    rng.shuffle(numbered)
    for number, op in numbered:
        shuffled.apply("a", op, number)
    assert state(shuffled, ["c"]) == model(ops)
    reloaded = ReplicaCopies(disk)
    reloaded.load()
    assert state(reloaded, ["c"]) == model(ops)
    shuffled.prune("a", len(ops))
    assert shuffled.tombstones() == 0
    assert all(t == REPLICA_TABLE for t, _k in disk.rows)


@given(st.lists(OPS, max_size=12), st.lists(OPS, max_size=12), st.randoms(use_true_random=False))
def test_a_sync_after_a_restart_of_the_owner_gives_its_state(before: list[Op], after: list[Op],
                                                             rng: random.Random) -> None:
    """An owner restarted (its numbers start again) and sends a sync first: the copy is its state, whatever
    the previous run left behind (operations it had not acknowledged are lost with the restart)."""
    copies = ReplicaCopies(MemoryTable())
    for number, op in enumerate(before, 1):
        if rng.random() < 0.7:
            copies.apply("a", op, number)
    copies.new_run("a")
    start = [Op("sync", "c", value=b"s")]
    numbered = list(enumerate(start + after, 1))
    rng.shuffle(numbered)
    for number, op in numbered:
        copies.apply("a", op, number)
    assert state(copies, ["c"]) == model(start + after)
