"""The MQTT 3.1 / 3.1.1 / 5.0 encoder: `encode(packet, protocol_level)` gives the packet's wire bytes.

It raises `LocalProtocolError` when asked for something the peer would have to reject.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import LocalProtocolError
from vmqpy.mqtt.packets import (
    NO_PROPERTIES,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from vmqpy.mqtt.properties import WILL, encode_properties, is_empty
from vmqpy.mqtt.wire import (
    BYTES,
    MAX_REMAINING_LENGTH,
    SHORT_LENGTHS,
    encode_bin,
    encode_byte,
    encode_str,
    encode_u16,
    encode_vbi,
)

__all__ = ["encode", "encode_plain_publish"]

_PUBLISH = int(PacketType.PUBLISH)
_SUBACK_311: Final = frozenset({0, 1, 2, 0x80})  # the 3.1.1 SUBACK return codes
_PUBACK_HEAD: Final = bytes((int(PacketType.PUBACK) << 4, 2))  # a PUBACK's fixed header without reason code


def _packet_id(value: int | None, what: str) -> bytes:
    if value is None or not 0 < value <= 0xFFFF:
        raise LocalProtocolError(f"{what} needs a packet identifier in 1..65535, got {value!r}")
    return value.to_bytes(2, "big")


def _frame(first: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    n = len(body)
    if n > MAX_REMAINING_LENGTH:
        raise LocalProtocolError(f"packet body of {n} bytes exceeds the MQTT maximum")
    return BYTES[first] + encode_vbi(n) + body


def _topic_name(topic: str) -> bytes:
    """The UTF-8 bytes of a PUBLISH's topic name, or LocalProtocolError if it cannot be one."""
    try:
        t = topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LocalProtocolError("PUBLISH topic cannot be encoded as UTF-8") from e
    if len(t) > 0xFFFF:
        raise LocalProtocolError("PUBLISH topic is longer than 65535 bytes")
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"PUBLISH topic {topic!r} is not a valid topic name")
    return t


def _encode_publish(p: Publish, level: int) -> bytes:
    props = p.properties
    if level != 5 or is_empty(props):
        return encode_plain_publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, level)
    topic = p.topic
    t = _topic_name(topic)
    tl = len(t)
    qos = p.qos
    first = 0x30 | (qos << 1)
    if p.retain:
        first |= 0x01
    if qos == 0:
        if p.dup:
            raise LocalProtocolError("PUBLISH QoS 0 cannot have the DUP flag")
        pid = b""
    elif qos == 1 or qos == 2:
        if p.dup:
            first |= 0x08
        pid = _packet_id(p.packet_id, "PUBLISH QoS>0")
    else:
        raise LocalProtocolError(f"PUBLISH QoS {qos!r}")
    pb = encode_properties(props, _PUBLISH)  # level 5 with properties: the others are plain
    if props.topic_alias == 0 or (not tl and props.topic_alias is None):
        raise LocalProtocolError("PUBLISH with an empty topic needs a non-zero Topic Alias")
    payload = p.payload
    rl = 2 + tl + len(pid) + len(pb) + len(payload)
    if rl < 128:
        head = bytes((first, rl))
    elif rl > MAX_REMAINING_LENGTH:
        raise LocalProtocolError("PUBLISH too large")
    else:
        head = BYTES[first] + encode_vbi(rl)
    return b"".join((head, SHORT_LENGTHS[tl] if tl < 256 else tl.to_bytes(2, "big"), t, pid, pb, payload))


def encode_plain_publish(topic: str, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int | None,
                         level: int) -> bytes:
    """The bytes of a PUBLISH without properties for a connection of `level` (3, 4 or 5): what `encode` gives for
    `Publish(topic, payload, qos, retain, dup, packet_id)`, without building the packet (the delivery path)."""
    try:  # _topic_name, inline (every delivery)
        t = topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LocalProtocolError("PUBLISH topic cannot be encoded as UTF-8") from e
    tl = len(t)
    if tl > 0xFFFF:
        raise LocalProtocolError("PUBLISH topic is longer than 65535 bytes")
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"PUBLISH topic {topic!r} is not a valid topic name")
    if level == 5:
        pb = b"\x00"
        if not tl:
            raise LocalProtocolError("PUBLISH with an empty topic needs a Topic Alias")
    elif level == 4 or level == 3:
        pb = b""
        if not tl:
            raise LocalProtocolError("PUBLISH with an empty topic")
    else:
        raise LocalProtocolError(f"unsupported protocol level {level!r}")
    first = 0x30 | (qos << 1)
    if retain:
        first |= 0x01
    if qos == 0:
        if dup:
            raise LocalProtocolError("PUBLISH QoS 0 cannot have the DUP flag")
        pid = b""
    elif qos == 1 or qos == 2:
        if dup:
            first |= 0x08
        if packet_id is None or not 0 < packet_id <= 0xFFFF:  # _packet_id, inline
            raise LocalProtocolError(f"PUBLISH QoS>0 needs a packet identifier in 1..65535, got {packet_id!r}")
        pid = packet_id.to_bytes(2, "big")
    else:
        raise LocalProtocolError(f"PUBLISH QoS {qos!r}")
    rl = 2 + tl + len(pid) + len(pb) + len(payload)
    if rl < 128:
        head = bytes((first, rl))
    elif rl > MAX_REMAINING_LENGTH:
        raise LocalProtocolError("PUBLISH too large")
    else:
        head = BYTES[first] + encode_vbi(rl)
    return b"".join((head, SHORT_LENGTHS[tl] if tl < 256 else tl.to_bytes(2, "big"), t, pid, pb, payload))


