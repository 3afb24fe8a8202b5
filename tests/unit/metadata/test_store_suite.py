"""The scenarios of VerneMQ's vmq_swc_store_SUITE, as tests of our replica on the in-memory network."""

from __future__ import annotations

import msgpack

from tests.sim.model import at_rest_errors, gc_done, model_errors, ops_of, writeback_errors
from vmqpy.metadata import messages
from vmqpy.metadata.replica import T_DOTS, T_OBJ, Changed, Logged

from .helpers import cluster, rows, settle, stamped

P = "subs"


def test_partition_2_2_writes_converge_on_their_side_then_everywhere() -> None:
    net = cluster(11, ["a", "b", "c", "d"])
    net.partition(["a", "b"], ["c", "d"])
    for i in range(50):
        net.put("a" if i % 2 else "b", P, ("k", i), stamped(net, "a", i))
    net.run_for(3.0)
    assert net.converged(["a", "b"]), "the side that took the writes agrees"
    assert len(net.values("a")) == 50
    assert net.values("c") == {} and net.values("d") == {}, "the other side saw nothing"
    net.heal_all()
    settle(net)
    assert all(len(net.values(n)) == 50 for n in "abcd")
    assert model_errors(net) == []


def test_partitioned_delete_leaves_no_value_and_no_context_after_exchange_and_gc() -> None:
    net = cluster(12, ["a", "b", "c", "d"])
    for i in range(20):
        net.put("a", P, ("k", i), stamped(net, "a", i))
    settle(net)
    net.partition(["a", "b"], ["c", "d"])
    for i in range(10):
        net.delete("c", P, ("k", i))
    net.run_for(5.0)
    # While a and b have not seen the delete, c and d keep its dots (the tombstone) indexed.
    assert all(net.replicas["c"].get(P, ("k", i)) is None for i in range(10))
    assert net.replicas["c"].stats()["gc_pending_dots"] >= 10
    net.heal_all()
    settle(net)
    assert net.run_until(lambda: gc_done(net), 20.0), "GC completes once every member has the delete"
    for node in "abcd":
        r = net.replicas[node]
        assert all(r.get(P, ("k", i)) is None and r.siblings(P, ("k", i)) == [] for i in range(10))
        dump = r.dump()
        assert set(dump["data"][P]) == {("k", i) for i in range(10, 20)}, "no object (no tombstone) for deleted keys"
        keys_in_rows = {messages.unpack_full_key(k)[1] for k in rows(net, node, T_OBJ)}
        assert keys_in_rows == {("k", i) for i in range(10, 20)}
        assert rows(net, node, T_DOTS) == {}, "no index row left"
        assert r.stats()["indexed_dots"] == 10, "only the 10 live versions stay indexed"
    assert at_rest_errors(net) == []


def test_a_stale_member_coming_back_does_not_resurrect_a_delete() -> None:
    net = cluster(13, ["a", "b", "c"])
    net.put("a", P, ("gone",), "v")
    settle(net)
    net.partition_off(["c"])  # c is still a member: the watermark waits for it
    net.delete("a", P, ("gone",))
    net.run_for(30.0)
    assert net.replicas["a"].stats()["gc_pending_dots"] >= 1, "the delete's dots wait for c"
    assert net.replicas["c"].get(P, ("gone",)) == "v"
    net.heal_all()
    settle(net)
    assert net.run_until(lambda: gc_done(net), 20.0)
    for node in "abc":
        assert net.replicas[node].get(P, ("gone",)) is None
        assert ("gone",) not in net.replicas[node].dump()["data"].get(P, {})


def test_concurrent_writes_become_siblings_resolved_the_same_everywhere() -> None:
    net = cluster(14, ["a", "b", "c", "d"], writeback=False)
    net.partition(["a", "b"], ["c", "d"])
    left, right = stamped(net, "a", "left"), stamped(net, "c", "right")
    net.put("a", P, ("k",), left)
    net.now += 0.001
    right = stamped(net, "c", "right")
    net.put("c", P, ("k",), right)
    net.run_for(2.0)
    net.heal_all()
    settle(net)
    for node in "abcd":
        r = net.replicas[node]
        assert sorted(r.siblings(P, ("k",)), key=repr) == sorted([left, right], key=repr)
        assert r.get(P, ("k",)) == right, "the greater HLC stamp wins, on every node"


