"""Flow control: the client's receive maximum (5.0), the broker's in-flight window (max_inflight_messages),
the broker's CONNACK receive maximum, and what happens when a client exceeds it."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import (
    DISCONNECT,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    PahoClient,
    enc_ack,
    enc_publish,
    unique,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker


def drive_window(sub, total: int, window: int) -> list:
    """Receive `total` QoS 1 PUBLISH packets acknowledging one at a time, asserting that the broker never has
    more than `window` unacknowledged PUBLISHes outstanding. Returns the packets in arrival order."""
    outstanding: list = []
    received: list = []
    deadline = time.monotonic() + 10
    # the broker fills the window, then must stop
    while len(outstanding) < min(window, total):
        p = sub.recv(max(0.1, deadline - time.monotonic()))
        assert p.type == PUBLISH, f"{p!r}"
        outstanding.append(p)
        received.append(p)
    sub.assert_silent(0.4)  # nothing beyond the window while nothing is acknowledged
    while len(received) < total:  # bounded by `total` iterations of acknowledge-one / receive-one
        assert time.monotonic() < deadline, f"only {len(received)} of {total} received"
        sub.ack(outstanding.pop(0))
        p = sub.recv(5)
        assert p.type == PUBLISH, f"{p!r}"
        outstanding.append(p)
        received.append(p)
        assert len(outstanding) <= window, f"{len(outstanding)} unacknowledged PUBLISH outstanding > {window}"
        try:  # anything more right now would exceed the window
            extra = sub.recv(0.05)
            raise AssertionError(f"broker exceeded the window of {window}: {extra!r} "
                                 f"with {len(outstanding)} outstanding")
        except TimeoutError:
            pass
    for p in outstanding:
        sub.ack(p)
    return received


WINDOW_OVERRUN = pytest.mark.vmqpy_only(
    "mosquitto 2.0.11 overruns the window: after one PUBACK with a full window it sends two more PUBLISHes")


@WINDOW_OVERRUN
def test_client_receive_maximum_2_respected_v5(broker, clients):
    topic = unique("flow/rm/")
    sub = clients.raw(broker, 5, props={"receive_maximum": 2})
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, 5)
    n = 10
    for i in range(n):
        pub.publish(topic, f"{i}", qos=1)
    got = drive_window(sub, n, 2)
    assert [int(p.payload) for p in got] == list(range(n))
    sub.assert_silent(0.2)


def test_client_receive_maximum_counts_qos2_v5(broker, clients):
    topic = unique("flow/rm2/")
    sub = clients.raw(broker, 5, props={"receive_maximum": 1})
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, 5)
    for i in range(3):
        pub.publish(topic, f"{i}", qos=2)
    p = sub.expect(PUBLISH)
    sub.assert_silent(0.4)
    got = [p]
    for _ in range(2):  # complete each QoS 2 flow; only then may the next PUBLISH come
        sub.ack(p)  # PUBREC
        rel = sub.recv(5)
        assert rel.packet_id == p.packet_id, f"expected PUBREL before the next PUBLISH, got {rel!r}"
        sub.ack(rel)  # PUBCOMP
        p = sub.expect(PUBLISH)
        got.append(p)
    assert [g.payload for g in got] == [b"0", b"1", b"2"]


@WINDOW_OVERRUN
def test_max_inflight_messages_limits_outbound_window_v311(broker_factory, clients):
    broker = broker_factory(max_inflight_messages=2)
    topic = unique("flow/inf/")
    sub = clients.raw(broker, 4)
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, 4)
    n = 8
    for i in range(n):
        pub.publish(topic, f"{i}", qos=1)
    got = drive_window(sub, n, 2)
    assert [int(p.payload) for p in got] == list(range(n))


def test_connack_receive_maximum_is_max_inflight_messages_v5(broker_factory, clients):
    broker = broker_factory(max_inflight_messages=3)
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(unique("rmx-"))
    assert ack.props.get("receive_maximum") == 3, f"CONNACK {ack!r}"


def test_paho_respects_connack_receive_maximum_v5(broker_factory, clients):
    """paho, limited to the Receive Maximum the broker advertises (whatever it is; 65535 when absent), pushes
    40 QoS 1/2 messages as fast as it can: all are acknowledged and delivered, paho is never disconnected
    (a broker with max_inflight_messages = 2 that advertises it would cut a client that exceeds it)."""
    broker = broker_factory(max_inflight_messages=2)
    probe = clients.raw(broker, 5, connect=False)
    ack = probe.connect(unique("probe-"))
    probe.disconnect()
    rm = ack.props.get("receive_maximum", 65535)
    topic = unique("flow/paho/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=2)
    pub = PahoClient(broker.port, 5, unique("pahorm-"), max_inflight=rm)
    clients._paho.append(pub)
    pub.connect()
    n = 40
    infos = [pub.publish(topic, f"{i}".encode(), qos=1 + i % 2, wait=False) for i in range(n)]
    for info in infos:
        info.wait_for_publish(10)
        assert info.is_published()
    got = sub.collect(n, 10)
    assert sorted(int(m.payload) for m in got) == list(range(n))
    assert pub.disconnects.empty(), f"paho was disconnected: {pub.disconnects.get()}"
    print(f"CONNACK receive maximum with max_inflight_messages = 2: {rm}")


@pytest.mark.vmqpy_only("mosquitto 2.0.11 answers PUBREC 0x97 (quota exceeded) instead of DISCONNECT 0x93 "
                        "(eclipse-mosquitto/mosquitto#3611)")
def test_client_exceeding_receive_maximum_gets_disconnect_0x93_v5(broker_factory, clients):
    broker = broker_factory(max_inflight_messages=2)
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(unique("exceed-"))
    assert ack.props.get("receive_maximum") == 2, (
        f"precondition: CONNACK must advertise receive maximum 2 (max_inflight_messages): {ack!r}")
    topic = unique("flow/exceed/")
    for pid in (1, 2):  # QoS 2 without PUBREL: stays "unacknowledged" (no PUBCOMP) on the broker side
        c.send(enc_publish(topic, b"x", qos=2, packet_id=pid, version=5))
        assert c.expect(PUBREC).packet_id == pid
    c.send(enc_publish(topic, b"x", qos=2, packet_id=3, version=5))
    got = c.wait_closed(5)
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, 0x93)], (
        f"expected DISCONNECT 0x93 (receive maximum exceeded) then close, got {got}")


@pytest.mark.vmqpy_only("receive_max_broker is a vmqpy (VerneMQ) configuration key")
def test_receive_max_broker_is_announced_and_enforced_v5(broker_factory, clients):
    broker = broker_factory(receive_max_broker=3, max_inflight_messages=20)
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(unique("rmb-"))
    assert ack.props.get("receive_maximum") == 3, f"CONNACK {ack!r}"
    topic = unique("flow/rmb/")
    for pid in (1, 2, 3):
        c.send(enc_publish(topic, b"x", qos=2, packet_id=pid, version=5))
        assert c.expect(PUBREC).packet_id == pid
    c.send(enc_ack(PUBREL, 1, 5))  # one QoS 2 flow completed: room for exactly one more
    assert c.expect(PUBCOMP).packet_id == 1
    c.send(enc_publish(topic, b"x", qos=2, packet_id=4, version=5))
    assert c.expect(PUBREC).packet_id == 4
    c.send(enc_publish(topic, b"x", qos=2, packet_id=5, version=5))
    got = c.wait_closed(5)
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, 0x93)], got
