"""The delivery write path of one message (issue 21, paced messages): `MQTTConnection.write_publish`, the
connection's Sink.write_publish (its bytes made by `Writer.publish`, vmqpy/broker/driver/writer.py), and the session's
shortcuts for the common cases (a QoS 0 message written at once without an `Outgoing`, a clean session's journal
and an empty queue skipped on PUBACK). Each shortcut must give exactly what the general path gives: the same
bytes, counters, order and journal records."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.broker.connections import connection
from tests.unit.broker.fakes import RecordingSink
from tests.unit.broker.sessions import msg, session
from tests.unit.mqtt.strategies import mqtt_text, topic_names
from tests.unit.transports import FakeTransport
from vmqpy.broker.core.session import NULL_JOURNAL, Session
from vmqpy.client_metrics import DELIVERY_LATENCY
from vmqpy.config import Config
from vmqpy.mqtt.codec import encode
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery, Outgoing
from vmqpy.storage import Storage

NOW = 1_000.0
# Only what a publisher can make the node send: a topic name without wildcards, UTF-8 strings without U+0000
# (MQTT 1.5.4; the decoder refuses them coming in, the encoder going out: tests/unit/mqtt/test_encode_errors.py).
TOPICS = topic_names


def _message(topic: str, payload: bytes, props: dict[str, Any]) -> Message:
    return Message(topic, payload, 2, **props)


PROPERTIES = st.fixed_dictionaries({}, optional={
    "expires_at": st.floats(NOW, NOW + 1e6),
    "content_type": mqtt_text,
    "response_topic": st.sampled_from(["r", "reply/to"]),
    "correlation_data": st.binary(max_size=5),
    "payload_format_indicator": st.sampled_from([0, 1]),
    "user_properties": st.lists(st.tuples(mqtt_text, mqtt_text), max_size=2),
})


async def written(transport: FakeTransport) -> bytes:
    await asyncio.sleep(0)  # the turn of the loop that flushes
    data = bytes(transport.written)
    transport.written.clear()
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(level=st.sampled_from([3, 4, 5]), qos=st.sampled_from([0, 1, 2]), retain=st.booleans(), dup=st.booleans(),
       topic=TOPICS, payload=st.binary(max_size=40), props=PROPERTIES,
       ids=st.lists(st.integers(1, 268_435_455), max_size=2), packet_id=st.integers(1, 65535))
def test_the_bytes_written_are_the_encoded_publish_of_the_general_path(
    storage: Storage, level: int, qos: int, retain: bool, dup: bool, topic: str, payload: bytes,
    props: dict[str, Any], ids: list[int], packet_id: int,
) -> None:
    async def check() -> None:
        conn, transport, broker = connection(storage, Config(nodename="b"), level)
        await written(transport)  # the CONNACK
        message = _message(topic, payload, props)
        subscription_ids = ids if level == 5 else []
        pid = packet_id if qos else None
        again = dup and qos > 0
        sent = broker.metrics["mqtt_publish_sent"]
        conn.write_publish(message, qos, retain, pid, subscription_ids, NOW, again)
        expected = message.to_publish(qos, retain, pid, NOW, subscription_ids)
        expected.dup = again
        assert await written(transport) == encode(expected, level)
        assert broker.metrics["mqtt_publish_sent"] == sent + 1
        conn.connection_lost(None)

    asyncio.run(check())


# ages in the middle of a bucket (3.5 ms: le_5000; 0.7 s: le_1000000; 1,000 s: +Inf; arrived 50 ms "later", a
# clock that stepped back: 0, le_100), far from its bounds: the test measures the age again a moment later
@pytest.mark.parametrize(("age_ns", "dup"), [(3_500_000, False), (700_000_000, False), (10**12, False),
                                             (-50_000_000, False), (3_500_000, True), (0, False)])
async def test_the_delivery_latency_counts_as_the_histogram_does(storage: Storage, age_ns: int, dup: bool) -> None:
    """`write_publish` counts the publish-to-delivery latency itself (DELIVERY_LATENCY.observe_ns written out in
    the compiled driver): the same bucket and sum as the histogram's own method, nothing for a resend or a
    message whose arrival was not measured (arrived_ns 0)."""
    conn, transport, broker = connection(storage, Config(nodename="b"), 4)
    await written(transport)
    before = Counter({k: v for k, v in broker.metrics.items() if k.startswith("delivery_latency")})
    arrived = 0 if age_ns == 0 else time.monotonic_ns() - age_ns
    conn.write_publish(Message("a/b", b"x", 1, arrived_ns=arrived), 1, False, 7, [], NOW, dup)
    after = Counter({k: v for k, v in broker.metrics.items() if k.startswith("delivery_latency")})
    expected: Counter[str] = Counter()
    if arrived and not dup:
        DELIVERY_LATENCY.observe_ns(expected, time.monotonic_ns() - arrived)
    counted = after - before
    assert set(counted) == set(+expected)  # (+: without the zero sum of an age of 0)
    bucket = [k for k in counted if "_le_" in k]
    assert all(counted[k] == 1 for k in bucket) and len(bucket) == (1 if expected else 0)
    if expected:  # the sum is in whole microseconds of an age measured a little later here
        assert 0 <= expected["delivery_latency_sum_us"] - counted["delivery_latency_sum_us"] <= 50_000
    conn.connection_lost(None)


@pytest.mark.parametrize("level", [3, 4, 5])
async def test_a_qos0_frame_is_made_once_per_level_and_retain_flag_and_shared(storage: Storage, level: int) -> None:
    first, to_first, _broker = connection(storage, Config(nodename="b"), level)
    second, to_second, _ = connection(storage, Config(nodename="b"), level)
    await written(to_first), await written(to_second)
    message = Message("a/b", b"payload", 0)
    first.write_publish(message, 0, False, None, [], NOW)
    second.write_publish(message, 0, False, None, [], NOW)
    second.write_publish(message, 0, True, None, [], NOW)
    frame = encode(message.to_publish(0, False, None, NOW), level)
    assert await written(to_first) == frame
    assert await written(to_second) == frame + encode(message.to_publish(0, True, None, NOW), level)
    assert message.frames is not None and message.frames[(level, False)] is message.frames[(level, False)]
    assert set(message.frames) == {(level, False), (level, True)}
    first.connection_lost(None)
    second.connection_lost(None)


async def test_writes_of_one_turn_leave_in_one_transport_write_in_order(storage: Storage) -> None:
    conn, transport, _broker = connection(storage, Config(nodename="b"), 4)
    await written(transport)
    writes: list[bytes] = []
    transport.write = writes.append  # type: ignore[method-assign,assignment]
    messages = [Message(f"t/{n}", b"%d" % n, 1) for n in range(3)]
    for n, message in enumerate(messages):
        conn.write_publish(message, min(n, 1), False, n or None, [], NOW)
    assert writes == []  # nothing before the loop turns
    await asyncio.sleep(0)
    assert writes == [b"".join(encode(m.to_publish(min(n, 1), False, n or None, NOW), 4)
                               for n, m in enumerate(messages))]
    conn.connection_lost(None)


# ------------------------------------------------------------------------------------------ the session's shortcuts


def _deliver_qos0(s: Session, sink: RecordingSink) -> Delivery:
    return s.deliver(msg(9, qos=0), 0, False, [], NOW)


@pytest.mark.parametrize(("case", "expected", "written_now"), [
    ("writable", Delivery.SENT, True),
    ("not writable", Delivery.QUEUED, False),
    ("queue not empty", Delivery.QUEUED, False),
    ("offline", Delivery.DROPPED, False),
    ("max packet size fits", Delivery.SENT, True),
    ("max packet size too small", Delivery.DROPPED, False),
])
def test_qos0_delivery_takes_the_shortcut_only_when_the_general_path_would_write_it_at_once(
    case: str, expected: Delivery, written_now: bool
) -> None:
    s, sink = session(max_inflight=1, max_online=5), RecordingSink()
    if case != "offline":
        s.attach(sink, 65535, 0, now=0.0)
    if case == "not writable":
        sink.writable = False
    if case == "queue not empty":
        s.deliver(msg(1), 1, False, [], NOW)
        s.deliver(msg(2), 1, False, [], NOW)  # over the window of 1: queued
    if case.startswith("max packet size"):
        s.max_packet_size = 100 if case.endswith("fits") else 5
    before = len(sink.publishes())
    counters = dict(s.metrics)
    assert _deliver_qos0(s, sink) is expected
    assert (len(sink.publishes()) == before + 1) is written_now
    changed = {k: v - counters.get(k, 0) for k, v in s.metrics.items() if v != counters.get(k, 0)}
    assert changed == {Delivery.SENT: {"queue_message_direct": 1}, Delivery.QUEUED: {"queue_message_queued": 1},
                       Delivery.DROPPED: {"queue_message_drop": 1}}[expected]
    assert s.next_seq() == 4 if case == "queue not empty" else s.next_seq() == 2  # every delivery takes a seq


class RecordingJournal:
    """A journal that records its calls (a persistent session's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def save_message(self, session: Session, out: Outgoing) -> None:
        self.calls.append(("save", out.packet_id))

    def delete_message(self, session: Session, out: Outgoing) -> None:
        self.calls.append(("delete", out.packet_id))

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None:
        self.calls.append(("incoming", packet_id))


def test_a_journal_still_records_a_qos1_send_and_its_puback() -> None:
    journal = RecordingJournal()
    s = Session("c1", protocol_level=5, expiry_interval=None, max_inflight=2, max_online=3, max_offline=2,
                journal=journal)
    s.attach(RecordingSink(), 65535, 0, now=0.0)
    s.deliver(msg(1), 1, False, [], NOW)
    assert s.on_puback(1, NOW) is True
    assert journal.calls == [("save", 1), ("delete", 1)]


def test_a_clean_session_has_the_null_journal() -> None:
    assert session().journal is NULL_JOURNAL


@pytest.mark.parametrize("waiting", ["queued", "held", "drain waiter", "nothing"])
def test_a_puback_still_pumps_whatever_waits(waiting: str) -> None:
    s, sink = session(max_inflight=2 if waiting == "held" else 1, max_online=4), RecordingSink()
    s.attach(sink, 65535, 0, now=0.0)
    s.deliver(msg(1), 1, False, [], NOW)
    released: list[bool] = []
    if waiting == "queued":
        s.deliver(msg(2), 1, False, [], NOW)
    elif waiting == "drain waiter":
        s.wait_for_drain(lambda: released.append(True))
    elif waiting == "held":  # resumed with a window of 1: packet 2's resend waits for room
        s.deliver(msg(2), 1, False, [], NOW)
        s.detach(NOW)
        s.attach(sink, 1, 0, now=NOW)
    before = len(sink.publishes())
    assert s.on_puback(1, NOW) is True
    after = [(p.packet_id, p.dup) for p in sink.publishes()[before:]]
    assert after == {"queued": [(2, False)], "held": [(2, True)]}.get(waiting, [])
    assert released == ([True] if waiting == "drain waiter" else [])
