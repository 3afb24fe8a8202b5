"""Anti-entropy: the responder's batch planner, the requester's state machine and its failure paths."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from dvv.dots import Counters
from dvv.node_clock import NodeClock
from vmqpy.metadata.exchange import Exchange, ExchangeState, plan_reply
from vmqpy.metadata.messages import SyncReject, SyncReply, SyncRequest
from vmqpy.metadata.replica import Logged, Output, Replica, SendTo

from .helpers import cluster, pair, settle


def test_plan_reply_batches_by_key_and_reports_gaps() -> None:
    clock = NodeClock({"a": (10, 0), "b": (3, 0)})
    index = {"a": {2: "k1", 3: "k1", 5: "k2", 9: "k3"}, "b": {3: "k4"}}
    requester = NodeClock({"a": (1, 0)})
    plan = plan_reply(clock, index, requester, limit=2)
    assert plan.missing == 9 + 3
    assert plan.keys == {"k1": [("a", 2), ("a", 3)], "k2": [("a", 5)]}
    assert not plan.done
    assert plan.gaps == {"a": Counters([4, 6, 7, 8])}, "only the visited part: stops before (a, 9)"
    # The requester now holds everything visited; the next plan continues after it.
    requester = requester.add_all([("a", c) for c in range(2, 9)])
    plan = plan_reply(clock, index, requester, limit=2)
    assert plan.keys == {"k3": [("a", 9)], "k4": [("b", 3)]}
    assert plan.gaps == {"a": Counters([10]), "b": Counters([1, 2])}
    assert plan.done


def test_plan_reply_for_an_empty_requester_walks_big_gaps_cheaply() -> None:
    clock = NodeClock({"a": (1_000_000, 0)})
    index = {"a": {999_999: "k"}}
    plan = plan_reply(clock, index, NodeClock(), limit=10)
    assert plan.keys == {"k": [("a", 999_999)]}
    assert plan.gaps["a"].runs == (range(1, 999_999), range(1_000_000, 1_000_001))
    assert plan.done


def test_plan_reply_stops_at_the_byte_budget_but_always_sends_one_key() -> None:
    clock = NodeClock({"a": (6, 0)})
    index = {"a": {1: "k1", 2: "k2", 3: "k3", 4: "k3", 5: "k4", 6: "k5"}}
    weights = {"k1": 40, "k2": 50, "k3": 30, "k4": 500, "k5": 1}
    plan = plan_reply(clock, index, NodeClock(), 10, weights.__getitem__, 100)
    assert list(plan.keys) == ["k1", "k2"] and not plan.done  # k3 would pass 100 bytes
    assert plan.gaps == {}
    requester = NodeClock().add_all([("a", 1), ("a", 2)])
    plan = plan_reply(clock, index, requester, 10, weights.__getitem__, 100)
    assert plan.keys == {"k3": [("a", 3), ("a", 4)]} and not plan.done  # a key's dots stay together
    requester = requester.add_all([("a", 3), ("a", 4)])
    plan = plan_reply(clock, index, requester, 10, weights.__getitem__, 100)
    assert list(plan.keys) == ["k4"] and not plan.done  # heavier than the budget alone: it goes alone
    requester = requester.add_all([("a", 5)])
    plan = plan_reply(clock, index, requester, 10, weights.__getitem__, 100)
    assert list(plan.keys) == ["k5"] and plan.done


def test_large_values_come_in_replies_within_the_byte_budget() -> None:
    """An anti-entropy reply stops adding keys at `reply_bytes`, so that a few large values (retained
    messages of a megabyte) never make a reply larger than a cluster frame may be."""
    a, b = pair(reply_bytes=300_000)
    for i in range(10):
        b.put("p", ("k", i), bytes([i]) * 100_000, 0.0)  # a never receives these pushes
    out = a.exchange_now("b", 1.0)
    sizes = []
    for _round in range(20):
        (request,) = sends(out, SyncRequest)
        (reply,) = sends(b.receive("a", request.message, 1.0), SyncReply)
        assert isinstance(reply.message, SyncReply)
        sizes.append(len(reply.message.objects))
        out = a.receive("b", reply.message, 1.0)
        if reply.message.done:
            break
    assert sum(sizes) == 10 and max(sizes) <= 3 and len(sizes) >= 4, sizes
    assert a.dump()["data"] == b.dump()["data"]


def test_exchange_state_machine_accounts_and_tears_down_once() -> None:
    ex = Exchange("b", 7, started=10.0, timeout=5.0)
    ex.sent(100, 10.0)
    assert ex.deadline == 15.0 and not ex.expired(14.9) and ex.expired(15.0)
    assert ex.matches("b", 7) and not ex.matches("c", 7) and not ex.matches("b", 6)
    ex.received(size=1000, missing=40, objects=30, repaired=20, gaps=0)
    ex.sent(120, 11.0)
    ex.received(size=500, missing=10, objects=10, repaired=10, gaps=2)
    fields = ex.teardown("ok", 12.0)
    assert fields["dots_asked"] == 40 and fields["objects_received"] == 40 and fields["repaired"] == 30
    assert fields["bytes_sent"] == 220 and fields["bytes_received"] == 1500 and fields["rounds"] == 2
    assert fields["hit_ratio"] == 0.75 and fields["duration"] == 2.0
    assert ex.state is ExchangeState.DONE and not ex.matches("b", 7)
    with pytest.raises(RuntimeError):
        ex.teardown("timeout", 13.0)
    with pytest.raises(RuntimeError):
        ex.sent(1, 13.0)


def finish_reply(replica: Replica, out: list[Output], now: float) -> list[Output]:
    """``out`` and the outputs of the timer calls that apply the rest of a reply (a slice per call)."""
    out = list(out)
    for _ in range(1000):
        if not replica.applying():
            return out
        assert replica.next_deadline() == now  # the rest is due at once
        out += replica.on_timer(now)
    raise AssertionError("a reply still applying after 1000 slices")


def sends(outputs: Iterable[object], kind: type | None = None) -> list[SendTo]:
    return [o for o in outputs if isinstance(o, SendTo) and (kind is None or isinstance(o.message, kind))]


def exchange_logs(outputs: Iterable[object]) -> list[dict[str, object]]:
    return [o.fields for o in outputs if isinstance(o, Logged) and o.event == "md_exchange"]


def test_a_timed_out_exchange_leaves_no_state_behind() -> None:
    a, _ = pair(exchange_timeout=2.0)
    out = a.exchange_now("b", 0.0)
    (request,) = sends(out)
    assert isinstance(request.message, SyncRequest)
    deadline = a.next_deadline()
    assert a.busy() and deadline is not None and deadline <= 2.0
    assert exchange_logs(a.on_timer(1.9)) == []
    (log,) = exchange_logs(a.on_timer(2.0))
    assert log["result"] == "timeout" and log["peer"] == "b"
    assert not a.busy() and a.stats()["exchange_active"] == 0 and a.stats()["exchanges_failed"] == 1
    # The late reply of the dead exchange is ignored.
    late = SyncReply(request.message.xid, True, 0, a.node_clock.base(), (), {}, None)
    assert a.receive("b", late, 2.5) == []
    assert a.stats()["stale_replies"] == 1


def test_a_non_member_is_refused_and_the_requester_tears_down() -> None:
    a = Replica("a", rng=random.Random(1))
    b = Replica("b", rng=random.Random(2))
    a.set_peers(["b"])
    a.set_reachable(["b"])
    b.set_reachable(["a"])  # b does not know a is a member yet
    (request,) = sends(a.exchange_now("b", 0.0))
    (reject,) = sends(b.receive("a", request.message, 0.1))
    assert isinstance(reject.message, SyncReject) and reject.message.reason == "not_a_member"
    (log,) = exchange_logs(a.receive("b", reject.message, 0.2))
    assert log["result"] == "rejected:not_a_member"
    assert not a.busy()


def test_an_exchange_whose_peer_becomes_unreachable_is_torn_down() -> None:
    a, _ = pair()
    a.exchange_now("b", 0.0)
    a.set_reachable([])
    assert a.next_deadline() == 0.0
    (log,) = exchange_logs(a.on_timer(0.5))
    assert log["result"] == "peer_unreachable" and not a.busy()


def test_missing_objects_come_in_batches_and_only_missing_ones_cross_the_wire() -> None:
    a, b = pair(batch_size=100)
    for i in range(250):
        b.put("p", ("k", i), i, 0.0)  # a never receives these pushes
    out = a.exchange_now("b", 1.0)
    rounds = 0
    objects = 0
    while True:
        (request,) = sends(out, SyncRequest)
        (reply,) = sends(b.receive("a", request.message, 1.0), SyncReply)
        assert isinstance(reply.message, SyncReply)
        rounds += 1
        objects += len(reply.message.objects)
        assert len(reply.message.objects) <= 100
        out = finish_reply(a, a.receive("b", reply.message, 1.0), 1.0)
        if reply.message.done:
            break
    assert rounds == 3 and objects == 250
    (log,) = exchange_logs(out)
    assert log["result"] == "ok" and log["dots_asked"] == 250 and log["objects_received"] == 250
    assert log["hit_ratio"] == 1.0 and log["rounds"] == 3
    assert a.dump()["data"] == b.dump()["data"]
    # A second exchange finds nothing missing: one round trip, no object.
    (request,) = sends(a.exchange_now("b", 2.0), SyncRequest)
    (reply,) = sends(b.receive("a", request.message, 2.0), SyncReply)
    assert reply.message.objects == () and reply.message.done  # type: ignore[union-attr]


def test_exchange_bytes_do_not_depend_on_how_many_keys_the_store_holds() -> None:
    def bytes_for(total: int) -> int:
        net = cluster(5, ["a", "b"])
        for i in range(total):
            net.put("a", "p", ("k", i), "x" * 20)
        settle(net, 60.0)
        net.partition(["a"], ["b"])
        for i in range(100):
            net.put("a", "p", ("m", i), "y" * 20)
        net.heal_all()
        net.replicas["b"].set_reachable([])  # keep b's periodic exchanges out of the measurement
        net.replicas["b"].set_reachable(["a"])
        net.touch("b")
        before = net.bytes_sent
        settle(net)
        return net.bytes_sent - before

    small, big = bytes_for(100), bytes_for(5000)
    assert abs(big - small) <= 0.1 * small, (small, big)


def test_same_seed_same_history() -> None:
    def run(seed: int) -> tuple[object, ...]:
        net = cluster(seed, ["a", "b", "c"], writeback=True)
        net.drop_rate = 0.2
        for i in range(60):
            net.put("abc"[net.rng.randrange(3)], "p", ("k", net.rng.randrange(10)), i)
            if i % 10 == 0:
                net.partition(["a"], ["b", "c"])
            if i % 10 == 5:
                net.heal_all()
            net.run_for(net.rng.uniform(0, 0.5))
        net.heal_all()
        net.drop_rate = 0.0
        settle(net, 30.0)
        return tuple(
            (n, net.replicas[n].dump()["data"], [(e.event, sorted(e.fields.items())) for e in net.logs[n]])
            for n in "abc"
        )

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_a_wiped_replica_under_its_old_id_is_refused() -> None:
    """b's store was lost; restarted empty under the same id, its next counters would name writes a
    already holds (they would be ignored as seen).  a refuses to serve it."""
    a, b = pair()
    (push,) = sends(b.put("p", ("k",), "from b", 0.0), None)
    a.receive("b", push.message, 0.1)
    b2 = Replica("b", rng=random.Random(3))
    b2.set_peers(["a"])
    b2.set_reachable(["a"])
    (request,) = sends(b2.exchange_now("a", 1.0), SyncRequest)
    (reject,) = sends(a.receive("b", request.message, 1.1), SyncReject)
    assert reject.message.reason == "reused_node_id"  # type: ignore[union-attr]
    (log,) = exchange_logs(b2.receive("a", reject.message, 1.2))
    assert log["result"] == "rejected:reused_node_id"