def _encode_connect(c: Connect, level: int) -> bytes:
    name = c.protocol_name
    if level == 3 and name == "MQTT":
        name = "MQIsdp"
    flags = 0x02 if c.clean_start else 0
    will = c.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"Will QoS {will.qos!r}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if c.username is not None:
        flags |= 0x80
    if c.password is not None:
        flags |= 0x40
        if c.username is None and level < 5:
            raise LocalProtocolError("3.1.1 CONNECT cannot carry a password without a user name")
    parts = [encode_str(name, "protocol name"), bytes((level, flags)), encode_u16(c.keep_alive, "keep alive")]
    if level == 5:
        parts.append(encode_properties(c.properties, PacketType.CONNECT))
    parts.append(encode_str(c.client_id, "client identifier"))
    if will is not None:
        if level == 5:
            parts.append(encode_properties(will.properties, WILL))
        parts.append(encode_str(will.topic, "will topic"))
        parts.append(encode_bin(will.payload, "will payload"))
    if c.username is not None:
        parts.append(encode_str(c.username, "user name"))
    if c.password is not None:
        parts.append(encode_bin(c.password, "password"))
    return _frame(0x10, *parts)


def _encode_connack(p: Connack, level: int) -> bytes:
    code = p.reason_code
    if level < 5:
        if code >= 0x80:
            code = rc.connack_code_for(level, code)
        elif code > 5:
            raise LocalProtocolError(f"3.1.1 CONNACK return code {code} (must be 0..5 or a 5.0 error code)")
    flags = 1 if p.session_present and level > 3 else 0
    body = [BYTES[flags], encode_byte(code, "CONNACK reason code")]
    if level == 5:
        body.append(encode_properties(p.properties, PacketType.CONNACK))
    return _frame(0x20, *body)


def _encode_ack(first: int, ptype: PacketType, p: Puback | Pubrec | Pubrel | Pubcomp, level: int) -> bytes:
    pid = _packet_id(p.packet_id, ptype.name)
    if level < 5:
        return bytes((first, 2)) + pid
    if is_empty(p.properties):
        if p.reason_code == 0:
            return bytes((first, 2)) + pid
        return bytes((first, 3)) + pid + encode_byte(p.reason_code, "reason code")
    return _frame(first, pid, encode_byte(p.reason_code, "reason code"), encode_properties(p.properties, ptype))


def _encode_puback(p: Puback, level: int) -> bytes:
    return _encode_ack(0x40, PacketType.PUBACK, p, level)


def _encode_pubrec(p: Pubrec, level: int) -> bytes:
    return _encode_ack(0x50, PacketType.PUBREC, p, level)


def _encode_pubrel(p: Pubrel, level: int) -> bytes:
    return _encode_ack(0x62, PacketType.PUBREL, p, level)


def _encode_pubcomp(p: Pubcomp, level: int) -> bytes:
    return _encode_ack(0x70, PacketType.PUBCOMP, p, level)


def _encode_subscribe(p: Subscribe, level: int) -> bytes:
    if not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs at least one subscription")
    parts = [_packet_id(p.packet_id, "SUBSCRIBE")]
    if level == 5:
        parts.append(encode_properties(p.properties, PacketType.SUBSCRIBE))
    for s in p.subscriptions:
        o = s.options
        if o.qos not in (0, 1, 2) or o.retain_handling not in (0, 1, 2):
            raise LocalProtocolError(f"invalid subscription options {o!r}")
        byte = o.qos
        if level == 5:
            byte |= (o.no_local << 2) | (o.retain_as_published << 3) | (o.retain_handling << 4)
        parts.append(encode_str(s.topic_filter, "topic filter"))
        parts.append(BYTES[byte])
    return _frame(0x82, *parts)