def test_siblings_are_written_back_once_and_disappear_after_heal() -> None:
    net = cluster(15, ["a", "b", "c", "d"])
    net.partition(["a", "b"], ["c", "d"])
    for i in range(30):
        net.put("a", P, ("k", i), stamped(net, "a", f"left{i}"))
        net.put("c", P, ("k", i), stamped(net, "c", f"right{i}"))
    net.run_for(2.0)
    net.heal_all()
    settle(net)
    for node in "abcd":
        r = net.replicas[node]
        assert all(len(r.siblings(P, ("k", i))) == 1 for i in range(30)), node
        for i in range(30):
            value = r.get(P, ("k", i))
            assert value is not None and value["v"] == f"right{i}", (node, i)
    ops = ops_of(net)
    writebacks = [op for op in ops if op.writeback]
    assert len(writebacks) == 30, "one write-back per key, by the owner of the smallest sibling dot"
    assert {op.node for op in writebacks} == {"a"}
    assert writeback_errors(ops) == []
    assert model_errors(net, ops) == []
    assert net.run_until(lambda: gc_done(net), 20.0)
    assert at_rest_errors(net) == []


def test_1000_puts_give_exactly_one_changed_event_per_replica_per_put() -> None:
    net = cluster(16, ["a", "b", "c"])
    expected = {}
    for i in range(1000):
        node = "abc"[net.rng.randrange(3)]
        value = {"n": i, "by": node}
        net.put(node, P, ("key", i), value)
        expected[("key", i)] = value
        if i % 100 == 0:
            net.run_for(0.005)  # some pushes arrive in between, others pile up and are reordered
    settle(net)
    for node in "abc":
        changes = [c for c in net.changes[node] if isinstance(c, Changed)]
        assert len(changes) == 1000, node
        assert {c.key: c.new for c in changes} == expected
        assert all(c.old is None for c in changes)


def test_a_replica_joining_a_populated_store_while_writes_continue_converges() -> None:
    net = cluster(17, ["a", "b", "c"])
    for i in range(600):
        net.put("abc"[i % 3], P, ("k", i % 400), {"i": i})
    settle(net)
    for i in range(0, 400, 4):
        net.delete("a", P, ("k", i))
    settle(net)
    assert net.run_until(lambda: gc_done(net), 20.0), "tombstones and superseded dots are collected first"
    net.add_replica("d")
    net.set_members(["a", "b", "c", "d"])
    for i in range(200):  # writes continue while d catches up
        net.put("abcd"[i % 4], P, ("new", i), {"i": i})
        net.run_for(0.01)
    settle(net)
    assert len(net.values("d")) == 300 + 200
    assert model_errors(net) == []
    assert net.run_until(lambda: gc_done(net), 20.0), "GC resumes once d has caught up"
    assert at_rest_errors(net) == []
    assert net.replicas["d"].stats()["gap_dots"] > 0, "d was told which old dots were collected"


def test_a_replica_leaving_is_retired_and_gc_proceeds_without_it() -> None:
    net = cluster(18, ["a", "b", "c"])
    for i in range(10):
        net.put("a", P, ("k", i), i)
    settle(net)
    net.crash("c")
    for i in range(5):
        net.delete("a", P, ("k", i))
    net.run_for(10.0)
    assert not gc_done(net), "c (a member, down) has not seen the deletes: nothing is collected"
    net.set_members(["a", "b"])  # c leaves the cluster
    assert net.run_until(lambda: gc_done(net), 10.0)
    for node in "ab":
        wm = net.replicas[node].watermark
        assert "c" in wm.retired() and "c" not in wm.peers()
        assert all("c" not in row for row in wm.active_rows().values())
        assert net.replicas[node].stats()["indexed_dots"] == 5
        assert rows(net, node, T_DOTS) == {}


