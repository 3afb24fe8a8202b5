"""The session's delivery state as data: windows, queues, packet ids, resume, drops by policy."""

from __future__ import annotations

from tests.unit.broker.fakes import RecordingSink
from tests.unit.broker.sessions import msg, session
from vmqpy.broker.core.session import Session
from vmqpy.mqtt.packets import Pubrel
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery, OutState


def test_window_limits_inflight_and_acks_release_the_queue() -> None:
    s, sink = session(max_inflight=2), RecordingSink()
    s.attach(sink, 65535, 0, now=0.0)
    results = [s.deliver(msg(i), 1, False, [], 0.0) for i in range(4)]
    assert results == [Delivery.SENT, Delivery.SENT, Delivery.QUEUED, Delivery.QUEUED]
    assert [p.packet_id for p in sink.publishes()] == [1, 2]
    assert s.on_puback(1, 0.0) is True
    assert [p.packet_id for p in sink.publishes()] == [1, 2, 3]
    assert s.on_puback(1, 0.0) is False  # already acknowledged
    assert list(s.inflight) == [2, 3]


def test_client_receive_maximum_narrows_the_window() -> None:
    s, sink = session(max_inflight=20), RecordingSink()
    s.attach(sink, 1, 0, now=0.0)
    s.deliver(msg(1), 1, False, [], 0.0)
    assert s.deliver(msg(2), 1, False, [], 0.0) is Delivery.QUEUED


def test_qos2_outgoing_flow() -> None:
    s, sink = session(), RecordingSink()
    s.attach(sink, 10, 0, now=0.0)
    s.deliver(msg(1, qos=2), 2, False, [], 0.0)
    assert s.on_pubcomp(1, 0.0) is False  # PUBCOMP before PUBREC is not accepted
    assert s.on_pubrec(1, 0, 0.0) == Pubrel(1)
    assert s.inflight[1].state is OutState.RELEASED
    assert s.on_pubcomp(1, 0.0) is True
    assert not s.inflight


def test_resume_resends_inflight_with_original_ids_and_dup() -> None:
    s, first = session(max_inflight=5), RecordingSink()
    s.attach(first, 65535, 0, now=0.0)
    s.deliver(msg(1), 1, False, [], 0.0)
    s.deliver(msg(2, qos=2), 2, False, [], 0.0)
    s.on_pubrec(2, 0, 0.0)
    s.detach(1.0)
    s.deliver(msg(3), 1, False, [], 1.0)  # offline: queued
    second = RecordingSink()
    s.attach(second, 65535, 0, now=2.0)
    kinds = [(type(p).__name__, getattr(p, "packet_id", None), getattr(p, "dup", None)) for p in second.packets]
    assert kinds == [("Publish", 1, True), ("Pubrel", 2, None), ("Publish", 3, False)]


def test_offline_queue_is_bounded_and_drops_qos0() -> None:
    s = session(max_offline=2)
    assert s.deliver(msg(1, qos=0), 0, False, [], 0.0) is Delivery.DROPPED
    assert s.deliver(msg(2), 1, False, [], 0.0) is Delivery.QUEUED
    assert s.deliver(msg(3), 1, False, [], 0.0) is Delivery.QUEUED
    assert s.deliver(msg(4), 1, False, [], 0.0) is Delivery.DROPPED
    assert s.dropped == 2
    assert [o.message.topic for o in s.queue] == ["t/2", "t/3"]


def test_online_qos1_is_never_dropped_and_marks_congestion() -> None:
    s, sink = session(max_inflight=1, max_online=2), RecordingSink()
    s.attach(sink, 65535, 0, now=0.0)
    outcomes = [s.deliver(msg(i), 1, False, [], 0.0) for i in range(5)]
    assert Delivery.DROPPED not in outcomes
    assert s.congested
    assert s.deliver(msg(9, qos=0), 0, False, [], 0.0) is Delivery.DROPPED  # QoS 0 beyond max_online
    released: list[int] = []
    s.wait_for_drain(lambda: released.append(1))
    for packet_id in range(1, 6):
        s.on_puback(packet_id, 0.0)
    assert released == [1]
    assert not s.queue and not s.congested


