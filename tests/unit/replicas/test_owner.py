"""The owner side (vmqpy.replicas.owner): operations to each replica node, the composite barrier, the backlog."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from tests.unit.loop_turns import settle
from tests.unit.replicas.rigs import MEMBERS, RecordingReplicaTransport, make
from tests.unit.replicas.tables import resolved
from vmqpy.cluster.leader import ranking
from vmqpy.replicas.ops import decode_op
from vmqpy.replicas.owner import RETRY_DELAY, QueueReplicator


def test_each_journal_write_goes_to_every_replica_node_as_an_operation() -> None:
    replicator, transport = make({"b@h", "c@h"})
    replicator.message("c1", 4, b"rec")
    replicator.incoming("c1", 7, True)
    replicator.drop("c1")
    targets = [n for n in ranking("c1", MEMBERS) if n != "a@h"]
    assert [node for node, *_ in transport.sent] == [targets[0], targets[1]] * 3
    assert [decode_op(r).kind for _n, r, *_ in transport.sent[::2]] == ["put", "in", "drop"]


def test_nothing_is_replicated_with_one_replica_or_one_member() -> None:
    replicator, transport = make({"b@h"}, replicas=1)
    replicator.message("c1", 1, b"rec")
    alone = QueueReplicator("a@h", lambda: ["a@h"], lambda n: True, transport, resolved, replicas=2,
                            write_quorum=2, strict=lambda: True)
    alone.message("c1", 1, b"rec")
    assert transport.sent == []
    assert replicator.barrier().done() and alone.barrier().done()


@pytest.mark.parametrize(("strict", "reachable", "acks", "done"), [
    (True, {"b@h", "c@h"}, 2, True),
    (True, {"b@h", "c@h"}, 1, False),  # the other replica is reachable and has not answered
    (True, {"b@h"}, 1, False),  # strict: the unreachable replica holds it (quorum 3)
    (False, set(), 0, True),  # availability: nobody reachable, under-replicated
])
def test_the_barrier_waits_for_the_replicas(strict: bool, reachable: set[str], acks: int, done: bool) -> None:
    async def run() -> None:
        replicator, transport = make(set(), strict=strict)
        replicator.message("c1", 1, b"rec")
        order = [n for n in ranking("c1", MEMBERS) if n != "a@h"]
        # reachability as the test says, the first `acks` targets (in ranking order) answering
        replicator._reachable = lambda n: n in reachable or n in order[:acks]
        barrier = replicator.barrier()
        for _node, _record, on_ack, _on_fail in transport.sent[:acks]:
            on_ack()
        await settle()
        assert barrier.done() is done
        if done and acks < 2:
            assert replicator.stats()["under_replicated"] == 1

    asyncio.run(run())


def test_a_replica_that_leaves_releases_the_barrier_and_a_full_buffer_waits_in_order() -> None:
    async def run() -> None:
        transport = RecordingReplicaTransport()
        replicator, _ = make({"b@h", "c@h"}, transport=transport)
        order = [n for n in ranking("c1", MEMBERS) if n != "a@h"]
        transport.full.add(order[1])
        replicator.message("c1", 1, b"one")
        replicator.message("c1", 2, b"two")
        assert replicator.stats()["operations_backlog"] == 2
        barrier = replicator.barrier()
        for _node, _record, on_ack, _on_fail in list(transport.sent):
            on_ack()
        await settle()
        assert not barrier.done()  # the second replica has nothing yet
        transport.full.clear()
        await asyncio.sleep(RETRY_DELAY * 3)
        late = [(n, decode_op(r).seq) for n, r, *_ in transport.sent if n == order[1]]
        assert late == [(order[1], 1), (order[1], 2)]  # in order
        transport.sent[-1][3]("left")  # one fails: that node left the cluster
        transport.sent[-2][2]()
        await settle()
        assert barrier.result() is None
        assert replicator.stats()["operations_pending"] == 0

    asyncio.run(run())


def test_a_local_storage_failure_fails_the_barrier() -> None:
    async def run() -> None:
        failing: Future[None] = Future()
        failing.set_exception(OSError("disk"))
        replicator = QueueReplicator("a@h", lambda: MEMBERS, lambda n: True, RecordingReplicaTransport(),
                                     lambda: failing, replicas=2, write_quorum=2, strict=lambda: True)
        replicator.message("c1", 1, b"rec")
        barrier = replicator.barrier()
        await settle()
        assert isinstance(barrier.exception(), OSError)

    asyncio.run(run())