def test_restore_from_persisted_rows_keeps_values_clock_and_index() -> None:
    net = cluster(19, ["a", "b", "c"])
    net.partition(["a", "b"], ["c"])
    from_a, from_b = stamped(net, "a", "from a"), stamped(net, "b", "from b")
    net.put("a", P, ("both",), from_a)  # concurrent with b's write (neither saw the other's): siblings
    net.put("b", P, ("both",), from_b)
    for i in range(100):
        net.put("abc"[i % 3], P, ("k", i % 37), {"i": i})
        if i % 7 == 0:
            net.delete("abc"[(i + 1) % 3], P, ("k", (i * 5) % 37))
    net.run_for(2.0)
    before = net.replicas["a"].dump()
    stats = net.replicas["a"].stats()
    # The siblings of ("both",) were resolved by a write-back (the restore must keep the resolved value; c's
    # concurrent versions stay apart until the heal).
    assert stats["gc_pending_dots"] > 0 and stats["siblings"] == 0
    assert net.replicas["a"].get(P, ("both",)) == max(from_a, from_b, key=lambda v: v["hlc"])
    net.crash("a")
    restored = net.restart("a")
    after = restored.dump()
    for field in ("data", "index", "gc_pending"):
        assert after[field] == before[field], field
    # The watermark is saved when GC collects (an older one is safe: it only delays GC): same rows and
    # columns, no cell ahead of what the node knew.
    for kind in ("active", "retired"):
        old, new = before["watermark"][kind], after["watermark"][kind]
        assert {n: set(r) for n, r in new.items()} == {n: set(r) for n, r in old.items()}
        assert all(new[n][p] <= old[n][p] for n in new for p in new[n])
    assert {n: e for n, e in after["clock"].items() if n != "a"} == {
        n: e for n, e in before["clock"].items() if n != "a"
    }
    # Own entry: the same base, plus the never-used counter that ends the reservation (the counters in
    # between may have been handed out before the crash: they are fetched from the members first).
    own_base, own_bitmap = before["clock"]["a"]
    assert own_bitmap == 0
    reserved = after["clock"]["a"][1].bit_length() + own_base
    assert after["clock"]["a"] == [own_base, 1 << (reserved - own_base - 1)]
    own = restored.put(P, ("fresh",), 1, net.now)
    dots = [o.fields["dot"] for o in own if isinstance(o, Logged) and o.event == "md_write"]
    assert dots[0] == ["a", reserved + 1], "a restored node never reuses a counter"
    net.dispatch("a", own)
    net.heal_all()
    settle(net)
    assert model_errors(net) == []
    assert net.run_until(lambda: gc_done(net), 20.0)
    entries = {net.replicas[node].node_clock.entry("a") for node in "abc"}
    assert len(entries) == 1, entries
    base, bitmap = entries.pop()
    assert bitmap == 0 and base > reserved, "the unused counters were declared everywhere: GC can proceed"


def test_restore_after_a_lost_write_fetches_it_back_from_a_peer() -> None:
    """a's last row never reached its storage (crash before the commit) but its push reached b: after a
    restore, a fetches the write back from b instead of declaring its counter unused."""
    net = cluster(20, ["a", "b"])
    net.put("a", P, ("k",), "v1")
    settle(net)
    out = net.replicas["a"].put(P, ("k",), "v2", net.now)
    net.dispatch("a", [o for o in out if not getattr(o, "table", "").startswith("md_obj")])
    settle(net)
    assert net.replicas["b"].get(P, ("k",)) == "v2"
    net.crash("a")
    net.restart("a")
    assert net.replicas["a"].get(P, ("k",)) == "v1"
    settle(net)
    assert net.replicas["a"].get(P, ("k",)) == "v2"
    assert msgpack.unpackb(rows(net, "a", T_OBJ)[messages.pack_full_key(P, ("k",))][1:])[0][2] == "v2"
