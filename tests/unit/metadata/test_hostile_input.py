"""Frames a buggy or compromised peer could send: a replica refuses them, counts them and stays small."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from dvv.dots import Counters
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from vmqpy.metadata import messages
from vmqpy.metadata.messages import Push, SyncReply, SyncRequest
from vmqpy.metadata.replica import Logged, Replica, SendTo

P = "subs"


def pair() -> tuple[Replica, Replica]:
    a = Replica("a", rng=random.Random(1))
    b = Replica("b", rng=random.Random(2))
    for r in (a, b):
        r.set_peers(["a", "b"])
        r.set_reachable(["a", "b"])
    return a, b


def push(counter: int, node: str = "a") -> Push:
    return Push(P, ("k",), (node, counter), {"v": 1}, {node: counter})


@pytest.mark.parametrize("counter", [2**27, 2**40, 2**62])
def test_a_push_far_ahead_is_refused_without_allocating(counter: int) -> None:
    _, b = pair()
    data = messages.encode(push(counter))
    assert len(data) < 40, "a handful of bytes on the wire"
    tracemalloc.start()
    try:
        out = b.receive("a", messages.decode(data), 1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not [o for o in out if not isinstance(o, SendTo)] and b.get(P, ("k",)) is None
    assert b.stats()["implausible_refused"] == 1
    assert peak < 1 << 20, f"receiving one push peaked at {peak} bytes"
    assert b.node_clock.entry("a") == (0, 0)
    # The node still works: the next plausible push is applied.
    b.receive("a", push(1), 2.0)
    assert b.get(P, ("k",)) == {"v": 1}


def test_a_push_within_bounds_is_applied_even_with_a_hole() -> None:
    _, b = pair()
    b.receive("a", push(1000), 1.0)  # a restarted node skips up to a reservation block: legitimate
    assert b.get(P, ("k",)) == {"v": 1}
    assert b.node_clock.entry("a")[0] == 0


@pytest.mark.parametrize(
    ("sender", "message", "why"),
    [
        ("z", push(1, "z"), "not a member"),
        ("a", push(1, "c"), "a dot of another node: only the coordinator pushes its writes"),
        ("b", push(1, "b"), "our own id"),
        ("a", Push(P, (1.5,), ("a", 1), {"v": 1}, {"a": 1}), "a key item that is not str/int/bytes"),
    ],
)
def test_pushes_that_no_member_sends_are_refused(sender: str, message: Push, why: str) -> None:
    _, b = pair()
    out = b.receive(sender, message, 1.0)
    assert not [o for o in out if not isinstance(o, SendTo)], why
    assert b.stats()["pushes_refused"] == 1 and b.stats()["keys"] == 0


def _start_exchange(a: Replica) -> SyncRequest:
    (send,) = [o for o in a.exchange_now("b", 1.0) if isinstance(o, SendTo)]
    assert isinstance(send.message, SyncRequest)
    return send.message


def test_a_reply_with_a_gap_far_ahead_ends_the_exchange_as_implausible() -> None:
    a, _b = pair()
    request = _start_exchange(a)
    gaps = {"c": Counters.from_runs([range(2**40, 2**40 + 1)])}
    reply = SyncReply(request.xid, True, 1, VersionVector(), (), gaps, None, request.view)
    tracemalloc.start()
    try:
        out = a.receive("b", messages.decode(messages.encode(reply)), 1.1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert a.stats()["implausible_refused"] == 1 and a.stats()["exchange_active"] == 0
    (log,) = [o for o in out if isinstance(o, Logged) and o.event == "md_exchange"]
    assert log.fields["result"] == "rejected:implausible_dots"
    assert a.node_clock.entry("c") == (0, 0)


def test_a_long_catch_up_in_contiguous_gaps_is_plausible() -> None:
    """Three million collected writes of a node arrive as one contiguous gap run: the base moves, no bitmap."""
    a, _ = pair()
    request = _start_exchange(a)
    gaps = {"c": Counters.from_runs([range(1, 3_000_001)])}
    reply = SyncReply(request.xid, True, 3_000_000, VersionVector({"c": 3_000_000}), (), gaps, None, request.view)
    a.receive("b", reply, 1.1)
    assert a.node_clock.entry("c") == (3_000_000, 0)
    assert a.stats()["implausible_refused"] == 0


def test_watermark_cells_move_only_for_peers_that_share_the_view() -> None:
    _a, b = pair()
    b.put(P, ("k",), {"v": 1}, 1.0)
    b.delete(P, ("k",), 1.1)
    clock = NodeClock({"b": (2, 0)})
    other_view = messages.view_digest(["a", "b", "x"])
    b.receive("a", SyncRequest(7, 10, clock, None, other_view), 1.2)
    assert b.watermark.get("b", "a") == 0 and b.stats()["views_differ"] == 1
    b.on_timer(5.0)
    assert b.index(), "a's report came from another view: nothing collected"
    b.receive("a", SyncRequest(8, 10, clock, None, messages.view_digest(["a", "b"])), 5.1)
    assert b.watermark.get("b", "a") == 2
    b.on_timer(10.0)
    assert b.index() == {}, "the same report under the same view lets GC collect"


def test_a_view_change_resets_what_peers_reported() -> None:
    _a, b = pair()
    b.receive("a", SyncRequest(1, 10, NodeClock({"b": (5, 0)}), None, messages.view_digest(["a", "b"])), 1.0)
    assert b.watermark.get("b", "a") == 5
    b.set_peers(["a", "x"])
    assert b.watermark.get("b", "a") == 0


def test_timers_follow_now_and_stamps_follow_wall() -> None:
    """`now` (monotonic in the driver) arms timers; `wall` only stamps: a wall step moves no deadline."""
    a, _ = pair()
    a.on_timer(100.0, wall=1_700_000_000.0)
    deadline = a.next_deadline()
    assert deadline is not None and 100.0 <= deadline < 102.0
    out = a.put(P, ("k",), {"v": 1}, 100.5, wall=1_700_000_060.0)  # the wall clock stepped by +60 s
    (log,) = [o for o in out if isinstance(o, Logged) and o.event == "md_write"]
    assert log.fields["hlc"][0] >= 1_700_000_060_000
    assert a.next_deadline() == deadline


def test_covered_by_needs_the_peers_clock_after_it_pulled_everything() -> None:
    from vmqpy.metadata.memory_network import MemoryNetwork

    net = MemoryNetwork(3)
    for n in ("a", "b"):
        net.add_replica(n)
    net.set_members(["a", "b"])
    net.partition_off(["a"])
    for i in range(5):
        net.put("a", P, (f"k{i}",), {"v": i})
    net.run_for(2.0)
    assert not net.replicas["a"].covered_by("b"), "b has not seen a's writes"
    net.heal_all()
    assert net.run_until(lambda: net.replicas["a"].covered_by("b"), 30.0)
    assert net.replicas["b"].get(P, ("k4",)) == {"v": 4}


def test_unaccounted_dots_of_a_dead_member() -> None:
    a = Replica("a", rng=random.Random(1))
    a.set_peers(["a", "b", "c"])
    a.set_reachable(["b", "c"])
    view = messages.view_digest(["a", "b", "c"])
    a.receive("c", push(1, "c"), 1.0)  # a holds c's first write
    a.receive("c", SyncRequest(1, 10, NodeClock({"c": (4, 0)}), None, view), 1.1)  # c says it issued 4
    assert a.unaccounted_dots("c") == 3
    a.receive("b", SyncRequest(1, 10, NodeClock({"c": (3, 0)}), None, view), 1.2)  # b holds c's 2 and 3
    assert a.unaccounted_dots("c") == 1
    assert a.unaccounted_dots("b") == 0


async def test_a_node_survives_hostile_frames_and_keeps_replicating(tmp_path: Path) -> None:
    """The metadata service of a node (SQLite storage, replication log) gets hostile frames off the wire,
    stays small and keeps replicating the next real write."""
    import asyncio

    from tests.unit.metadata.services import LoopbackNetwork, start, stop

    network = LoopbackNetwork()
    a = start(tmp_path, "a", network, ["b"])
    b = start(tmp_path, "b", network, ["a"])
    try:
        receive_on_b = network.receivers["b"]
        hostile = [
            messages.encode(push(2**40)),
            messages.encode(push(2**27)),
            messages.encode(push(1, "zz")),
            b"\x92\x01",  # not a message
            messages.encode(push(1))[:-3],  # truncated
        ]
        tracemalloc.start()
        try:
            for data in hostile:
                receive_on_b("a", data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20
        assert b.replica is not None and b.replica.stats()["implausible_refused"] == 2
        assert b.replica.stats()["pushes_refused"] == 1 and b.decode_errors == 2
        a.put(P, ("real",), {"v": 1})
        for _ in range(200):
            if b.get(P, ("real",)) == {"v": 1}:
                break
            await asyncio.sleep(0.01)
        assert b.get(P, ("real",)) == {"v": 1}
    finally:
        stop(a)
        stop(b)


def test_known_to_says_whether_a_peer_had_a_keys_current_value_when_it_reported() -> None:
    """The broker passes a late forward on to a moved subscriber's new node unless the sender had the new
    route (vmqpy/broker/core/broker.py `_pass_on`)."""
    a = Replica("a", rng=random.Random(1))
    a.set_peers(["a", "b"])
    a.set_reachable(["b"])
    view = messages.view_digest(["a", "b"])
    a.put(P, ("k",), {"v": 1}, 1.0)  # dot (a, 1)
    assert not a.known_to("b", P, ("k",)), "b never reported"
    a.receive("b", SyncRequest(1, 10, NodeClock({"a": (0, 0)}), None, view), 1.1)
    assert not a.known_to("b", P, ("k",))
    a.receive("b", SyncRequest(2, 10, NodeClock({"a": (1, 0)}), None, view), 1.2)
    assert a.known_to("b", P, ("k",))
    a.put(P, ("k",), {"v": 2}, 1.3)  # a newer value: b has not reported it
    assert not a.known_to("b", P, ("k",))
    assert not a.known_to("b", P, ("absent",))
