"""The two histories of issue 19 that ended with a deleted key alive on one replica for ever, replayed step by
step on the in-memory network, with today's rules and with the old ones (tests/sim/legacy.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sim.legacy import LegacyReplica
from vmqpy.metadata.memory_network import MemoryNetwork
from vmqpy.metadata.replica import Replica

P = "subs"
K = ("k",)


@pytest.fixture(params=[Replica, LegacyReplica], ids=["today", "old-rules"])
def rules(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Replica]]:
    """Run the history with the replica class given (the network builds `Replica`: patched for the old rules)."""
    cls: type[Replica] = request.param
    for flag in ("GC_NEEDS_AGREED_VIEWS", "CHECKPOINT_GAPS_AT_ONCE"):
        monkeypatch.setattr(Replica, flag, getattr(cls, flag))
    yield cls


def test_a_join_that_reaches_members_at_different_times_does_not_resurrect_a_delete(rules: type[Replica]) -> None:
    net = MemoryNetwork(1)
    for n in "abc":
        net.add_replica(n, sync_interval=1.0)
    net.set_members("abc")
    net.put("a", P, K, {"v": 1})
    net.run_for(5)
    net.add_replica("x", sync_interval=1.0)
    net.set_members("abcx", on="ax")  # the join reaches a (and x) first
    assert net.run_until(lambda: net.replicas["x"].get(P, K) is not None, 30), "x copies k from a"
    net.partition_off(["x"])
    net.delete("b", P, K)  # a, b and c see the delete; b and c do not know x yet
    net.run_for(20)
    net.set_members("abcx", on="bc")  # now b and c learn of x
    net.partition(["a"], ["b", "c", "x"])  # x reaches b (and c) before a
    net.run_for(10)
    net.heal_all()
    net.run_for(300)
    on_x = net.replicas["x"].get(P, K)
    if rules is Replica:
        assert on_x is None, "the delete reached x"
        assert net.converged()
    else:
        assert on_x == {"v": 1}, "the old rules keep the deleted value on x for ever"
        assert net.replicas["x"].node_clock == net.replicas["b"].node_clock, "with equal clocks: nothing repairs it"


def test_gap_dots_are_durable_before_anything_relies_on_them(rules: type[Replica]) -> None:
    """A joiner catching up in one-key batches gets gap dots; its exchange stops part-way (the responder goes
    silent); it crashes.  Its restored clock must still hold every gap dot it had announced."""
    net = MemoryNetwork(2)
    for n in "ab":
        net.add_replica(n, sync_interval=1.0, batch_size=1, exchange_timeout=0.5)
    net.set_members("ab")
    for i in range(6):  # history: writes, overwrites and deletes, collected by a and b
        net.put("a", P, (f"k{i}",), {"v": i})
        net.put("a", P, (f"k{i}",), {"v": i + 10})
        if i % 2:
            net.delete("a", P, (f"k{i}",))
    net.run_for(10)
    assert net.replicas["b"].stats()["gc_pending_dots"] == 0, "everything superseded was collected"
    net.add_replica("x", sync_interval=1.0, batch_size=1, exchange_timeout=0.5)
    net.set_members("abx")
    x = net.replicas["x"]
    assert net.run_until(lambda: x.stats()["gap_dots"] > 0, 5), "x got some gaps"
    net.partition_off(["x"])  # the rest of the exchange never comes: it times out part-way
    net.run_for(3)
    announced = x.node_clock
    net.crash("x")
    restored = net.restart("x").node_clock
    lost = announced.missing_dots(restored)
    if rules is Replica:
        assert not lost, f"dots x announced but could not restore: {lost}"
    else:
        assert lost, "the old rule checkpointed gaps only when an exchange completed"
