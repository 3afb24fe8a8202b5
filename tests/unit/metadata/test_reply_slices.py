"""No call of a replica does a whole anti-entropy reply or a whole GC re-strip: a slice per call, the rest on the next
call of its timer (due at once); what a teardown cuts off in the middle of a reply is fetched again later."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.sim.histories import check_history
from vmqpy.metadata.messages import SyncReply, SyncRequest
from vmqpy.metadata.replica import Logged, Output, Replica, SendTo

from .helpers import cluster, pair, settle
from .services import LoopbackNetwork, start, stop, wait_for

SLICE_OBJECTS = Replica.APPLY_SLICE // 2  # objects of one version and no extra dot in one slice


def sends(outputs: Iterable[Output], kind: type) -> list[SendTo]:
    return [o for o in outputs if isinstance(o, SendTo) and isinstance(o.message, kind)]


def logged(outputs: Iterable[Output], event: str) -> list[dict[str, object]]:
    return [o.fields for o in outputs if isinstance(o, Logged) and o.event == event]


def finish(replica: Replica, now: float) -> list[Output]:
    """Call the replica's timer while it applies a reply or re-strips contexts (each due at once)."""
    out: list[Output] = []
    for _ in range(1000):
        if not (replica.applying() or (replica.stats()["contexts_at_rest"] and replica.next_deadline() == now)):
            return out
        out += replica.on_timer(now)
    raise AssertionError("still slicing after 1000 calls")


def first_reply(a: Replica, b: Replica, keys: int, now: float = 1.0) -> SyncReply:
    """b writes `keys` keys that a does not get (no push reaches it); a asks b; b's first reply."""
    for i in range(keys):
        b.put("p", ("k", i), i, 0.0)
    (request,) = sends(a.exchange_now("b", now), SyncRequest)
    (reply,) = sends(b.receive("a", request.message, now), SyncReply)
    assert isinstance(reply.message, SyncReply)
    return reply.message