def test_unwritable_connection_queues_and_pump_resumes() -> None:
    s, sink = session(), RecordingSink()
    s.attach(sink, 65535, 0, now=0.0)
    sink.writable = False
    assert s.deliver(msg(1, qos=0), 0, False, [], 0.0) is Delivery.QUEUED
    sink.writable = True
    s.pump(0.0)
    assert [p.topic for p in sink.publishes()] == ["t/1"]


def test_expired_messages_are_not_sent_and_expiry_counts_down() -> None:
    s, sink = session(), RecordingSink()
    s.deliver(msg(1, expires_at=10.0), 1, False, [], 0.0)
    s.deliver(msg(2, expires_at=100.0), 1, False, [], 0.0)
    s.attach(sink, 65535, 0, now=50.0)
    (only,) = sink.publishes()
    assert only.topic == "t/2"
    assert only.properties.message_expiry_interval == 50


def test_client_maximum_packet_size_discards_large_messages() -> None:
    s, sink = session(), RecordingSink()
    s.attach(sink, 65535, max_packet_size=64, now=0.0)
    big = Message("t", b"x" * 100, 1)
    assert s.deliver(big, 1, False, [], 0.0) is Delivery.DROPPED
    assert not sink.packets


def test_packet_ids_skip_those_in_flight() -> None:
    s, sink = session(max_inflight=3), RecordingSink()
    s.attach(sink, 65535, 0, now=0.0)
    for i in range(3):
        s.deliver(msg(i), 1, False, [], 0.0)
    s.on_puback(2, 0.0)
    s.deliver(msg(9), 1, False, [], 0.0)
    assert sorted(s.inflight) == [1, 3, 4]


def test_resume_resends_no_more_than_the_new_receive_maximum() -> None:
    """MQTT 5.0 4.9 / [MQTT-3.3.4-9]: a client that comes back with a smaller Receive Maximum gets at most that
    many PUBLISHes resent at once, with their original ids, the rest as acknowledgements make room."""
    s = session(max_inflight=4, max_online=10)
    first = RecordingSink()
    s.attach(first, 4, 0, 0.0)
    for n in range(4):
        s.deliver(msg(n), 1, False, [], 0.0)
    ids = [p.packet_id or 0 for p in first.publishes()]
    s.detach(1.0)
    again = RecordingSink()
    s.attach(again, 2, 0, 2.0)  # Receive Maximum 2 now
    assert [(p.packet_id, p.dup) for p in again.publishes()] == [(ids[0], True), (ids[1], True)]
    s.on_puback(ids[0], 3.0)
    assert [p.packet_id for p in again.publishes()] == ids[:3]
    s.on_puback(ids[1], 3.0)
    s.on_puback(ids[2], 3.0)
    assert [(p.packet_id, p.dup) for p in again.publishes()][3:] == [(ids[3], True)]


def test_resume_drops_what_the_new_maximum_packet_size_does_not_allow() -> None:
    """[MQTT-3.1.2-24]: a message in flight that is larger than the new connection's Maximum Packet Size is not
    resent; it is dropped and counted, and the rest go on."""
    s = session(max_inflight=4, max_online=10)
    first = RecordingSink()
    s.attach(first, 4, 0, 0.0)
    s.deliver(Message("t/big", b"x" * 200, 1), 1, False, [], 0.0)
    s.deliver(msg(1), 1, False, [], 0.0)
    s.detach(1.0)
    again = RecordingSink()
    s.attach(again, 4, 100, 2.0)
    assert [p.topic for p in again.publishes()] == ["t/1"]
    assert s.dropped == 1 and len(s.inflight) == 1


def test_sessions_share_one_empty_awaiting_release_until_they_await_one() -> None:
    """An empty set is 216 bytes and most sessions never receive QoS 2: they share one frozenset (NO_IDS) until
    `await_release`, and that one stays empty whatever any session does."""
    from vmqpy.broker.core.session import NO_IDS

    a, b = (Session(cid, protocol_level=5, expiry_interval=None, max_inflight=10, max_online=10, max_offline=10)
            for cid in ("a", "b"))
    assert a.awaiting_release is NO_IDS and b.awaiting_release is NO_IDS
    assert not a.release(7)
    a.await_release((7, 8))
    assert a.awaiting_release == {7, 8} and b.awaiting_release is NO_IDS and not NO_IDS
    assert a.release(7) and not a.release(7) and a.awaiting_release == {8}
    b.await_release(())
    assert b.awaiting_release == set() and not NO_IDS
