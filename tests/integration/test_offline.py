"""Offline queues of persistent sessions: delivery on reconnect, order, overflow (max_offline_messages),
clean sessions, and message expiry of queued messages (5.0)."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import PUBLISH, unique
from tests.integration.persistent_sessions import persistent

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def go_offline(clients, broker, version, topic, qos=1):
    """A persistent subscriber to `topic` that is then disconnected normally; returns its client id."""
    cid = unique("off-")
    sub = clients.raw(broker, version, cid, **persistent(version))
    sub.subscribe(topic, qos=qos)
    sub.disconnect()
    return cid


@pytest.mark.parametrize("version", VERSIONS)
def test_offline_qos1_messages_delivered_in_order(broker, clients, version):
    topic = unique("off/q1/")
    cid = go_offline(clients, broker, version, topic)
    pub = clients.raw(broker, version)
    n = 10
    for i in range(n):
        pub.publish(topic, f"{i}", qos=1)
    sub = clients.raw(broker, version, connect=False)
    assert sub.connect(cid, **persistent(version)).session_present
    got = sub.recv_publishes(n)
    assert [int(p.payload) for p in got] == list(range(n))
    assert all(p.qos == 1 for p in got)
    sub.assert_silent(0.3)


@pytest.mark.parametrize("version", VERSIONS)
def test_offline_qos2_delivered_exactly_once(broker, clients, version):
    topic = unique("off/q2/")
    cid = go_offline(clients, broker, version, topic, qos=2)
    pub = clients.raw(broker, version)
    for i in range(3):
        pub.publish(topic, f"{i}", qos=2)
    sub = clients.raw(broker, version, connect=False)
    assert sub.connect(cid, **persistent(version)).session_present
    got = sub.recv_publishes(3)  # completes PUBREC/PUBREL/PUBCOMP
    assert [p.payload for p in got] == [b"0", b"1", b"2"]
    assert all(p.qos == 2 for p in got)
    # drain the PUBRELs of the last flows, then nothing more
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            p = sub.recv(0.3)
        except TimeoutError:
            break
        assert p.type != PUBLISH, f"duplicate delivery {p!r}"
        sub.ack(p)


@pytest.mark.parametrize("version", VERSIONS)
def test_paho_persistent_subscriber_gets_offline_messages(broker, clients, version):
    topic = unique("off/paho/")
    cid = unique("offp-")
    kw = {"session_expiry": 300} if version == 5 else {}
    sub = clients.paho(broker, version, cid, clean=False, **kw)
    sub.subscribe(topic, qos=1)
    sub.disconnect()
    sub.stop()
    pub = clients.paho(broker, version)
    for i in range(5):
        pub.publish(topic, f"{i}".encode(), qos=1)
    sub2 = clients.paho(broker, version, cid, clean=False, connect=False, **kw)
    flags, _, _ = sub2.connect()
    assert flags.session_present
    got = sub2.collect(5)
    assert [m.payload for m in got] == [b"0", b"1", b"2", b"3", b"4"]


@pytest.mark.parametrize("version", VERSIONS)
def test_offline_queue_overflow_keeps_exactly_max_offline_messages(broker_factory, clients, version):
    broker = broker_factory(max_offline_messages=5)
    topic = unique("off/ovf/")
    cid = go_offline(clients, broker, version, topic)
    pub = clients.raw(broker, version)
    for i in range(10):
        pub.publish(topic, f"{i}", qos=1)
    sub = clients.raw(broker, version, connect=False)
    assert sub.connect(cid, **persistent(version)).session_present
    got = sub.recv_publishes(5)
    sub.assert_silent(0.5)
    payloads = [int(p.payload) for p in got]
    # Both brokers document that messages beyond the limit are dropped, i.e. the oldest are kept
    # (docs/broker.md "Overload"; mosquitto.conf(5) max_queued_messages).
    assert payloads == [0, 1, 2, 3, 4], f"expected exactly the 5 oldest messages: {payloads}"


@pytest.mark.parametrize("version", VERSIONS)
def test_clean_reconnect_discards_offline_queue(broker, clients, version):
    topic = unique("off/clean/")
    cid = go_offline(clients, broker, version, topic)
    pub = clients.raw(broker, version)
    for i in range(3):
        pub.publish(topic, f"{i}", qos=1)
    sub = clients.raw(broker, version, connect=False)
    ack = sub.connect(cid, clean=True)
    assert not ack.session_present
    sub.assert_silent(0.5)


def test_session_expiry_0_queues_nothing_v5(broker, clients):
    topic = unique("off/exp0/")
    cid = unique("off0-")
    sub = clients.raw(broker, 5, cid, clean=True)  # session expiry 0: session ends at disconnect
    sub.subscribe(topic, qos=1)
    sub.disconnect()
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"lost", qos=1)
    sub2 = clients.raw(broker, 5, connect=False)
    ack = sub2.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert not ack.session_present
    sub2.assert_silent(0.5)


def test_qos0_for_offline_session_is_not_delivered_as_qos1(broker, clients):
    """Whether QoS 0 is queued for offline sessions is broker policy; if delivered, it must stay QoS 0."""
    topic = unique("off/q0/")
    cid = go_offline(clients, broker, 4, topic)
    pub = clients.raw(broker, 4)
    pub.publish(topic, b"zero", qos=0)
    pub.publish(topic, b"one", qos=1)
    sub = clients.raw(broker, 4, connect=False)
    assert sub.connect(cid, **persistent(4)).session_present
    got = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and not any(p.payload == b"one" for p in got):
        got += sub.recv_publishes(1)
    assert got[-1].payload == b"one" and got[-1].qos == 1
    for p in got[:-1]:
        assert (p.payload, p.qos) == (b"zero", 0), f"{p!r}"
    print(f"QoS 0 queued for offline session: {len(got) == 2}")


# ---------------------------------------------------------------------------------- message expiry (5.0)


def test_queued_message_expires_and_remaining_expiry_decremented_v5(broker, clients):
    topic = unique("off/mexp/")
    cid = go_offline(clients, broker, 5, topic)
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"short", qos=1, props={"message_expiry_interval": 1})
    pub.publish(topic, b"long", qos=1, props={"message_expiry_interval": 60})
    pub.publish(topic, b"forever", qos=1)
    time.sleep(2.2)  # let the 1 s message expiry pass (protocol timer, not synchronisation)
    sub = clients.raw(broker, 5, connect=False)
    assert sub.connect(cid, **persistent(5)).session_present
    got = sub.recv_publishes(2)
    sub.assert_silent(0.3)
    assert [p.payload for p in got] == [b"long", b"forever"], f"expired message delivered: {got}"
    remaining = got[0].props.get("message_expiry_interval")
    assert remaining is not None and 50 <= remaining <= 58, (
        f"the forwarded expiry must be decreased by the ~2 s spent queued: {remaining}")
    assert "message_expiry_interval" not in got[1].props, f"{got[1]!r}"


def test_live_message_carries_expiry_interval_v5(broker, clients):
    topic = unique("off/live/")
    sub = clients.raw(broker, 5)
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"x", qos=1, props={"message_expiry_interval": 30})
    [p] = sub.recv_publishes(1)
    assert p.props.get("message_expiry_interval") in (29, 30), f"{p!r}"
