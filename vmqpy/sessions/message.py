"""An application message as the broker routes, queues and stores it."""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any

import msgpack

from vmqpy.mqtt.packets import NO_PROPERTIES as _NO_PROPERTIES
from vmqpy.mqtt.packets import Properties, Publish
from vmqpy.mqtt.properties import is_empty

# _NO_PROPERTIES: shared by outgoing PUBLISHes that carry no property; the encoder only reads it, nothing may change it.

# The properties a broker passes from publisher to subscriber unchanged (MQTT 5.0, 3.3.2.3).
_PASS_THROUGH = ("payload_format_indicator", "content_type", "response_topic", "correlation_data")
_NOTHING_PASSED = [None] * len(_PASS_THROUGH)


@dataclass(slots=True)
class Message:
    """A message to deliver. `expires_at` is wall-clock seconds (it must survive a restart), None = never."""

    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    publisher: str = ""
    expires_at: float | None = None
    payload_format_indicator: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    frames: dict[tuple[int, bool], bytes] | None = field(default=None, compare=False, repr=False)
    # set by the node that forwards it to other nodes, the same on every copy: a node that gets it twice for
    # one subscriber (directly, and passed on by the subscriber's old node) delivers it once (Session.deliver)
    forward_id: int | None = field(default=None, compare=False)
    # monotonic nanoseconds when this node got it (read from its publisher, or as a forward), set by the driver
    # that read it; 0: not measured (restored, handed over, retained, a will). Never packed: it is this node's.
    arrived_ns: int = field(default=0, compare=False, repr=False)

    def __init__(
            self, topic: str, payload: bytes, qos: int, retain: bool = False, publisher: str = "",
            expires_at: float | None = None, payload_format_indicator: int | None = None,
            content_type: str | None = None, response_topic: str | None = None, correlation_data: bytes | None = None,
            user_properties: list[tuple[str, str]] | None = None, frames: dict[tuple[int, bool], bytes] | None = None,
            forward_id: int | None = None, arrived_ns: int = 0
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.publisher = publisher
        self.expires_at = expires_at
        self.payload_format_indicator = payload_format_indicator
        self.content_type = content_type
        self.response_topic = response_topic
        self.correlation_data = correlation_data
        self.user_properties = [] if user_properties is None else user_properties
        self.frames = frames
        self.forward_id = forward_id
        self.arrived_ns = arrived_ns

    @classmethod
    def simple(cls, topic: str, payload: bytes, qos: int, retain: bool, publisher: str,
               forward_id: int | None = None, arrived_ns: int = 0) -> Message:
        """`Message(topic, payload, qos, retain, publisher)` with nothing else to pass on, built for the hot paths
        (every publish read from a client, every forward read from another node): the slots set directly, about
        a third cheaper than the dataclass's keyword-capable `__init__` (tests/unit/sessions/test_message_simple.py
        checks that it sets every field as `__init__` does). Compiled (vmqpy/native.py), `__init__` is native code
        and the cheaper of the two; object.__new__ is refused there."""
        if _COMPILED:
            return cls(topic, payload, qos, retain, publisher, forward_id=forward_id, arrived_ns=arrived_ns)
        message = _new(cls)
        message.topic = topic
        message.payload = payload
        message.qos = qos
        message.retain = retain
        message.publisher = publisher
        message.expires_at = None
        message.payload_format_indicator = None
        message.content_type = None
        message.response_topic = None
        message.correlation_data = None
        message.user_properties = []
        message.frames = None
        message.forward_id = forward_id
        message.arrived_ns = arrived_ns
        return message

    @classmethod
    def from_publish(cls, packet: Publish, publisher: str, now: float) -> Message:
        props = packet.properties
        if is_empty(props):  # the common case: no properties to carry
            return cls.simple(packet.topic, packet.payload, packet.qos, packet.retain, publisher)
        expiry = props.message_expiry_interval
        return cls(
            topic=packet.topic,
            payload=packet.payload,
            qos=packet.qos,
            retain=packet.retain,
            publisher=publisher,
            expires_at=None if expiry is None else now + expiry,
            payload_format_indicator=props.payload_format_indicator,
            content_type=props.content_type,
            response_topic=props.response_topic,
            correlation_data=props.correlation_data,
            user_properties=list(props.user_properties),
        )

    @property
    def plain(self) -> bool:
        """No property to pass on to subscribers."""
        return (
            self.expires_at is None and not self.user_properties and self.payload_format_indicator is None
            and self.content_type is None and self.response_topic is None and self.correlation_data is None
        )

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def to_publish(
        self, qos: int, retain: bool, packet_id: int | None, now: float, subscription_ids: list[int] | None = None
    ) -> Publish:
        """The PUBLISH that carries this message to one subscriber (5.0 properties; 3.1.1 encoding drops them)."""
        if not subscription_ids and self.plain:
            return Publish(self.topic, self.payload, qos, retain, False, packet_id, _NO_PROPERTIES)
        props = Properties(
            payload_format_indicator=self.payload_format_indicator,
            content_type=self.content_type,
            response_topic=self.response_topic,
            correlation_data=self.correlation_data,
            user_properties=self.user_properties,
            subscription_identifiers=subscription_ids or [],
        )
        if self.expires_at is not None:
            props.message_expiry_interval = max(0, math.ceil(self.expires_at - now))
        return Publish(self.topic, self.payload, qos, retain, False, packet_id, props)

    def pack(self) -> list[object]:
        """The message as a msgpack-ready list (forwards, the session store); the forward id last, when set."""
        if self.plain:  # the common case, the same record
            record = [self.topic, self.payload, self.qos, self.retain, self.publisher, None, _NOTHING_PASSED, ()]
        else:
            record = [
                self.topic, self.payload, self.qos, self.retain, self.publisher, self.expires_at,
                [getattr(self, name) for name in _PASS_THROUGH], self.user_properties,
            ]
        if self.forward_id is not None:
            record.append(self.forward_id)
        return record

    @classmethod
    def unpack(cls, data: Any) -> Message:
        forward_id = None
        if len(data) == 9:
            topic, payload, qos, retain, publisher, expires_at, passed, user, forward_id = data
        else:
            topic, payload, qos, retain, publisher, expires_at, passed, user = data
        msg = cls(str(topic), bytes(payload), int(qos), bool(retain), str(publisher),
                  None if expires_at is None else float(expires_at))
        if forward_id is not None:
            msg.forward_id = int(forward_id)
        if passed != _NOTHING_PASSED:
            for name, value in zip(_PASS_THROUGH, passed, strict=True):
                setattr(msg, name, value)
        if user:
            msg.user_properties = [(str(k), str(v)) for k, v in user]
        return msg


_new = object.__new__  # Message.simple: the instance without __init__


def _probe() -> None:
    """Compiled by mypyc, a module's functions are not Python functions: how this module knows it is compiled."""


_COMPILED = not isinstance(_probe, types.FunctionType)


def plain_record(data: Any) -> bool:
    """Whether `data` is the record `Message.pack` makes of a plain message (no property, no expiry, no forward
    id) with the exact types msgpack gives back. `Message.unpack` of such a record cannot fail and gives a
    message that never expires, so a holder may keep the record and unpack it when it is first needed (the
    retained tree does at a restart: vmqpy.broker.core.retained). Any other record is for `Message.unpack` now
    (which refuses it, or takes what it can, as it always did)."""
    return (
        type(data) is list and len(data) == 8 and type(data[0]) is str and type(data[1]) is bytes
        and type(data[2]) is int and type(data[3]) is bool and type(data[4]) is str and data[5] is None
        and data[6] == _NOTHING_PASSED and type(data[7]) in (list, tuple) and not data[7]
    )


def encode_record(data: object) -> bytes:
    packed: bytes = msgpack.packb(data, use_bin_type=True)
    return packed


def decode_record(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
