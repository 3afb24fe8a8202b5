"""The forward driver over a recording network: what one turn of the event loop forwards to a
node leaves in one batch, in order; the buffer's room is decided per publish; duplicates are delivered once."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from tests.unit.cluster.networks import RecordingNetwork
from tests.unit.loop_turns import settle
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.framing import FrameType
from vmqpy.sessions.message import Message
from vmqpy.sessions.records import forward_record


def driver(network: RecordingNetwork, delivered: list[Any] | None = None) -> ForwardDriver:
    def deliver(record: Any, now: float, peer: str, seq: int) -> bool:
        if delivered is not None:
            delivered.append(record)
        return False

    return ForwardDriver(network, deliver)


def record(i: int, size: int = 10) -> tuple[Any, int]:
    return forward_record(Message(f"t/{i}", bytes(size), 1, False, "pub"), [])


async def test_one_turn_of_forwards_leaves_in_one_batch_in_order() -> None:
    net = RecordingNetwork()
    fwd = driver(net)
    acked: list[int] = []
    for i in range(5):
        rec, size = record(i)
        if i % 2:
            assert fwd.forward("n2", rec, size)  # QoS 0
        else:
            assert fwd.forward("n2", rec, size, partial(acked.append, i), lambda _w: None)
    assert net.frames == []  # nothing before the end of the turn
    await settle()
    [(_epoch, low, entries)] = net.batches()
    assert low == 1
    assert [seq for seq, _ in entries] == [1, 0, 2, 0, 3]
    assert [r[1][0] for _, r in entries] == [f"t/{i}" for i in range(5)]


async def test_a_batch_that_reaches_the_largest_frame_is_split_in_order() -> None:
    net = RecordingNetwork(max_frame=1000)
    fwd = driver(net)
    for i in range(12):
        assert fwd.forward("n2", *record(i, 200))
    await settle()
    batches = net.batches()
    assert len(batches) > 1
    assert [r[1][0] for b in batches for _, r in b[2]] == [f"t/{i}" for i in range(12)]
    assert all(len(body) <= 1000 for _, _, body in net.frames)


async def test_a_publish_larger_than_a_frame_is_refused() -> None:
    net = RecordingNetwork(max_frame=1000)
    fwd = driver(net)
    assert not fwd.forward("n2", *record(0, 2000), lambda: None, lambda _w: None)
    assert fwd.sender.pending_count() == 0
    await settle()
    assert net.frames == []


async def test_forwards_beyond_the_buffers_room_are_refused_and_the_rest_are_sent() -> None:
    net = RecordingNetwork(room=1000)
    fwd = driver(net)
    results = [fwd.forward("n2", *record(i, 200), lambda: None, lambda _w: None) for i in range(8)]
    assert results[0] and not results[-1]
    assert results == sorted(results, reverse=True)  # accepted ones first, then refused ones
    await settle()
    [(_e, _low, entries)] = net.batches()
    assert len(entries) == results.count(True) == fwd.sender.pending_count()


async def test_a_batch_the_network_refuses_after_all_fails_its_numbered_forwards() -> None:
    net = RecordingNetwork()
    fwd = driver(net)
    failed: list[str] = []
    fwd.forward("n2", *record(0), lambda: None, failed.append)
    fwd.forward("n2", *record(1))
    net.refuse = True
    await settle()
    assert failed == ["the outgoing buffer to that node is full"]
    assert fwd.sender.pending_count() == 0 and fwd.counters["forwards_refused"] == 2


async def three_numbered_and_one_qos0(sender: ForwardDriver, sender_net: RecordingNetwork) -> Any:
    """Three numbered forwards (QoS 1) and one that is not (QoS 0) to n2, sent in one frame: that frame's body."""
    for i in range(3):
        sender.forward("n2", *record(i), lambda: None, lambda _w: None)
    sender.forward("n2", *record(3))
    await settle()
    [(_, _, body)] = sender_net.frames
    return body


async def test_received_batches_are_delivered_once_in_order_and_acknowledged() -> None:
    sender_net, receiver_net = RecordingNetwork(), RecordingNetwork()
    sender = driver(sender_net)
    delivered: list[Any] = []
    receiver = driver(receiver_net, delivered)
    body = await three_numbered_and_one_qos0(sender, sender_net)
    receiver.receive("n1", body)
    receiver.receive("n1", body)  # a copy (a resend after a broken link): numbered ones are not redelivered
    await settle()
    assert [r[1][0] for r in delivered] == ["t/0", "t/1", "t/2", "t/3", "t/3"]
    assert receiver.counters["forward_duplicates"] == 3
    acks = [body for _, t, body in receiver_net.frames if t is FrameType.CONTROL]
    assert acks and acks[-1]["op"] == "fwd_ack" and acks[-1]["upto"] == 3


