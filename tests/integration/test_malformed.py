"""Malformed and forbidden input on raw sockets. Each case: the connection is closed (for 5.0, possibly after a
DISCONNECT with the reason code the spec prescribes), the broker process stays alive and keeps serving."""

from __future__ import annotations

import pytest

from tests.integration.clients import (
    CONNACK,
    DISCONNECT,
    SUBACK,
    RawClient,
    enc_connect,
    enc_publish,
    enc_subscribe,
    frame,
    unique,
    utf8,
)
from tests.integration.conftest import assert_serving

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]

MALFORMED = {0x81}
PROTOCOL = {0x82}


def publish_raw_topic(topic: bytes, version: int, flags: int = 0x00, packet_id: bytes = b"") -> bytes:
    body = utf8(topic) + packet_id + (b"\x00" if version == 5 else b"") + b"payload"
    return frame(3, flags, body)


# name -> (bytes to send after a successful CONNECT, reason codes a 5.0 DISCONNECT may carry)
CASES = {
    "remaining-length-5-bytes": (lambda v: b"\x30\xff\xff\xff\xff\x01" + b"\x00" * 16, MALFORMED),
    "invalid-utf8-topic": (lambda v: publish_raw_topic(b"bad/\xff\xfe", v), MALFORMED),
    "utf8-surrogate-topic": (lambda v: publish_raw_topic(b"bad/\xed\xa0\x80", v), MALFORMED),
    "null-char-in-topic": (lambda v: publish_raw_topic(b"bad/\x00/x", v), MALFORMED),
    "publish-plus-wildcard": (lambda v: enc_publish("a/+/b", b"x", version=v), MALFORMED | PROTOCOL | {0x90}),
    "publish-hash-wildcard": (lambda v: enc_publish("a/#", b"x", qos=1, packet_id=1, version=v),
                              MALFORMED | PROTOCOL | {0x90}),
    "publish-qos-3": (lambda v: publish_raw_topic(b"q/3", v, flags=0x06, packet_id=b"\x00\x01"), MALFORMED),
    "publish-empty-topic": (lambda v: publish_raw_topic(b"", v), MALFORMED | PROTOCOL | {0x90}),
    "second-connect": (lambda v: enc_connect(unique("again-"), v), PROTOCOL),
    "subscribe-bad-reserved-flags": (lambda v: frame(8, 0x00, enc_subscribe(1, [("a", 0)], v)[2:]), MALFORMED),
    "subscribe-no-filters": (lambda v: frame(8, 0x02, b"\x00\x01" + (b"\x00" if v == 5 else b"")),
                             MALFORMED | PROTOCOL),
    "unknown-packet-type-0": (lambda v: b"\x00\x00", MALFORMED | PROTOCOL),
    "connack-from-client": (lambda v: b"\x20\x02\x00\x00", MALFORMED | PROTOCOL),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_after_connect_closes(broker, version, case):
    build, allowed = CASES[case]
    c = RawClient(broker.port, version=version)
    try:
        c.connect(unique("bad-"))
        c.send(build(version))
        got = c.wait_closed(5)
    finally:
        c.close()
    if version == 4:
        assert got == [], f"{case}: 3.1.1 server just closes, got {got}"
    else:
        assert all(p.type == DISCONNECT for p in got) and len(got) <= 1, f"{case}: got {got}"
        if got:
            assert got[0].reason_code in allowed, (
                f"{case}: DISCONNECT reason 0x{got[0].reason_code:02x}, expected one of "
                f"{[hex(x) for x in sorted(allowed)]}")
    assert_serving(broker, version)


@pytest.mark.parametrize("case", ["remaining-length-5-bytes", "publish-qos-3", "second-connect",
                                  "invalid-utf8-topic", "publish-plus-wildcard"])
@pytest.mark.vmqpy_only("mosquitto 2.0.11 closes without a DISCONNECT on a 5-byte remaining length and on a "
                        "second CONNECT")
def test_malformed_v5_gets_disconnect_reason(broker, case):
    """vmqpy sends the DISCONNECT the spec prescribes before closing."""
    build, allowed = CASES[case]
    c = RawClient(broker.port, version=5)
    try:
        c.connect(unique("bad5-"))
        c.send(build(5))
        got = c.wait_closed(5)
    finally:
        c.close()
    assert len(got) == 1 and got[0].type == DISCONNECT and got[0].reason_code in allowed, (
        f"{case}: expected one DISCONNECT with reason in {[hex(x) for x in sorted(allowed)]}, got {got}")


BEFORE_CONNECT = {
    "http-request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "all-ff": b"\xff" * 32,
    "zeros": b"\x00" * 32,
    "publish-before-connect": enc_publish("x/y", b"z"),
    "pingreq-before-connect": b"\xc0\x00",
    "connect-reserved-flag": (lambda b: b[:9] + bytes([b[9] | 0x01]) + b[10:])(enc_connect("rsv", 4)),
    "connect-garbage-body": frame(1, 0, b"\xff" * 20),
    "connect-bad-protocol-name-length": b"\x10\x0c\x00\x40MQTT\x04\x02\x00\x3c\x00\x00",
}


@pytest.mark.parametrize("case", list(BEFORE_CONNECT))
def test_garbage_before_connect_closes(broker, case):
    c = RawClient(broker.port)
    try:
        c.send(BEFORE_CONNECT[case])
        got = c.wait_closed(5)
    finally:
        c.close()
    # at most a refusing CONNACK may come back
    assert all(p.type == CONNACK and p.reason_code != 0 for p in got), f"{case}: got {got}"
    assert_serving(broker)


@pytest.mark.parametrize("version", VERSIONS)
def test_invalid_utf8_client_id_refused(broker, version):
    body = bytearray(enc_connect("XXXX", version)[2:])
    i = body.index(b"XXXX")
    body[i:i + 4] = b"\xc3\x28\xa0\xa1"
    c = RawClient(broker.port, version=version)
    try:
        c.send(frame(1, 0, bytes(body)))
        got = c.wait_closed(5)
    finally:
        c.close()
    assert all(p.type == CONNACK and p.reason_code != 0 for p in got), f"got {got}"
    assert_serving(broker, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("bad_filter", ["a/#/b", "a/b#", "a+/b", "#/x"])
def test_invalid_subscription_filter_refused(broker, version, bad_filter):
    c = RawClient(broker.port, version=version)
    try:
        c.connect(unique("badsub-"))
        c.send(enc_subscribe(1, [(bad_filter, 1)], version))
        try:
            ack = c.expect(SUBACK, 5)
        except Exception:
            ack = None
        if ack is not None:
            assert ack.reason_codes == [0x80 if version == 4 else 0x8F] or (
                version == 5 and ack.reason_codes == [0x80]), f"{bad_filter}: {ack!r}"
        else:
            c.wait_closed(5)
    finally:
        c.close()
    assert_serving(broker, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_client_vanishing_mid_packet(broker, version):
    c = RawClient(broker.port, version=version)
    c.connect(unique("half-"))
    c.send(enc_publish("half/x", b"y" * 100, version=version)[:20])
    c.close()
    assert_serving(broker, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_oversized_packet_rejected(broker_factory, version):
    broker = broker_factory(max_message_size=1024)
    c = RawClient(broker.port, version=version)
    try:
        c.connect(unique("big-"))
        c.send(enc_publish("big/x", b"x" * 4096, qos=1, packet_id=1, version=version))
        got = c.wait_closed(5)
    finally:
        c.close()
    if version == 5:
        assert all(p.type == DISCONNECT and p.reason_code == 0x95 for p in got), (
            f"expected at most DISCONNECT 0x95 (packet too large), got {got}")
    else:
        assert got == [], got
    assert_serving(broker, version)


def test_many_bad_clients_do_not_hurt_good_ones(broker, clients):
    good = clients.raw(broker, 4)
    topic = unique("survive/")
    good.subscribe(topic, qos=1)
    for i in range(20):  # bounded
        bad = RawClient(broker.port)
        bad.send(b"\x10\xff\xff\xff\x7f" + bytes([i]) * 10)
        bad.close()
    clients.raw(broker, 4).publish(topic, b"still-here", qos=1)
    [p] = good.recv_publishes(1)
    assert p.payload == b"still-here"
    assert_serving(broker)
