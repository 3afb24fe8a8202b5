"""The replica's local API, write-back rule, membership and outputs."""

from __future__ import annotations

import random

import msgpack
import pytest

from tests.sim.model import model_errors, ops_of, writeback_errors
from vmqpy.metadata.errors import InvalidKeyError
from vmqpy.metadata.messages import Push, PushAck
from vmqpy.metadata.replica import (
    T_DOTS,
    T_META,
    T_OBJ,
    Acked,
    Changed,
    InvalidValueError,
    Logged,
    Persist,
    Replica,
    SendTo,
)

from .helpers import cluster, settle, stamped

P = "subs"


def solo(**kwargs: object) -> Replica:
    return Replica("a", rng=random.Random(0), **kwargs)  # type: ignore[arg-type]


def test_put_get_delete_fold_and_outputs() -> None:
    r = solo()
    out = r.put(P, ("t", 1), {"q": 1}, 5.0)
    assert r.get(P, ("t", 1)) == {"q": 1} and r.siblings(P, ("t", 1)) == [{"q": 1}]
    assert [type(o) for o in out] == [Persist, Persist, Changed, Logged]  # reservation, object, change, log
    persist = [o for o in out if isinstance(o, Persist)]
    assert {p.table for p in persist} == {T_META, T_OBJ}
    (change,) = [o for o in out if isinstance(o, Changed)]
    assert (change.prefix, change.key, change.old, change.new) == (P, ("t", 1), None, {"q": 1})
    (log,) = [o for o in out if isinstance(o, Logged)]
    assert log.event == "md_write" and log.fields["dot"] == ["a", 1] and log.fields["op"] == "put"
    assert msgpack.unpackb(log.fields["value"]) == {"q": 1} and len(log.fields["hlc"]) == 3
    r.put(P, ("t", 2), ("tuple", b"\x00"), 5.0)
    assert r.get(P, ("t", 2)) == ["tuple", b"\x00"], "values are stored as msgpack gives them back"
    assert dict(r.fold(P)) == {("t", 1): {"q": 1}, ("t", 2): ["tuple", b"\x00"]}
    out = r.delete(P, ("t", 1), 6.0)
    assert r.get(P, ("t", 1)) is None and r.siblings(P, ("t", 1)) == []
    assert next(o for o in out if isinstance(o, Changed)).new is None
    dots_rows = [o for o in out if isinstance(o, Persist) and o.table == T_DOTS]
    assert len(dots_rows) == 2, "the superseded version and the delete's own dot wait for GC"
    assert dict(r.fold(P)) == {("t", 2): ["tuple", b"\x00"]}
    assert r.context(P, ("t", 1)) == {"a": 3}
    assert r.delete(P, ("never",), 7.0)[-1].fields["op"] == "delete"  # type: ignore[union-attr]
    assert r.stats()["puts"] == 2 and r.stats()["deletes"] == 2


def test_bad_keys_and_values_are_refused() -> None:
    r = solo()
    for prefix, key in ((1, ("k",)), ("p", "k"), ("p", (1.5,)), ("p", (True,)), ("p", (None,))):
        with pytest.raises(InvalidKeyError):
            r.put(prefix, key, 1, 0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError):
        r.put(P, ("k",), None, 0.0)
    with pytest.raises(InvalidValueError):
        r.put(P, ("k",), {1, 2}, 0.0)
    assert r.get(P, ["k"]) is None  # type: ignore[arg-type]  # a list key is accepted as a tuple


def test_pushes_go_to_reachable_members_only() -> None:
    r = solo()
    r.set_peers(["b", "c", "d"])
    r.set_reachable(["b", "d", "x"])
    out = r.put(P, ("k",), 1, 0.0)
    sends = [o for o in out if isinstance(o, SendTo)]
    assert sorted(s.peer for s in sends) == ["b", "d"]
    push = sends[0].message
    assert isinstance(push, Push) and push.dot == ("a", 1) and push.value == 1


def test_a_receiver_applies_once_and_ignores_duplicates() -> None:
    a, b = solo(), Replica("b", rng=random.Random(1))
    for r, other in ((a, "b"), (b, "a")):
        r.set_peers([other])
        r.set_reachable([other])
    (send,) = [o for o in a.put(P, ("k",), "v", 0.0) if isinstance(o, SendTo)]
    first = b.receive("a", send.message, 0.1)
    assert [o.new for o in first if isinstance(o, Changed)] == ["v"]
    assert [o.fields["via"] for o in first if isinstance(o, Logged)] == ["broadcast"]
    assert b.receive("a", send.message, 0.2) == [], "a duplicate changes nothing and outputs nothing"


