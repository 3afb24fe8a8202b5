"""The rebalancer of queue replicas: its decisions (vmqpy.replicas.rebalance, pure) and its driver
(vmqpy.replicas.rebalancer) over a fake transport whose operations are applied to real replica copies."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.replicas.rigs import (
    Links,
    client_ids,
    replicating,
    session_with_messages,
    state_of,
    ticks,
    two_persistent_sessions,
)
from vmqpy.broker.core.persistence import SessionStore, stored_session
from vmqpy.broker.core.session import NullJournal, Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.replicas.rebalance import RebalancePlan, Walk, plan
from vmqpy.replicas.rebalancer import Rebalancer
from vmqpy.sessions.message import Message, decode_record
from vmqpy.storage import Storage

# ------------------------------------------------------------------------------------------ plan and walk


@pytest.mark.parametrize(("targets", "holders", "fresh", "expected"), [
    (["b"], ["b"], False, RebalancePlan((), ())),
    (["c"], ["b"], False, RebalancePlan(("c",), ("b",))),  # a join: c is filled, then b drops its copy
    (["b", "c"], ["b"], False, RebalancePlan(("c",), ())),  # more replicas: c is filled, b keeps its copy
    (["b"], ["b", "c"], False, RebalancePlan((), ("c",))),  # c is no longer a replica node
    (["b"], [], False, RebalancePlan(("b",), ())),  # nobody had a copy (the only member before)
    (["b", "c"], ["b", "c"], True, RebalancePlan(("b", "c"), ())),  # after a start every target is filled again
    ([], ["b"], False, RebalancePlan((), ("b",))),  # alone now (b left: the owner.py holders are members only)
])
def test_plan(targets: list[str], holders: list[str], fresh: bool, expected: RebalancePlan) -> None:
    assert plan(targets, holders, fresh) == expected


NODES = st.lists(st.sampled_from("bcdef"), unique=True, max_size=4)


@given(NODES, NODES, st.booleans())
def test_a_plan_never_drops_a_target_and_leaves_every_target_filled(targets: list[str], holders: list[str],
                                                                    fresh: bool) -> None:
    todo = plan(targets, holders, fresh)
    assert not set(todo.drop) & set(targets)
    assert set(todo.sync) | set(holders) >= set(targets)
    assert set(todo.drop) | set(targets) >= set(holders)  # every copy is kept or dropped on purpose


def test_the_walk_takes_client_ids_at_its_rate_once_each() -> None:
    walk = Walk(rate=100, burst=0.1)  # 10 at most at once
    walk.restart(f"c{i}" for i in range(30))
    walk.restart(["c0", "c1"])  # already waiting: not twice
    assert walk.take(0.0) == [f"c{i}" for i in range(10)]
    assert walk.take(0.0) == []
    assert walk.take(0.05) == [f"c{i}" for i in range(10, 15)]
    assert walk.take(10.0, most=2) == ["c15", "c16"]
    assert len(walk) == 13 and walk.waiting()[0] == "c17"
    walk.restart(["c0"])  # taken already: looked at again
    assert walk.waiting()[-1] == "c0"


def test_a_rate_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        Walk(0)


# ------------------------------------------------------------------------------------------ the driver


def test_a_start_fills_every_replica_node_then_a_join_moves_the_copy_before_dropping_the_old_one() -> None:
    async def run() -> None:
        members = ["a@h", "b@h"]
        links, replicator, journal, sessions, moving, staying = two_persistent_sessions(members)
        sessions["clean"] = Session("clean", protocol_level=5, expiry_interval=0, max_inflight=10,
                                    max_online=10, max_offline=10)
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {m: 1 for m in members}, rate=1000)
        rebalancer.start()
        await ticks()
        assert rebalancer.stats()["sessions_under_replicated"] == 2
        assert rebalancer.stats()["messages_under_replicated"] == 6
        links.deliver_all()
        await ticks()
        assert rebalancer.stats()["sessions_under_replicated"] == 0
        assert links.holds("b@h", moving) == state_of(sessions[moving])
        assert links.holds("b@h", "clean") is None

        members.append("c@h")
        rebalancer.on_membership()
        replicator.message(moving, 99, b"written during the move")  # to c (its new target) and b (a holder)
        assert {node for node, *_ in links.sent} == {"b@h", "c@h"}
        await ticks()
        kinds = links.deliver_all()
        assert ("c@h", "sync") in kinds and ("b@h", "drop") in kinds
        assert kinds.index(("b@h", "drop")) > max(i for i, k in enumerate(kinds) if k[0] == "c@h")
        assert kinds.count(("c@h", "sync")) == 1  # for the moved session only
        await ticks()
        assert links.holds("c@h", moving) == state_of(sessions[moving])
        assert links.holds("b@h", moving) is None
        assert links.holds("b@h", staying) == state_of(sessions[staying])
        assert links.holds("c@h", staying) is None
        assert rebalancer.stats()["sessions_under_replicated"] == 0
        replicator.message(moving, 100, b"after")  # settled: to c only
        assert [node for node, *_ in links.sent] == ["c@h"]
        rebalancer.stop()

    asyncio.run(run())


def test_a_member_back_with_a_new_incarnation_is_filled_again() -> None:
    async def run() -> None:
        members = ["a@h", "b@h"]
        incarnation = {"b@h": 1}
        links, replicator = replicating(members)
        journal = NullJournal()
        sessions = {"c1": session_with_messages("c1", journal, 2)}
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {"a@h": 1, **incarnation}, rate=1000)
        rebalancer.start()
        await ticks()
        links.deliver_all()
        await ticks()
        links.copies.pop("b@h")  # b lost its disk and joined again
        incarnation["b@h"] = 2
        rebalancer.on_membership()
        await ticks()
        assert [k for _n, k in links.deliver_all()] == ["sync", "put", "put"]
        assert links.holds("b@h", "c1") == state_of(sessions["c1"])
        rebalancer.stop()

    asyncio.run(run())


def test_a_sync_to_a_node_that_left_keeps_the_old_copies() -> None:
    async def run() -> None:
        members = ["a@h", "b@h"]
        links, replicator = replicating(members)
        journal = NullJournal()
        moving, _staying = client_ids()
        sessions = {moving: session_with_messages(moving, journal, 1)}
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {m: 1 for m in members}, rate=1000)
        rebalancer.start()
        await ticks()
        links.deliver_all()
        await ticks()
        members.append("c@h")
        rebalancer.on_membership()
        await ticks()
        for _node, _record, _ack, fail in [s for s in links.sent if s[0] == "c@h"]:
            fail("c@h left the cluster")
        links.sent = [s for s in links.sent if s[0] != "c@h"]
        assert links.deliver_all() == []  # b is not told to drop its copy
        assert links.holds("b@h", moving) == state_of(sessions[moving])
        assert rebalancer.stats()["rebalance_failed"] == 1
        rebalancer.stop()

    asyncio.run(run())


def deliver_reachable(links: Links, reachable: set[str]) -> None:
    """Deliver and acknowledge what was sent to the reachable nodes; the rest stays on its way."""
    held = [s for s in links.sent if s[0] not in reachable]
    links.sent = [s for s in links.sent if s[0] in reachable]
    links.deliver_all()
    links.sent = held + links.sent


def test_an_unreachable_member_does_not_hold_up_the_others_and_is_filled_when_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """a restarts (every replica node of every session gets a sync) while c is unreachable: with room for only
    2 syncs at a time, the sessions whose replica node is b are all filled all the same; those of c wait for
    it, keep counting as under-replicated, and are filled once c is reachable again."""
    monkeypatch.setattr("vmqpy.replicas.rebalancer.MAX_SYNCING", 2)

    async def run() -> None:
        members = ["a@h", "b@h", "c@h"]
        reachable = {"a@h", "b@h"}
        links, replicator = replicating(members, lambda n: n in reachable)
        journal = NullJournal()
        sessions = {f"s{i}": session_with_messages(f"s{i}", journal, 1) for i in range(20)}
        on_c = {cid for cid in sessions if replicator.targets(cid) == ["c@h"]}
        assert 0 < len(on_c) < len(sessions)
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {m: 1 for m in members}, rate=1000,
                                reachable=lambda n: n in reachable)
        rebalancer.start()
        for _round in range(20):
            await ticks(1)
            deliver_reachable(links, reachable)
        await ticks()
        for cid in set(sessions) - on_c:
            assert links.holds("b@h", cid) == state_of(sessions[cid])
        assert rebalancer.stats()["sessions_under_replicated"] == len(on_c)
        assert rebalancer.stats()["rebalance_deferred"] == len(on_c)

        reachable.add("c@h")
        rebalancer.on_reachability("c@h", True)
        for _round in range(20):
            await ticks(1)
            deliver_reachable(links, reachable)
        for cid in on_c:
            assert links.holds("c@h", cid) == state_of(sessions[cid])
        assert rebalancer.stats()["sessions_under_replicated"] == 0
        rebalancer.stop()

    asyncio.run(run())


def test_after_a_join_only_the_sessions_that_move_count_as_under_replicated() -> None:
    """At 10 sessions per second, the 60 sessions a join does not touch are looked at at once (they need no
    sync), so right after the join only those whose copy moves to c count as under-replicated."""
    async def run() -> None:
        members = ["a@h", "b@h"]
        links, replicator = replicating(members)
        journal = NullJournal()
        sessions = {f"s{i}": session_with_messages(f"s{i}", journal, 1) for i in range(60)}
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {m: 1 for m in members}, rate=1000)
        rebalancer.start()
        for _round in range(5):
            await ticks(1)
            links.deliver_all()
        assert rebalancer.stats()["sessions_under_replicated"] == 0
        rebalancer._walk = Walk(10.0)  # slow from here on
        members.append("c@h")
        rebalancer.on_membership()
        await ticks(2)
        moving = {cid for cid in sessions if replicator.targets(cid) == ["c@h"]}
        assert 0 < len(moving) < len(sessions)
        assert rebalancer.stats()["sessions_under_replicated"] <= len(moving)
        rebalancer.stop()

    asyncio.run(run())


def test_a_walk_without_a_rate_takes_what_it_is_allowed() -> None:
    walk = Walk(math.inf)
    walk.restart(["a", "b", "c"])
    assert walk.take(0.0, 2) == ["a", "b"]
    assert walk.take(0.0) == ["c"] and walk.take(5.0) == [] and not walk


def test_a_sync_carries_the_session_record_as_stored_with_its_will(tmp_path: Path) -> None:
    """The rebalancer's sync replaces the replica's copy of the session record: it must be the record the
    journal wrote (with the will kept for a connected client or a pending one), or a recovery after a
    rebalance would lose the will."""
    async def run() -> None:
        storage = Storage(tmp_path / "a.db")
        storage.open()
        try:
            members = ["a@h", "b@h"]
            links, replicator = replicating(members)
            store = SessionStore(storage)
            session = Session("c1", protocol_level=5, expiry_interval=3600.0, max_inflight=10, max_online=100,
                              max_offline=100, journal=store)
            will = StoredWill(Message("wills/c1", b"gone", 1), 30.0, None, "alice")
            store.save_session(session, will)
            rebalancer = Rebalancer(replicator, {"c1": session}, store, lambda: {m: 1 for m in members},
                                    rate=1000)
            rebalancer.start()
            await ticks()
            assert ("b@h", "sync") in links.deliver_all()
            copy = links.copies["b@h"].copies_of("c1")["a@h"]
            assert copy.session is not None
            assert stored_session("c1", decode_record(copy.session)).will == will
            await asyncio.wrap_future(storage.barrier())
            restarted = SessionStore(storage)  # after a restart the record is known from the disk
            restarted.load_sessions()
            assert stored_session("c1", decode_record(restarted.record_of(session))).will == will
            store.save_session(session)  # the client said goodbye: no will any more
            assert stored_session("c1", decode_record(store.record_of(session))).will is None
            rebalancer.stop()
        finally:
            storage.close()

    asyncio.run(run())


def test_a_sync_carries_the_sessions_lineage() -> None:
    async def run() -> None:
        members = ["a@h", "b@h"]
        links, replicator = replicating(members)
        journal = NullJournal()
        sessions = {"c1": session_with_messages("c1", journal, 1), "c2": session_with_messages("c2", journal, 1)}
        rebalancer = Rebalancer(replicator, sessions, journal, lambda: {m: 1 for m in members}, rate=1000,
                                lineage_of=lambda cid: b"names of " + cid.encode() if cid == "c1" else None)
        rebalancer.start()
        await ticks()
        kinds = links.deliver_all()
        assert kinds.count(("b@h", "lin")) == 1
        assert list(links.copies["b@h"].copies_of("c1")["a@h"].lineage.values()) == [b"names of c1"]
        assert links.copies["b@h"].copies_of("c2")["a@h"].lineage == {}
        rebalancer.stop()

    asyncio.run(run())