def _encode_suback(p: Suback, level: int) -> bytes:
    if not p.reason_codes:
        raise LocalProtocolError("SUBACK needs at least one reason code")
    codes = p.reason_codes
    if level < 5:
        # 3.1.1 knows 0, 1, 2 and 0x80 (failure): every 5.0 error code becomes 0x80.
        codes = [0x80 if c >= 0x80 else c for c in codes]
        if not _SUBACK_311.issuperset(codes):
            raise LocalProtocolError(f"3.1.1 SUBACK return codes {p.reason_codes!r}")
    parts = [_packet_id(p.packet_id, "SUBACK")]
    if level == 5:
        parts.append(encode_properties(p.properties, PacketType.SUBACK))
    try:
        parts.append(bytes(codes))
    except ValueError as e:
        raise LocalProtocolError(f"SUBACK reason codes {codes!r}") from e
    return _frame(0x90, *parts)


def _encode_unsubscribe(p: Unsubscribe, level: int) -> bytes:
    if not p.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE needs at least one topic filter")
    parts = [_packet_id(p.packet_id, "UNSUBSCRIBE")]
    if level == 5:
        parts.append(encode_properties(p.properties, PacketType.UNSUBSCRIBE))
    parts.extend(encode_str(f, "topic filter") for f in p.topic_filters)
    return _frame(0xA2, *parts)


def _encode_unsuback(p: Unsuback, level: int) -> bytes:
    pid = _packet_id(p.packet_id, "UNSUBACK")
    if level < 5:
        return b"\xb0\x02" + pid
    if not p.reason_codes:
        raise LocalProtocolError("a 5.0 UNSUBACK needs one reason code per topic filter")
    try:
        codes = bytes(p.reason_codes)
    except ValueError as e:
        raise LocalProtocolError(f"UNSUBACK reason codes {p.reason_codes!r}") from e
    return _frame(0xB0, pid, encode_properties(p.properties, PacketType.UNSUBACK), codes)


def _encode_pingreq(p: Pingreq, level: int) -> bytes:
    return b"\xc0\x00"


def _encode_pingresp(p: Pingresp, level: int) -> bytes:
    return b"\xd0\x00"


def _encode_reason_props(first: int, ptype: PacketType, code: int, props: Properties) -> bytes:
    if is_empty(props):
        if code == 0:
            return bytes((first, 0))
        return bytes((first, 1)) + encode_byte(code, f"{ptype.name} reason code")
    return _frame(first, encode_byte(code, f"{ptype.name} reason code"), encode_properties(props, ptype))


def _encode_disconnect(p: Disconnect, level: int) -> bytes:
    if level < 5:
        return b"\xe0\x00"
    return _encode_reason_props(0xE0, PacketType.DISCONNECT, p.reason_code, p.properties)


def _encode_auth(p: Auth, level: int) -> bytes:
    if level < 5:
        raise LocalProtocolError("AUTH exists only in MQTT 5.0")
    return _encode_reason_props(0xF0, PacketType.AUTH, p.reason_code, p.properties)


_ENCODERS: Final[dict[type, Callable[[Any, int], bytes]]] = {
    Connect: _encode_connect,
    Connack: _encode_connack,
    Publish: _encode_publish,
    Puback: _encode_puback,
    Pubrec: _encode_pubrec,
    Pubrel: _encode_pubrel,
    Pubcomp: _encode_pubcomp,
    Subscribe: _encode_subscribe,
    Suback: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    Unsuback: _encode_unsuback,
    Pingreq: _encode_pingreq,
    Pingresp: _encode_pingresp,
    Disconnect: _encode_disconnect,
    Auth: _encode_auth,
}


def encode(packet: Packet, protocol_level: int) -> bytes:
    """The wire bytes of `packet` for a connection of `protocol_level` (3, 4 or 5).

    For 3 and 4, properties and 5.0-only fields are dropped. For CONNECT, the level byte written is
    `protocol_level` (and the protocol name "MQIsdp" for level 3 unless another name is set).
    """
    if type(packet) is Publish and (protocol_level == 5 or protocol_level == 4):
        return _encode_publish(packet, protocol_level)
    if type(packet) is Puback and packet.properties is NO_PROPERTIES and not packet.reason_code:
        packet_id = packet.packet_id
        if packet_id is not None and 0 < packet_id <= 0xFFFF and protocol_level in (3, 4, 5):
            return _PUBACK_HEAD + packet_id.to_bytes(2, "big")  # the QoS 1 acknowledgement, at every level
    if protocol_level not in (3, 4, 5):
        raise LocalProtocolError(f"unsupported protocol level {protocol_level!r}")
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise LocalProtocolError(f"not an MQTT packet: {packet!r}")
    return encoder(packet, protocol_level)

