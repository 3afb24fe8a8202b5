"""MQTT control packets as plain data, shared by 3.1.1 (protocol level 4, and 3 for 3.1) and 5.0 (level 5).

Fields that only 5.0 carries (properties, most reason codes) keep their defaults on 3.1.1 connections;
the codec ignores them when encoding for 3.1.1. Payloads are bytes, topics and client ids str. A packet's
`type` is a class variable (`ClassVar`): compiled, an attribute of a dataclass without one is a field, and
`dataclasses.replace` would hand it to `__init__`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar


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

    def __init__(
            self, payload_format_indicator: int | None = None, message_expiry_interval: int | None = None,
            content_type: str | None = None, response_topic: str | None = None, correlation_data: bytes | None = None,
            subscription_identifiers: list[int] | None = None, session_expiry_interval: int | None = None,
            assigned_client_identifier: str | None = None, server_keep_alive: int | None = None,
            authentication_method: str | None = None, authentication_data: bytes | None = None,
            request_problem_information: int | None = None, will_delay_interval: int | None = None,
            request_response_information: int | None = None, response_information: str | None = None,
            server_reference: str | None = None, reason_string: str | None = None, receive_maximum: int | None = None,
            topic_alias_maximum: int | None = None, topic_alias: int | None = None, maximum_qos: int | None = None,
            retain_available: int | None = None, user_properties: list[tuple[str, str]] | None = None,
            maximum_packet_size: int | None = None, wildcard_subscription_available: int | None = None,
            subscription_identifier_available: int | None = None, shared_subscription_available: int | None = None
    ) -> None:
        # written out (as every hot record's): compiled, a dataclass's generated __init__ stays interpreted
        self.payload_format_indicator = payload_format_indicator
        self.message_expiry_interval = message_expiry_interval
        self.content_type = content_type
        self.response_topic = response_topic
        self.correlation_data = correlation_data
        self.subscription_identifiers = [] if subscription_identifiers is None else subscription_identifiers
        self.session_expiry_interval = session_expiry_interval
        self.assigned_client_identifier = assigned_client_identifier
        self.server_keep_alive = server_keep_alive
        self.authentication_method = authentication_method
        self.authentication_data = authentication_data
        self.request_problem_information = request_problem_information
        self.will_delay_interval = will_delay_interval
        self.request_response_information = request_response_information
        self.response_information = response_information
        self.server_reference = server_reference
        self.reason_string = reason_string
        self.receive_maximum = receive_maximum
        self.topic_alias_maximum = topic_alias_maximum
        self.topic_alias = topic_alias
        self.maximum_qos = maximum_qos
        self.retain_available = retain_available
        self.user_properties = [] if user_properties is None else user_properties
        self.maximum_packet_size = maximum_packet_size
        self.wildcard_subscription_available = wildcard_subscription_available
        self.subscription_identifier_available = subscription_identifier_available
        self.shared_subscription_available = shared_subscription_available

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

    def __init__(
            self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, properties: Properties | None = None
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = Properties() if properties is None else properties


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

    def __init__(
            self, client_id: str, protocol_level: int = 4, protocol_name: str = "MQTT", clean_start: bool = True,
            keep_alive: int = 60, will: Will | None = None, username: str | None = None, password: bytes | None = None,
            properties: Properties | None = None
    ) -> None:
        self.client_id = client_id
        self.protocol_level = protocol_level
        self.protocol_name = protocol_name
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.will = will
        self.username = username
        self.password = password
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.CONNECT


@dataclass(slots=True)
class Connack:
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)

    def __init__(
            self, session_present: bool = False, reason_code: int = 0, properties: Properties | None = None
    ) -> None:
        self.session_present = session_present
        self.reason_code = reason_code
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.CONNACK


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=Properties)

    def __init__(
            self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False, dup: bool = False,
            packet_id: int | None = None, properties: Properties | None = None
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.PUBLISH


@dataclass(slots=True)
class Puback:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)

    def __init__(self, packet_id: int, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = _no_properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)

    def __init__(self, packet_id: int, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = _no_properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)

    def __init__(self, packet_id: int, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = _no_properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=_no_properties)

    def __init__(self, packet_id: int, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = _no_properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.PUBCOMP


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

    def __init__(self, topic_filter: str, options: SubOptions | None = None) -> None:
        self.topic_filter = topic_filter
        self.options = SubOptions() if options is None else options


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = field(default_factory=Properties)

    def __init__(self, packet_id: int, subscriptions: list[Subscription], properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.subscriptions = subscriptions
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.SUBSCRIBE


@dataclass(slots=True)
class Suback:
    packet_id: int
    reason_codes: list[int]
    properties: Properties = field(default_factory=Properties)

    def __init__(self, packet_id: int, reason_codes: list[int], properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.reason_codes = reason_codes
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=Properties)

    def __init__(self, packet_id: int, topic_filters: list[str], properties: Properties | None = None) -> None:
        self.packet_id = packet_id
        self.topic_filters = topic_filters
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class Unsuback:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=Properties)

    def __init__(
            self, packet_id: int, reason_codes: list[int] | None = None, properties: Properties | None = None
    ) -> None:
        self.packet_id = packet_id
        self.reason_codes = [] if reason_codes is None else reason_codes
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.UNSUBACK


@dataclass(slots=True)
class Pingreq:
    type: ClassVar[PacketType] = PacketType.PINGREQ

    def __init__(self) -> None:
        pass


@dataclass(slots=True)
class Pingresp:
    type: ClassVar[PacketType] = PacketType.PINGRESP

    def __init__(self) -> None:
        pass


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)

    def __init__(self, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.DISCONNECT


@dataclass(slots=True)
class Auth:
    reason_code: int = 0
    properties: Properties = field(default_factory=Properties)

    def __init__(self, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = Properties() if properties is None else properties
    type: ClassVar[PacketType] = PacketType.AUTH


Packet = (
    Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback | Unsubscribe
    | Unsuback | Pingreq | Pingresp | Disconnect | Auth
)