def test_a_reply_is_applied_a_slice_per_call_and_the_next_request_waits_for_the_last_slice() -> None:
    a, b = pair()
    reply = first_reply(a, b, 500)
    assert len(reply.objects) == 500 and reply.done
    out = a.receive("b", reply, 1.0)
    applied = [len(logged(out, "md_apply"))]
    assert applied[0] == SLICE_OBJECTS and a.applying()  # on the code before: all 500 in this one call
    assert sends(out, SyncRequest) == [] and logged(out, "md_exchange") == []
    for _ in range(100):
        if not a.applying():
            break
        assert a.next_deadline() == 1.0  # the rest is due at once: the driver's next turn
        out = a.on_timer(1.0)
        applied.append(len(logged(out, "md_apply")))
    assert sum(applied) == 500 and max(applied) == SLICE_OBJECTS and len(applied) == -(-500 // SLICE_OBJECTS)
    (log,) = logged(out, "md_exchange")  # the last slice completes the exchange, with the usual fields
    assert log["result"] == "ok" and log["objects_received"] == 500 and log["repaired"] == 500
    assert log["rounds"] == 1 and log["dots_asked"] == 500 and log["bytes_received"] == reply.size
    finish(a, 1.0)  # the re-strips of the contexts the catch-up stored
    assert a.dump()["data"] == b.dump()["data"] and not a.busy()
    stats = a.stats()
    assert stats["objects_received"] == 500 and stats["objects_repaired"] == 500 and stats["exchanges_completed"] == 1


def test_the_next_batch_is_asked_for_only_once_the_reply_is_applied() -> None:
    a, b = pair(batch_size=200)
    reply = first_reply(a, b, 300)
    assert len(reply.objects) == 200 and not reply.done
    out = a.receive("b", reply, 1.0)
    calls = 1
    while a.applying():
        assert sends(out, SyncRequest) == []
        out = a.on_timer(1.0)
        calls += 1
    (request,) = sends(out, SyncRequest)  # with the clock that holds all 200
    assert request.message.clock.missing_dots(a.node_clock) == {}  # type: ignore[union-attr]
    assert calls == -(-200 // SLICE_OBJECTS)
    assert len(a.dump()["data"]["p"]) == 200


def test_a_duplicate_of_the_reply_being_applied_is_stale() -> None:
    a, b = pair()
    reply = first_reply(a, b, 300)
    a.receive("b", reply, 1.0)
    assert a.applying()
    assert a.receive("b", reply, 1.0) == [] and a.stats()["stale_replies"] == 1


@pytest.mark.parametrize("cut", ["peer_removed", "peer_unreachable", "timeout"])
def test_a_reply_cut_off_in_the_middle_is_dropped_and_its_rest_fetched_again(cut: str) -> None:
    a, b = pair(exchange_timeout=2.0)
    reply = first_reply(a, b, 500)
    a.receive("b", reply, 1.0)
    a.on_timer(1.0)
    held = len(a.dump()["data"]["p"])
    assert held == 2 * SLICE_OBJECTS and a.applying()
    if cut == "peer_removed":
        out = a.set_peers([])
    elif cut == "peer_unreachable":
        a.set_reachable([])
        out = a.on_timer(1.0)
    else:  # the driver stopped calling for longer than the step's deadline
        out = a.on_timer(3.0)
    (log,) = logged(out, "md_exchange")
    assert log["result"] == cut and not a.applying() and logged(out, "md_apply") == []
    assert len(a.dump()["data"]["p"]) == held  # what was applied stays: ordinary merges
    missing = b.node_clock.missing_dots(a.node_clock)  # the rest was never marked as seen
    assert sum(len(c) for c in missing.values()) == 500 - held
    # The next exchange fetches exactly the rest.
    out += a.set_peers(["b"])
    a.set_reachable(["b"])
    out += a.exchange_now("b", 5.0)
    (request,) = sends(out, SyncRequest)  # the cut's timer call or the membership change may have started it
    (again,) = sends(b.receive("a", request.message, 5.0), SyncReply)
    assert isinstance(again.message, SyncReply) and len(again.message.objects) == 500 - held
    a.receive("b", again.message, 5.0)
    finish(a, 5.0)
    assert a.dump()["data"] == b.dump()["data"]


def test_writes_and_requests_between_slices_converge() -> None:
    """While a replica applies a reply, its peers' writes come in and it serves their requests."""
    net = cluster(3, ["a", "b", "c"], batch_size=500)
    for i in range(400):
        net.put("a", "p", ("k", i), i)
    settle(net, 30.0)
    net.add_replica("x", batch_size=500)
    net.set_members(["a", "b", "c", "x"])
    for _ in range(50):  # x catches up while a, b and c keep writing
        net.run_for(0.003)
        net.put("b", "p", ("k", 1000 + net.steps), "during")
        net.delete("c", "p", ("k", net.steps % 400))
    assert any(logged(net.logs["x"], "md_apply"))
    settle(net, 60.0)


def test_the_restrips_after_a_catch_up_come_a_slice_per_call() -> None:
    """A fresh replica stores every key of a catch-up with the responder's base as its context; once its own clock
    covers it, GC re-strips them a slice per call instead of all at once."""
    n = 3 * Replica.RESTRIP_SLICE
    a, b = pair(batch_size=n)
    reply = first_reply(a, b, n)
    assert reply.done
    out = a.receive("b", reply, 1.0)
    while a.applying():
        out = a.on_timer(1.0)
    restored = [o for o in out if getattr(o, "table", None) == "md_obj"]
    assert len(restored) <= Replica.RESTRIP_SLICE + SLICE_OBJECTS
    calls = 0
    while a.stats()["contexts_at_rest"]:
        assert a.next_deadline() == 1.0  # due at once while re-strips are left
        out = a.on_timer(1.0)
        rows = [o for o in out if getattr(o, "table", None) == "md_obj"]
        assert len(rows) <= Replica.RESTRIP_SLICE
        calls += 1
        assert calls < 100
    assert calls >= 2
    assert a.dump()["data"] == b.dump()["data"]


@pytest.mark.parametrize("seed", range(40))
def test_histories_hold_with_slices_of_one_object(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded simulation (tests/sim/test_histories.py: partitions, drops, duplicates, crashes, an uneven join)
    with every reply and every re-strip cut into slices of one object, so that pushes, requests, timeouts and
    crashes fall between the slices."""
    monkeypatch.setattr(Replica, "APPLY_SLICE", 1)
    monkeypatch.setattr(Replica, "RESTRIP_SLICE", 1)
    monkeypatch.setattr(Replica, "PRUNE_SLICE", 1)
    check_history(seed)


async def test_the_service_applies_the_slices_on_separate_turns_of_its_loop(tmp_path: Path) -> None:
    """The asyncio driver continues a reply at the timer the replica makes due at once: each slice on a turn of its
    own, with the loop's other callbacks (a ticker here; heartbeats and clients on a node) in between."""
    net = LoopbackNetwork()
    a = start(tmp_path, "a", net, ["b"])
    b = start(tmp_path, "b", net, ["a"])
    net.cut.add(frozenset(("a", "b")))
    for i in range(600):
        a.put("retain", ("", f"t/{i}"), [a.hlc_now().to_list(), i])
    await a.storage.sync()
    await asyncio.sleep(0.1)  # the pushes leave once stored, and are lost on the cut link
    assert b.get("retain", ("", "t/0")) is None
    loop = asyncio.get_running_loop()
    turns = [0]

    def tick() -> None:
        turns[0] += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    assert b.replica is not None
    replica, on_timer = b.replica, b.replica.on_timer
    slices: list[int] = []  # the ticker's count at each timer call that continued a reply

    def watched(now: float, wall: float | None = None) -> list[Output]:
        if replica.applying():
            slices.append(turns[0])
        return on_timer(now, wall)

    replica.on_timer = watched  # type: ignore[method-assign]
    net.cut.clear()
    await wait_for(lambda: sum(1 for _ in b.fold("retain")) == 600 and not replica.applying(), 30.0)
    assert len(slices) >= 5  # 600 objects in slices of 64; on the code before: none (a reply in one call)
    assert all(later > earlier for earlier, later in itertools.pairwise(slices))
    stop(a)
    stop(b)


def test_gc_forgets_the_dots_of_many_deletes_a_slice_per_call() -> None:
    """A lone node that wrote and deleted many keys (a client's 10,000 subscriptions, then their removal) forgets
    their dots a slice per call of its timer, due at once until none is left, instead of all in one call (20,000
    at once held a node's event loop for 0.29 s)."""
    a = Replica("a", rng=random.Random(1), gc_interval=1.0)
    a.set_peers([])
    n = 3 * Replica.PRUNE_SLICE
    for i in range(n):
        a.put("p", ("k", i), i, 0.0)
    for i in range(n):
        a.delete("p", ("k", i), 0.0)
    sizes: list[int] = []
    now = 2.0
    for _ in range(100):
        out = a.on_timer(now)
        gc = logged(out, "md_gc")
        if gc:
            sizes.append(int(str(gc[0]["dots_pruned"])))
        if a.next_deadline() != now:
            break
    assert sizes and max(sizes) <= Replica.PRUNE_SLICE  # on the code before: every dot in the first call
    assert sum(sizes) == 2 * n  # each key's write and its delete
    stats = a.stats()
    assert stats["gc_dots_pruned"] == 2 * n and stats["gc_pending_dots"] == 0 and stats["indexed_dots"] == 0
