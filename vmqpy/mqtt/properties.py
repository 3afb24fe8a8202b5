"""The MQTT 5.0 property table (spec 2.2.2.2): identifier, `Properties` field, wire type, where allowed.

`WILL` (0, a packet type the spec reserves) stands for the Will Properties inside a CONNECT payload.
Value rules the spec states as Protocol Errors (e.g. Receive Maximum 0) are in `PropertyDef.min_value` /
`max_value`; they are checked by the decoder, and by the encoder as LocalProtocolError.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from vmqpy.mqtt.packets import PacketType, Properties

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
    WireType.VAR_BYTE_INT: 268_435_455,
}


def allowed_in(packet_type: int) -> frozenset[str]:
    """Names of the `Properties` fields a packet type (or WILL) may carry."""
    return frozenset(d.name for d in PROPERTIES if packet_type in d.allowed)


def is_empty(p: Properties) -> bool:
    """Fast `p == Properties()`: no property set. Written out field by field (this runs for every PUBLISH)."""
    return (
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
