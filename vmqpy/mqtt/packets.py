"""MQTT control packets as plain data, shared by 3.1.1 (protocol level 4, and 3 for 3.1) and 5.0 (level 5).

Fields that only 5.0 carries (properties, most reason codes) keep their defaults on 3.1.1 connections;
the codec ignores them when encoding for 3.1.1. Payloads are bytes, topics and client ids str.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


@dataclass(slots=True)
class Properties:
    """MQTT 5.0 properties. None (or an empty list) means absent."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: list[int] = field(default_factory=list)
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def is_empty(self) -> bool:
        return self == Properties()


# The properties of every decoded packet that carries none (all of 3.1.1's, most of 5.0's) and of the
# acknowledgements built without any: one shared instance, so the QoS 1 path allocates none per message. Read
# it, never change it: replace a packet's `properties` with a new `Properties(...)` to give it some.
NO_PROPERTIES = Properties()


def _no_properties() -> Properties:
    return NO_PROPERTIES


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=Properties)


@dataclass(slots=True)
class Connect:
    client_id: str
    protocol_level: int = 4
    protocol_name: str = "MQTT"
    clean_start: bool = True
    keep_alive: int = 60
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = field(default_factory=Properties)
    type = PacketType.CONNECT


@dataclass(slots=True)
class Connack:
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)
    type = PacketType.CONNACK


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=Properties)
    type = PacketType.PUBLISH


@dataclass(slots=True)
class Puback:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)
    type = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)
    type = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)
    type = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)
    type = PacketType.PUBCOMP


@dataclass(slots=True, frozen=True)
class SubOptions:
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscription:
    topic_filter: str
    options: SubOptions = field(default_factory=SubOptions)


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = field(default_factory=Properties)
    type = PacketType.SUBSCRIBE


@dataclass(slots=True)
class Suback:
    packet_id: int
    reason_codes: list[int]
    properties: Properties = field(default_factory=Properties)
    type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=Properties)
    type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class Unsuback:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)
    type = PacketType.UNSUBACK


@dataclass(slots=True)
class Pingreq:
    type = PacketType.PINGREQ


@dataclass(slots=True)
class Pingresp:
    type = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)
    type = PacketType.DISCONNECT


@dataclass(slots=True)
class Auth:
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)
    type = PacketType.AUTH


Packet = (
    Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback | Unsubscribe
    | Unsuback | Pingreq | Pingresp | Disconnect | Auth
)