@pytest.mark.parametrize("body", [b"", b"B\xc1", b"R" + bytes(24)])
async def test_a_malformed_batch_is_counted_and_dropped(body: bytes) -> None:
    net = RecordingNetwork()
    delivered: list[Any] = []
    fwd = driver(net, delivered)
    fwd.receive("n1", body)
    assert delivered == [] and fwd.counters["forward_malformed"] == 1


async def test_once_a_forward_is_refused_the_later_ones_are_until_the_buffer_drained() -> None:
    """Sizes are bounded from above, so a smaller publish could fit where a larger one did not: refusals stay in
    order all the same, until the network has more room than when the first was refused."""
    net = RecordingNetwork(room=1000)
    fwd = driver(net)
    assert fwd.forward("n2", *record(0, 500))
    assert not fwd.forward("n2", *record(1, 500))
    assert not fwd.forward("n2", *record(2, 1))  # would fit, but comes after a refusal
    await settle()
    net.free = 1000 - len(net.frames[0][2])
    assert not fwd.forward("n2", *record(3, 1))  # the buffer did not drain
    net.free = 1 << 40  # the link is back and the buffer was written
    assert fwd.forward("n2", *record(4, 1))
    await settle()
    assert [r[1][0] for b in net.batches() for _, r in b[2]] == ["t/0", "t/4"]


async def test_with_a_batch_delivery_a_frame_goes_in_one_call_without_its_duplicates() -> None:
    sender_net, receiver_net = RecordingNetwork(), RecordingNetwork()
    sender = driver(sender_net)
    calls: list[list[tuple[int, Any]]] = []
    receiver = driver(receiver_net, [])

    def deliver_batch(batch: list[tuple[int, Any]], now: float, peer: str) -> bool:
        assert peer == "n1"
        calls.append(batch)
        return False

    receiver.deliver_batch = deliver_batch
    body = await three_numbered_and_one_qos0(sender, sender_net)
    receiver.receive("n1", body)
    receiver.receive("n1", body)  # a copy: only the QoS 0 forward (not numbered) goes again
    await settle()
    assert [[(seq, r[1][0]) for seq, r in batch] for batch in calls] == [
        [(1, "t/0"), (2, "t/1"), (3, "t/2"), (0, "t/3")], [(0, "t/3")]]
    assert receiver.counters["forward_duplicates"] == 3
    acks = [body for _, t, body in receiver_net.frames if t is FrameType.CONTROL]
    assert acks and acks[-1]["op"] == "fwd_ack" and acks[-1]["upto"] == 3


async def test_a_batch_a_persistent_session_took_is_acknowledged_after_the_storage_barrier() -> None:
    sender_net, receiver_net = RecordingNetwork(), RecordingNetwork()
    sender = driver(sender_net)
    stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    receiver = ForwardDriver(receiver_net, lambda *_: False, lambda: stored)
    receiver.deliver_batch = lambda batch, now, peer: True
    sender.forward("n2", *record(0), lambda: None, lambda _w: None)
    await settle()
    [(_, _, body)] = sender_net.frames
    receiver.receive("n1", body)
    await settle()
    assert not [body for _, t, body in receiver_net.frames if t is FrameType.CONTROL], "acknowledged before stored"
    stored.set_result(None)
    await settle()
    acks = [body for _, t, body in receiver_net.frames if t is FrameType.CONTROL]
    assert acks and acks[-1]["upto"] == 1


async def test_the_forwards_of_a_turn_and_the_next_leave_in_one_frame_in_order() -> None:
    net = RecordingNetwork()
    fwd = driver(net)
    fwd.forward("n2", *record(0))
    await asyncio.sleep(0)  # the next turn: not sent yet
    assert not net.frames
    fwd.forward("n2", *record(1), lambda: None, lambda _w: None)
    await settle()
    assert [[r[1][0] for _seq, r in entries] for _epoch, _low, entries in net.batches()] == [["t/0", "t/1"]]
    fwd.forward("n2", *record(2))  # a later turn: a new frame
    await settle()
    assert [len(entries) for _epoch, _low, entries in net.batches()] == [2, 1]
