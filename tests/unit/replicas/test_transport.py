"""The replica transport is a second ForwardDriver: REPLICA frames and `rep_ack` acknowledgements sent only after
the replica's own storage barrier; the replica side applies what arrives (vmqpy.replicas.service)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from tests.unit.cluster.networks import RecordingNetwork
from tests.unit.loop_turns import settle
from tests.unit.replicas.tables import MemoryTable
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.forwarding import pack_batch
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.policy import Policy
from vmqpy.config import Config
from vmqpy.replicas.ops import Op, encode_op
from vmqpy.replicas.service import QueueReplication


class BarrierTable(MemoryTable):
    def __init__(self) -> None:
        super().__init__()
        self.barriers: list[Future[None]] = []

    def barrier(self) -> Future[None]:
        future: Future[None] = Future()
        self.barriers.append(future)
        return future


def test_operations_travel_in_replica_frames_and_are_acknowledged_after_the_replicas_barrier() -> None:
    async def run() -> None:
        owner_net, replica_net = RecordingNetwork(), RecordingNetwork()
        owner = ForwardDriver(owner_net, lambda *_: True, frame_type=FrameType.REPLICA, ack_op="rep_ack")
        acked: list[int] = []
        owner.forward("r", encode_op(Op("put", "c", seq=1, value=b"m")), 64, on_ack=lambda: acked.append(1))
        await settle()
        [(peer, frame_type, body)] = owner_net.frames
        assert (peer, frame_type) == ("r", FrameType.REPLICA)

        disk = BarrierTable()
        replication = QueueReplication(disk, replicas=2, write_quorum=2, strict=lambda: True)
        replica = ForwardDriver(replica_net, replication.deliver, disk.barrier, frame_type=FrameType.REPLICA,
                                ack_op="rep_ack")
        replica.receive("o", body)
        replica.receive("o", pack_batch(1, 1, ["bad", "record"]))  # a malformed batch: counted, not fatal
        replica.receive("o", pack_batch(owner.epoch, 1, [2, ["nope"]]))  # a malformed operation
        await settle()
        assert replication.copies.copies_of("c")["o"].messages == {1: b"m"}
        assert replication.counters["operations_malformed"] == 1
        assert replica_net.frames == []  # nothing acknowledged before the replica's own barrier
        for future in disk.barriers:
            future.set_result(None)
        await settle()
        acks = [b for _p, t, b in replica_net.frames if t is FrameType.CONTROL]
        assert acks and acks[-1]["op"] == "rep_ack" and acks[-1]["upto"] >= 1
        owner.acknowledged("r", acks[-1])
        assert acked == [1]

    asyncio.run(run())


def test_forwarding_keeps_its_frame_and_ack_op() -> None:
    driver = ForwardDriver(RecordingNetwork(), lambda *_: False)
    assert (driver.frame_type, driver.ack_op) == (FrameType.FORWARD, "fwd_ack")


def test_no_replication_with_one_replica() -> None:
    config: Any = Config(queue_replicas=1)
    assert QueueReplication.configured(config, BarrierTable(), Policy()) is None
    config = Config(queue_replicas=3, queue_write_quorum=9)
    replication = QueueReplication.configured(config, BarrierTable(), Policy())
    assert replication is not None and replication.settings == (3, 3)  # the quorum is at most R
