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
    varint,
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


# -- reason codes the spec prescribes, spot-checked (MQTT 5.0 section 4.13; docs/mqtt-codec.md's table) ---------
def publish_with_raw_props(block: bytes, topic: bytes = b"t/props", qos: int = 0) -> bytes:
    """A 5.0 PUBLISH whose property list is `block` as given (duplicates, unknown ids...)."""
    packet_id = b"\x00\x01" if qos else b""
    return frame(3, qos << 1, utf8(topic) + packet_id + varint(len(block)) + block + b"payload")


V5_AFTER_CONNECT = {
    "duplicate-property": (publish_with_raw_props(b"\x03" + utf8("a") + b"\x03" + utf8("b")), 0x82),
    "unknown-property-id": (publish_with_raw_props(b"\x7f\x00"), 0x81),
    "property-not-allowed-in-publish": (publish_with_raw_props(b"\x11\x00\x00\x00\x05"), 0x81),
    "subscription-identifier-from-client": (publish_with_raw_props(b"\x0b\x05"), 0x82),
    "topic-alias-0": (publish_with_raw_props(b"\x23\x00\x00"), 0x94),
    "property-length-past-the-end": (frame(3, 0, utf8("t/plen") + b"\x05\x01"), 0x81),
    "payload-format-indicator-2": (publish_with_raw_props(b"\x01\x02"), 0x82),
    "packet-identifier-0": (frame(3, 0x02, utf8("t/pid0") + b"\x00\x00\x00payload"), 0x82),
    "publish-wildcard-topic": (enc_publish("a/+/b", b"x", version=5), 0x90),
    "subscribe-filter-past-the-end": (b"\x82\x07\x00\x01\x00\x00\x05ab", 0x81),  # a 5-byte filter, 2 there
    "subscribe-without-filters": (b"\x82\x03\x00\x01\x00", 0x82),
    "subscribe-retain-handling-3": (frame(8, 0x02, b"\x00\x07\x00" + utf8("rh/3") + b"\x31"), 0x82),
    "subscribe-no-local-on-shared": (frame(8, 0x02, b"\x00\x08\x00" + utf8("$share/g/x") + b"\x05"), 0x82),
    "subscribe-reserved-option-bits": (frame(8, 0x02, b"\x00\x09\x00" + utf8("rsv/x") + b"\xc1"), 0x81),
    "auth-after-connect-without-method": (frame(15, 0, b"\x18\x00"), 0x82),
}


@pytest.mark.parametrize("case", list(V5_AFTER_CONNECT))
@pytest.mark.vmqpy_only("the exact reason code of each malformed 5.0 packet")
def test_v5_malformed_packet_gets_the_prescribed_reason_code(broker, case):
    """One DISCONNECT with the reason code the spec prescribes, then the close; the same bytes on 3.1.1 (where
    they are malformed at all) just close the connection. The node keeps serving."""
    wire, code = V5_AFTER_CONNECT[case]
    c = RawClient(broker.port, version=5)
    try:
        c.connect(unique("rc5-"))
        c.send(wire)
        got = c.wait_closed(5)
    finally:
        c.close()
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, code)], f"{case}: got {got}"
    assert_serving(broker, 5)


V5_CONNECT = {
    "receive-maximum-0": (enc_connect("rm0", 5, props={"receive_maximum": 0}), 0x82),
    "duplicate-session-expiry": (frame(1, 0, utf8("MQTT") + b"\x05\x02\x00\x3c" + varint(10)
                                       + b"\x11\x00\x00\x00\x01\x11\x00\x00\x00\x02" + utf8("dup")), 0x82),
    "client-id-not-utf8": (frame(1, 0, utf8("MQTT") + b"\x05\x02\x00\x3c\x00" + utf8(b"\xc3\x28")), 0x81),
    "will-qos-3": (frame(1, 0, utf8("MQTT") + b"\x05\x1e\x00\x3c\x00" + utf8("wq3") + b"\x00" + utf8("w")
                         + utf8("x")), 0x81),
    "unknown-protocol-level": (frame(1, 0, utf8("MQTT") + b"\x06\x02\x00\x3c\x00" + utf8("lvl6")), 0x84),
}


@pytest.mark.parametrize("case", list(V5_CONNECT))
@pytest.mark.vmqpy_only("the exact CONNACK reason code of each malformed 5.0 CONNECT")
def test_v5_malformed_connect_gets_a_refusing_connack(broker, case):
    """A 5.0 CONNECT that is malformed after its protocol level is answered with a CONNACK carrying the reason
    code (0x84 in the 3.1.1 layout, return code 1, for a level the node does not speak), then closed."""
    wire, code = V5_CONNECT[case]
    c = RawClient(broker.port, version=4 if code == 0x84 else 5)
    try:
        c.send(wire)
        got = c.wait_closed(5)
    finally:
        c.close()
    expected = 1 if code == 0x84 else code
    assert [(p.type, p.reason_code) for p in got] == [(CONNACK, expected)], f"{case}: got {got}"
    assert_serving(broker, 5)