def test_pushes_of_acknowledged_prefixes_are_answered_once_applied() -> None:
    """b answers a's pushes of the acknowledged prefix (a duplicate too: b holds it), after the change they
    make; pushes of other prefixes are not answered; a answers only a member's PushAck."""
    a, b = solo(), Replica("b", rng=random.Random(1), acknowledged=[P])
    for r, other in ((a, "b"), (b, "a")):
        r.set_peers([other])
        r.set_reachable([other])
    (send,) = [o for o in a.put(P, ("k",), "v", 0.0) if isinstance(o, SendTo)]
    out = b.receive("a", send.message, 0.1)
    changed = next(i for i, o in enumerate(out) if isinstance(o, Changed))
    (ack_at,) = [i for i, o in enumerate(out) if isinstance(o, SendTo) and isinstance(o.message, PushAck)]
    assert changed < ack_at
    ack = out[ack_at]
    assert isinstance(ack, SendTo) and ack.peer == "a" and ack.message == PushAck((1,))
    again = b.receive("a", send.message, 0.2)
    acks = [o for o in again if isinstance(o, SendTo) and isinstance(o.message, PushAck)]
    assert acks == [SendTo("a", PushAck((1,)))]
    assert not [o for o in again if isinstance(o, Changed)], "a duplicate: held already, answered again"
    (unacknowledged,) = [o for o in a.put("other", ("k",), "v", 0.3) if isinstance(o, SendTo)]
    answered = b.receive("a", unacknowledged.message, 0.4)
    assert not [o for o in answered if isinstance(o, SendTo) and isinstance(o.message, PushAck)]
    assert b.stats()["pushes_acknowledged"] == 2
    assert [o for o in a.receive("b", PushAck((1,)), 0.5) if isinstance(o, Acked)] == [Acked("b", (1,))]
    assert not [o for o in a.receive("x", PushAck((1,)), 0.5) if isinstance(o, Acked)], "not a member"


def test_writeback_rule_owner_of_the_smallest_sibling_dot() -> None:
    net = cluster(31, ["a", "b", "c"])
    net.partition(["a"], ["b"], ["c"])
    for node in "cba":
        net.put(node, P, ("k",), stamped(net, node, node))
    net.heal_all()
    settle(net)
    ops = ops_of(net)
    (wb,) = [op for op in ops if op.writeback]
    assert wb.node == "a", "a owns the smallest sibling dot (a, 1)"
    assert wb.value["v"] == "c", "the greatest stamp wins"
    assert writeback_errors(ops) == [] and model_errors(net, ops) == []


def test_bridge_topology_converges_without_writeback_ping_pong() -> None:
    """a and c cannot talk; b sees both.  Owners decided by reachability would disagree forever (a
    owns a's sibling, c owns c's); the member-based rule has exactly one owner."""
    net = cluster(32, ["a", "b", "c"])
    net.bridge(["a"], ["c"], "b")
    for i in range(20):
        net.put("a", P, ("k", i), stamped(net, "a", f"a{i}"))
        net.put("c", P, ("k", i), stamped(net, "c", f"c{i}"))
    settle(net, 30.0)
    writebacks = [op for op in ops_of(net) if op.writeback]
    assert len(writebacks) == 20 and {op.node for op in writebacks} == {"a"}
    net.run_for(10.0)
    assert [op for op in ops_of(net) if op.writeback] == writebacks, "no further write-back"
    for node in "abc":
        assert all(len(net.replicas[node].siblings(P, ("k", i))) == 1 for i in range(20))


def test_siblings_owned_by_removed_nodes_are_written_back_by_the_smallest_member() -> None:
    net = cluster(33, ["a", "b", "c", "d"])
    net.partition(["a"], ["b", "c"], ["d"])
    net.put("a", P, ("k",), stamped(net, "a", "a"))
    net.put("d", P, ("k",), stamped(net, "d", "d"))
    net.partition(["a", "b", "c", "d"])
    net.run_for(0.5)
    net.crash("a")
    net.crash("d")
    net.set_members(["b", "c"], on=["b", "c"])
    settle(net)
    (wb,) = [op for op in ops_of(net) if op.writeback]
    assert wb.node == "b", "no sibling dot belongs to a member: the smallest member writes back"
    assert net.replicas["c"].siblings(P, ("k",)) == [wb.value]


def test_set_peers_retires_and_re_adds() -> None:
    r = solo()
    r.set_peers(["b", "c"])
    assert r.peers == ["b", "c"] and r.watermark.peers() == ("a", "b", "c")
    out = r.set_peers(["b"])
    assert r.watermark.retired() == ("c",) and any(isinstance(o, Persist) and o.table == T_META for o in out)
    r.set_peers(["b", "c"])
    assert r.watermark.peers() == ("a", "b", "c") and r.watermark.retired() == ()
    assert r.set_peers(["c", "b", "a"]) == [], "no change, no output"


def test_next_deadline_and_timer_schedule() -> None:
    r = solo(sync_interval=2.0)
    assert r.next_deadline() is None, "alone, with nothing to collect: no timer"
    r.set_peers(["b"])
    r.set_reachable(["b"])
    assert r.next_deadline() == 0.0, "a newly reachable member is synced with at once"
    out = r.on_timer(10.0)
    assert [s.peer for s in out if isinstance(s, SendTo)] == ["b"]
    deadline = r.next_deadline()
    assert deadline is not None and 10.0 < deadline <= 10.0 + 5.0


def test_stats_count_keys_tombstones_and_siblings() -> None:
    net = cluster(34, ["a", "b"])
    net.partition(["a"], ["b"])
    net.put("a", P, ("x",), 1)
    net.put("b", P, ("x",), 2)
    net.put("a", P, ("y",), 1)
    net.delete("a", P, ("y",))
    stats = net.replicas["a"].stats()
    assert (stats["keys"], stats["live_keys"], stats["siblings"], stats["gc_pending_dots"]) == (1, 1, 0, 2)
    net.heal_all()
    net.run_for(0.2)  # exchanged, not yet written back
    stats = net.replicas["b"].stats()
    assert stats["siblings"] == 1 and stats["live_keys"] == 1
    settle(net)
    assert all(net.replicas[n].stats()["siblings"] == 0 for n in "ab")
