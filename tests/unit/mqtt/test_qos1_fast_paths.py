"""The QoS 1 path's shortcuts in the codec give the same packets and bytes as the general code: a PUBACK decoded
or encoded without the table dispatch, a PUBLISH without properties encoded without a `Publish`
(`encode_plain_publish`), and the one shared `NO_PROPERTIES` of packets that carry none."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.mqtt import strategies as mst
from tests.unit.mqtt.helpers import client, decode_one, server
from vmqpy.mqtt.codec import encode, encode_plain_publish
from vmqpy.mqtt.errors import LocalProtocolError, ProtocolViolation
from vmqpy.mqtt.packets import NO_PROPERTIES, Properties, Puback, Pubcomp, Publish, Pubrec, Pubrel
from vmqpy.mqtt.properties import is_empty

MANY = settings(max_examples=150, deadline=None)
LEVELS = (3, 4, 5)


def _general_publish(p: Publish, level: int) -> bytes:
    """The bytes the encoder gave before the shortcut, for a PUBLISH without properties: built by hand."""
    topic = p.topic.encode()
    pid = b"" if p.qos == 0 else (p.packet_id or 0).to_bytes(2, "big")
    body = len(topic).to_bytes(2, "big") + topic + pid + (b"\x00" if level == 5 else b"") + p.payload
    first = 0x30 | (p.qos << 1) | (0x08 if p.dup else 0) | (0x01 if p.retain else 0)
    n, length = len(body), bytearray()
    while True:
        n, digit = divmod(n, 128)
        length.append(digit | (0x80 if n else 0))
        if not n:
            break
    return bytes((first,)) + bytes(length) + body


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("qos", "retain", "dup", "packet_id"), [
    (0, False, False, None), (0, True, False, None), (1, False, False, 1), (1, True, True, 65535),
    (2, False, True, 300),
])
@pytest.mark.parametrize("payload", [b"", b"p" * 64, b"x" * 200])
def test_plain_publish_bytes_match_the_packet_encoding(level: int, qos: int, retain: bool, dup: bool,
                                                       packet_id: int | None, payload: bytes) -> None:
    packet = Publish("a/b/ü", payload, qos, retain, dup, packet_id)
    frame = encode_plain_publish(packet.topic, payload, qos, retain, dup, packet_id, level)
    assert frame == encode(packet, level) == _general_publish(packet, level)
    assert decode_one(client(level), frame) == packet


@MANY
@given(st.data(), st.sampled_from(LEVELS))
def test_plain_publish_roundtrips_any_generated_publish(data: st.DataObject, level: int) -> None:
    packet = data.draw(mst.publishes(level, to_server=False))
    if not packet.topic:
        return  # an empty topic needs a Topic Alias: a property, not this path
    packet.properties = NO_PROPERTIES
    frame = encode_plain_publish(packet.topic, packet.payload, packet.qos, packet.retain, packet.dup,
                                 packet.packet_id, level)
    assert frame == encode(packet, level)
    assert decode_one(client(level), frame) == packet


@pytest.mark.parametrize(("args", "error"), [
    (("a/+", b"", 1, False, False, 1, 4), "not a valid topic name"),
    (("a/#", b"", 1, False, False, 1, 5), "not a valid topic name"),
    (("a\x00", b"", 1, False, False, 1, 4), "not a valid topic name"),
    (("", b"", 1, False, False, 1, 4), "empty topic"),
    (("", b"", 1, False, False, 1, 5), "needs a Topic Alias"),
    (("a", b"", 1, False, False, None, 4), "packet identifier"),
    (("a", b"", 1, False, False, 0, 4), "packet identifier"),
    (("a", b"", 1, False, False, 65536, 4), "packet identifier"),
    (("a", b"", 0, False, True, None, 4), "DUP"),
    (("a", b"", 3, False, False, 1, 4), "QoS 3"),
    (("a", b"", 1, False, False, 1, 6), "unsupported protocol level"),
    (("\ud800", b"", 1, False, False, 1, 4), "UTF-8"),
])
def test_plain_publish_refuses_what_a_peer_would_reject(args: tuple[str, bytes, int, bool, bool, int | None, int],
                                                         error: str) -> None:
    with pytest.raises(LocalProtocolError, match=error):
        encode_plain_publish(*args)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("packet_id", [1, 2, 255, 256, 65535])
def test_puback_shortcut_bytes_and_decoding(level: int, packet_id: int) -> None:
    frame = encode(Puback(packet_id), level)
    assert frame == bytes((0x40, 2)) + packet_id.to_bytes(2, "big")
    for decoder in (server(level), client(level)):
        decoded = decode_one(decoder, frame)
        assert decoded == Puback(packet_id)
        assert type(decoded) is Puback and decoded.properties is NO_PROPERTIES


@pytest.mark.parametrize("level", LEVELS)
def test_a_puback_with_packet_id_zero_is_refused_on_the_shortcut_too(level: int) -> None:
    with pytest.raises(ProtocolViolation, match="packet identifier 0"):
        decode_one(server(level), b"\x40\x02\x00\x00")


def test_puback_with_a_reason_code_or_properties_still_takes_the_general_path() -> None:
    refused = Puback(7, 0x87)
    assert encode(refused, 5) == b"\x40\x03\x00\x07\x87"
    assert decode_one(server(5), encode(refused, 5)) == refused
    with_reason = Puback(7, 0x10, Properties(reason_string="no subscribers"))
    assert decode_one(server(5), encode(with_reason, 5)) == with_reason
    assert encode(Puback(7, 0x87), 4) == b"\x40\x02\x00\x07"  # 3.1.1 has no reason code
    with pytest.raises(LocalProtocolError, match="packet identifier"):
        encode(Puback(0), 4)
    with pytest.raises(LocalProtocolError, match="unsupported protocol level"):
        encode(Puback(1), 6)


def test_a_puback_before_connect_is_still_a_protocol_violation() -> None:
    from vmqpy.mqtt.codec import Decoder

    with pytest.raises(ProtocolViolation, match="not CONNECT"):
        decode_one(Decoder(server=True), b"\x40\x02\x00\x01")


@pytest.mark.parametrize("cls", [Puback, Pubrec, Pubrel, Pubcomp])
def test_acknowledgements_built_without_properties_share_the_empty_ones(
        cls: type[Puback | Pubrec | Pubrel | Pubcomp]) -> None:
    ack = cls(3)
    assert ack.properties is NO_PROPERTIES
    assert ack == cls(3, 0, Properties())
    assert is_empty(ack.properties)


@pytest.mark.parametrize("level", [4, 5])
def test_decoded_publish_without_properties_shares_the_empty_ones(level: int) -> None:
    packet = decode_one(server(level), encode(Publish("t", b"x", 1, packet_id=9), level))
    assert isinstance(packet, Publish) and packet.properties is NO_PROPERTIES
    assert NO_PROPERTIES == Properties()  # nothing wrote into the shared instance
