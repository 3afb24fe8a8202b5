"""Handing a session over between nodes: the image, the message records, adopting and forgetting messages."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.broker.core.session import Session
from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions.handover import SessionImage, pack_messages, unpack_messages
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Outgoing, OutState, SubEntry


def session(cid: str = "c") -> Session:
    return Session(cid, protocol_level=5, expiry_interval=None, max_inflight=10, max_online=100, max_offline=100)


def msg(i: int, qos: int = 1) -> Message:
    return Message(f"t/{i}", f"p{i}".encode(), qos, False, "pub", None)


class FakeSink:
    def __init__(self) -> None:
        self.published: list[tuple[str, int | None, bool]] = []

    def write_packet(self, packet: Any) -> None:
        pass

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False) -> None:
        self.published.append((message.topic, packet_id, dup))

    def can_write(self) -> bool:
        return True

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        return None, 0.0


def test_image_round_trip_keeps_subscriptions_and_qos2_state() -> None:
    s = session()
    s.subscriptions["a/+"] = SubEntry("a/+", "a/+", SubOptions(1, True, False, 2), 7, None)
    s.subscriptions["$share/g/b"] = SubEntry("$share/g/b", "b", SubOptions(2, False, True, 0), None, "g")
    s.awaiting_release = {3, 9}
    image = SessionImage.unpack(SessionImage.of(s).pack())
    assert image.present and image.client_id == "c" and image.protocol_level == 5
    assert image.expiry_interval is None and image.awaiting_release == [3, 9]
    assert {e.topic_filter: e for e in image.subscriptions} == s.subscriptions


def test_absent_image() -> None:
    image = SessionImage.unpack(SessionImage.absent("x").pack())
    assert not image.present and image.subscriptions == []


def test_pending_lists_inflight_and_queue_in_seq_order_and_forget_upto_removes() -> None:
    s = session()
    s.attach(FakeSink(), 2, 0, 0.0)
    for i in range(5):
        s.deliver(msg(i), 1, False, [], 0.0)  # 2 in flight (seq 1, 2), 3 queued (3, 4, 5)
    assert [o.seq for o in s.pending(0)] == [1, 2, 3, 4, 5]
    assert [o.seq for o in s.pending(3)] == [4, 5]
    assert s.forget_upto(3) == 3
    assert [o.seq for o in s.pending(0)] == [4, 5]
    assert s.inflight == {}


def test_adopt_before_attach_keeps_packet_ids_then_attach_resends_them_as_dup() -> None:
    old = session()
    old.attach(FakeSink(), 2, 0, 0.0)
    for i in range(4):
        old.deliver(msg(i), 1, False, [], 0.0)
    moved = unpack_messages(pack_messages(old.pending(0)))
    new = session()
    for out in moved:
        assert new.adopt(out)
    assert sorted(new.inflight) == [1, 2] and len(new.queue) == 2
    sink = FakeSink()
    new.attach(sink, 10, 0, 0.0)
    assert sink.published[:2] == [("t/0", 1, True), ("t/1", 2, True)]
    assert [p[0] for p in sink.published[2:]] == ["t/2", "t/3"]
    assert all(not p[2] for p in sink.published[2:])


def test_adopt_into_a_live_session_queues_anew_and_drops_only_an_unresumable_pubrel() -> None:
    new = session()
    sink = FakeSink()
    new.attach(sink, 10, 0, 0.0)
    published = Outgoing(5, msg(1), 1, False, [], 42, OutState.PUBLISHED)
    released = Outgoing(6, msg(2, 2), 2, False, [], 43, OutState.RELEASED)
    assert new.adopt(published)
    assert not new.adopt(released)
    assert new.dropped == 1
    new.pump(0.0)
    assert sink.published == [("t/1", 1, False)]


@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from(list(OutState)),
                          st.one_of(st.none(), st.integers(1, 65535))), max_size=20))
def test_message_records_round_trip(items: list[tuple[int, bool, OutState, int | None]]) -> None:
    outs = [Outgoing(i + 1, msg(i, qos), qos, retain, [i], pid, state)
            for i, (qos, retain, state, pid) in enumerate(items)]
    back = unpack_messages(pack_messages(outs))
    assert [(o.seq, o.qos, o.retain, o.subscription_ids, o.packet_id, o.state, o.message.topic,
             o.message.payload) for o in back] == \
        [(o.seq, o.qos, o.retain, o.subscription_ids, o.packet_id, o.state, o.message.topic, o.message.payload)
         for o in outs]
