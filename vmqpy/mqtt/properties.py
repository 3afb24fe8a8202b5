"""MQTT 5.0 properties: their table (spec 2.2.2.2: identifier, `Properties` field, wire type, where allowed),
and their wire form (`read_properties`, `encode_properties`).

`WILL` (0, a packet type the spec reserves) stands for the Will Properties inside a CONNECT payload.
Value rules the spec states as Protocol Errors (e.g. Receive Maximum 0) are in `PropertyDef.min_value` /
`max_value`; `read_properties` raises ProtocolViolation for them, `encode_properties` LocalProtocolError.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from vmqpy.mqtt.errors import LocalProtocolError, MalformedPacket, ProtocolViolation
from vmqpy.mqtt.packets import NO_PROPERTIES, PacketType, Properties
from vmqpy.mqtt.wire import (
    BYTES,
    MAX_REMAINING_LENGTH,
    NeedData,
    encode_bin,
    encode_str,
    encode_vbi,
    read_bin,
    read_str,
    read_u16,
    read_vbi,
)

WILL: Final = 0
"""Pseudo packet type for the Will Properties of a CONNECT."""


class WireType(IntEnum):
    BYTE = 1
    TWO_BYTE_INT = 2
    FOUR_BYTE_INT = 3
    VAR_BYTE_INT = 4
    UTF8_STRING = 5
    BINARY = 6
    UTF8_PAIR = 7


@dataclass(frozen=True, slots=True)
class PropertyDef:
    id: int
    name: str  # the field of `Properties`
    wire_type: WireType
    allowed: frozenset[int]  # PacketType values, and WILL
    multiple: bool = False  # may appear more than once (the field is then a list)
    min_value: int | None = None  # integers below it are a Protocol Error
    max_value: int | None = None  # integers above it are a Protocol Error


_P = PacketType
_ACKS = (_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP)
_B, _I2, _I4, _VBI, _STR, _BIN, _PAIR = WireType


def _where(*types: int) -> frozenset[int]:
    return frozenset(int(t) for t in types)


PROPERTIES: Final[tuple[PropertyDef, ...]] = (
    PropertyDef(0x01, "payload_format_indicator", _B, _where(_P.PUBLISH, WILL), max_value=1),
    PropertyDef(0x02, "message_expiry_interval", _I4, _where(_P.PUBLISH, WILL)),
    PropertyDef(0x03, "content_type", _STR, _where(_P.PUBLISH, WILL)),
    PropertyDef(0x08, "response_topic", _STR, _where(_P.PUBLISH, WILL)),
    PropertyDef(0x09, "correlation_data", _BIN, _where(_P.PUBLISH, WILL)),
    # Several in a PUBLISH (server -> client); at most one in a SUBSCRIBE (checked by the decoder).
    PropertyDef(0x0B, "subscription_identifiers", _VBI, _where(_P.PUBLISH, _P.SUBSCRIBE), multiple=True,
                min_value=1),
    PropertyDef(0x11, "session_expiry_interval", _I4, _where(_P.CONNECT, _P.CONNACK, _P.DISCONNECT)),
    PropertyDef(0x12, "assigned_client_identifier", _STR, _where(_P.CONNACK)),
    PropertyDef(0x13, "server_keep_alive", _I2, _where(_P.CONNACK)),
    PropertyDef(0x15, "authentication_method", _STR, _where(_P.CONNECT, _P.CONNACK, _P.AUTH)),
    PropertyDef(0x16, "authentication_data", _BIN, _where(_P.CONNECT, _P.CONNACK, _P.AUTH)),
    PropertyDef(0x17, "request_problem_information", _B, _where(_P.CONNECT), max_value=1),
    PropertyDef(0x18, "will_delay_interval", _I4, _where(WILL)),
    PropertyDef(0x19, "request_response_information", _B, _where(_P.CONNECT), max_value=1),
    PropertyDef(0x1A, "response_information", _STR, _where(_P.CONNACK)),
    PropertyDef(0x1C, "server_reference", _STR, _where(_P.CONNACK, _P.DISCONNECT)),
    PropertyDef(0x1F, "reason_string", _STR,
                _where(_P.CONNACK, *_ACKS, _P.SUBACK, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH)),
    PropertyDef(0x21, "receive_maximum", _I2, _where(_P.CONNECT, _P.CONNACK), min_value=1),
    PropertyDef(0x22, "topic_alias_maximum", _I2, _where(_P.CONNECT, _P.CONNACK)),
    # A Topic Alias of 0 is answered with 0x94 (Topic Alias invalid); the decoder checks it in PUBLISH.
    PropertyDef(0x23, "topic_alias", _I2, _where(_P.PUBLISH)),
    PropertyDef(0x24, "maximum_qos", _B, _where(_P.CONNACK), max_value=1),
    PropertyDef(0x25, "retain_available", _B, _where(_P.CONNACK), max_value=1),
    PropertyDef(0x26, "user_properties", _PAIR,
                _where(_P.CONNECT, _P.CONNACK, _P.PUBLISH, WILL, *_ACKS, _P.SUBSCRIBE, _P.SUBACK,
                       _P.UNSUBSCRIBE, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH), multiple=True),
    PropertyDef(0x27, "maximum_packet_size", _I4, _where(_P.CONNECT, _P.CONNACK), min_value=1),
    PropertyDef(0x28, "wildcard_subscription_available", _B, _where(_P.CONNACK), max_value=1),
    PropertyDef(0x29, "subscription_identifier_available", _B, _where(_P.CONNACK), max_value=1),
    PropertyDef(0x2A, "shared_subscription_available", _B, _where(_P.CONNACK), max_value=1),
)

BY_ID: Final[dict[int, PropertyDef]] = {d.id: d for d in PROPERTIES}
BY_NAME: Final[dict[str, PropertyDef]] = {d.name: d for d in PROPERTIES}

WIRE_MAX: Final[dict[WireType, int]] = {
    WireType.BYTE: 0xFF,
    WireType.TWO_BYTE_INT: 0xFFFF,
    WireType.FOUR_BYTE_INT: 0xFFFF_FFFF,
    WireType.VAR_BYTE_INT: MAX_REMAINING_LENGTH,
}


def allowed_in(packet_type: int) -> frozenset[str]:
    """Names of the `Properties` fields a packet type (or WILL) may carry."""
    return frozenset(d.name for d in PROPERTIES if packet_type in d.allowed)


def is_empty(p: Properties) -> bool:
    """Fast `p == Properties()`: no property set. Written out field by field (this runs for every PUBLISH)."""
    return p is NO_PROPERTIES or (
        p.topic_alias is None
        and not p.user_properties
        and p.message_expiry_interval is None
        and p.payload_format_indicator is None
        and not p.subscription_identifiers
        and p.content_type is None
        and p.response_topic is None
        and p.correlation_data is None
        and p.reason_string is None
        and p.session_expiry_interval is None
        and p.assigned_client_identifier is None
        and p.server_keep_alive is None
        and p.authentication_method is None
        and p.authentication_data is None
        and p.request_problem_information is None
        and p.will_delay_interval is None
        and p.request_response_information is None
        and p.response_information is None
        and p.server_reference is None
        and p.receive_maximum is None
        and p.topic_alias_maximum is None
        and p.maximum_qos is None
        and p.retain_available is None
        and p.maximum_packet_size is None
        and p.wildcard_subscription_available is None
        and p.subscription_identifier_available is None
        and p.shared_subscription_available is None
    )


_TRUNCATED_VBI: Final = "truncated variable byte integer"


def _where_name(where: int) -> str:
    return "Will Properties" if where == WILL else PacketType(where).name


def read_properties(b: bytes, i: int, n: int, where: int) -> tuple[Properties, int]:
    """The Property Length and properties at b[i:n] for packet type `where` (or WILL) -> (Properties, end)."""
    length = read_vbi(b, i, n)
    if isinstance(length, NeedData):
        raise MalformedPacket(_TRUNCATED_VBI)
    plen, i = length
    props = Properties()
    if plen == 0:
        return props, i
    end = i + plen
    if end > n:
        raise MalformedPacket("property length runs past the end of the packet")
    seen = 0
    while i < end:
        ident = read_vbi(b, i, end)
        if isinstance(ident, NeedData):
            raise MalformedPacket(_TRUNCATED_VBI)
        pid, i = ident
        d = BY_ID.get(pid)
        if d is None:
            raise MalformedPacket(f"unknown property identifier 0x{pid:02X}")
        if where not in d.allowed:
            raise MalformedPacket(f"property {d.name} is not allowed in {_where_name(where)}")
        wt = d.wire_type
        value: int | str | bytes | tuple[str, str]
        if wt is WireType.BYTE:
            if i >= end:
                raise MalformedPacket(f"truncated property {d.name}")
            value = b[i]
            i += 1
        elif wt is WireType.TWO_BYTE_INT:
            value = read_u16(b, i, end, d.name)
            i += 2
        elif wt is WireType.FOUR_BYTE_INT:
            if i + 4 > end:
                raise MalformedPacket(f"truncated property {d.name}")
            value = int.from_bytes(b[i : i + 4], "big")
            i += 4
        elif wt is WireType.VAR_BYTE_INT:
            vbi = read_vbi(b, i, end)
            if isinstance(vbi, NeedData):
                raise MalformedPacket(_TRUNCATED_VBI)
            value, i = vbi
        elif wt is WireType.UTF8_STRING:
            value, i = read_str(b, i, end, d.name)
        elif wt is WireType.BINARY:
            value, i = read_bin(b, i, end, d.name)
        else:  # UTF8_PAIR
            k, i = read_str(b, i, end, "user property name")
            v, i = read_str(b, i, end, "user property value")
            value = (k, v)
        if isinstance(value, int):
            if d.min_value is not None and value < d.min_value:
                raise ProtocolViolation(f"property {d.name} has the invalid value {value}")
            if d.max_value is not None and value > d.max_value:
                raise ProtocolViolation(f"property {d.name} has the invalid value {value}")
        if d.multiple:
            getattr(props, d.name).append(value)
        else:
            bit = 1 << pid
            if seen & bit:
                raise ProtocolViolation(f"property {d.name} appears more than once")
            seen |= bit
            setattr(props, d.name, value)
    return props, end


def encode_properties(p: Properties, where: int) -> bytes:
    """Property Length + properties, or b"\\x00" for none. LocalProtocolError if one is not allowed here."""
    if is_empty(p):
        return b"\x00"
    out = bytearray()
    for d in PROPERTIES:
        value = getattr(p, d.name)
        if value is None or (d.multiple and not value):
            continue
        if where not in d.allowed:
            raise LocalProtocolError(f"property {d.name} is not allowed in {_where_name(where)}")
        head = BYTES[d.id]
        wt = d.wire_type
        if wt is WireType.UTF8_PAIR:
            for pair in value:
                k, v = pair
                out += head + encode_str(k, "user property name") + encode_str(v, "user property value")
            continue
        if wt is WireType.UTF8_STRING:
            out += head + encode_str(value, d.name)
            continue
        if wt is WireType.BINARY:
            out += head + encode_bin(value, d.name)
            continue
        values = value if d.multiple else (value,)
        if d.multiple and where == PacketType.SUBSCRIBE and len(values) > 1:
            raise LocalProtocolError("SUBSCRIBE carries at most one Subscription Identifier")
        for v in values:
            if not isinstance(v, int) or not 0 <= v <= WIRE_MAX[wt]:
                raise LocalProtocolError(f"property {d.name} value {v!r} out of range")
            if (d.min_value is not None and v < d.min_value) or (d.max_value is not None and v > d.max_value):
                raise LocalProtocolError(f"property {d.name} value {v} is not allowed")
            if wt is WireType.BYTE:
                out += head + BYTES[v]
            elif wt is WireType.TWO_BYTE_INT:
                out += head + v.to_bytes(2, "big")
            elif wt is WireType.FOUR_BYTE_INT:
                out += head + v.to_bytes(4, "big")
            else:
                out += head + encode_vbi(v)
    if len(out) > MAX_REMAINING_LENGTH:
        raise LocalProtocolError("properties too long")
    return encode_vbi(len(out)) + bytes(out)
