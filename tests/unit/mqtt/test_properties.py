"""The property table against the spec (written out again here) and against paho-mqtt's independent one,
plus property encoding interop with paho-mqtt in both directions."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from tests.unit.mqtt import strategies as mst
from vmqpy.mqtt.packets import PacketType as PT
from vmqpy.mqtt.packets import Properties
from vmqpy.mqtt.properties import (
    BY_ID,
    BY_NAME,
    PROPERTIES,
    WILL,
    WireType,
    allowed_in,
    encode_properties,
    is_empty,
    read_properties,
)

# MQTT 5.0 section 2.2.2.2, table 2-4: identifier, name, type.
SPEC = {
    0x01: ("payload_format_indicator", WireType.BYTE),
    0x02: ("message_expiry_interval", WireType.FOUR_BYTE_INT),
    0x03: ("content_type", WireType.UTF8_STRING),
    0x08: ("response_topic", WireType.UTF8_STRING),
    0x09: ("correlation_data", WireType.BINARY),
    0x0B: ("subscription_identifiers", WireType.VAR_BYTE_INT),
    0x11: ("session_expiry_interval", WireType.FOUR_BYTE_INT),
    0x12: ("assigned_client_identifier", WireType.UTF8_STRING),
    0x13: ("server_keep_alive", WireType.TWO_BYTE_INT),
    0x15: ("authentication_method", WireType.UTF8_STRING),
    0x16: ("authentication_data", WireType.BINARY),
    0x17: ("request_problem_information", WireType.BYTE),
    0x18: ("will_delay_interval", WireType.FOUR_BYTE_INT),
    0x19: ("request_response_information", WireType.BYTE),
    0x1A: ("response_information", WireType.UTF8_STRING),
    0x1C: ("server_reference", WireType.UTF8_STRING),
    0x1F: ("reason_string", WireType.UTF8_STRING),
    0x21: ("receive_maximum", WireType.TWO_BYTE_INT),
    0x22: ("topic_alias_maximum", WireType.TWO_BYTE_INT),
    0x23: ("topic_alias", WireType.TWO_BYTE_INT),
    0x24: ("maximum_qos", WireType.BYTE),
    0x25: ("retain_available", WireType.BYTE),
    0x26: ("user_properties", WireType.UTF8_PAIR),
    0x27: ("maximum_packet_size", WireType.FOUR_BYTE_INT),
    0x28: ("wildcard_subscription_available", WireType.BYTE),
    0x29: ("subscription_identifier_available", WireType.BYTE),
    0x2A: ("shared_subscription_available", WireType.BYTE),
}


def test_table_matches_spec() -> None:
    assert {d.id: (d.name, d.wire_type) for d in PROPERTIES} == SPEC
    assert [d.id for d in PROPERTIES] == sorted(SPEC)
    assert all(BY_ID[i].name == name and BY_NAME[name].id == i for i, (name, _) in SPEC.items())


def test_table_covers_every_properties_field() -> None:
    assert {f.name for f in dataclasses.fields(Properties)} == {d.name for d in PROPERTIES}
    assert {d.name for d in PROPERTIES if d.multiple} == {"user_properties", "subscription_identifiers"}


_PAHO_WHERE = {PacketTypes.WILLMESSAGE: WILL} | {int(t): int(t) for t in PT}
_PAHO_TYPES = {"Byte": WireType.BYTE, "Two Byte Integer": WireType.TWO_BYTE_INT,
               "Four Byte Integer": WireType.FOUR_BYTE_INT, "Variable Byte Integer": WireType.VAR_BYTE_INT,
               "Binary Data": WireType.BINARY, "UTF-8 Encoded String": WireType.UTF8_STRING,
               "UTF-8 String Pair": WireType.UTF8_PAIR}


def test_table_agrees_with_paho() -> None:
    paho = PahoProperties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    for d in PROPERTIES:
        type_index, packets = paho.properties[d.id]
        assert _PAHO_TYPES[paho.types[type_index]] == d.wire_type, d.name
        assert {_PAHO_WHERE[p] for p in packets} == d.allowed, d.name


# A value of each field's type (the compiled build checks the declared types of Properties' attributes).
_SAMPLE: dict[WireType, Any] = {WireType.BYTE: 0, WireType.TWO_BYTE_INT: 0, WireType.FOUR_BYTE_INT: 0,
                                WireType.VAR_BYTE_INT: 0, WireType.BINARY: b"", WireType.UTF8_STRING: "",
                                WireType.UTF8_PAIR: ("k", "v")}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_is_empty_sees_every_field(name: str) -> None:
    props = Properties()
    assert is_empty(props)
    value: Any = {"user_properties": [("k", "v")], "subscription_identifiers": [1]}.get(
        name, _SAMPLE[BY_NAME[name].wire_type])
    setattr(props, name, value)
    assert not is_empty(props)


def test_allowed_in() -> None:
    assert allowed_in(PT.PINGREQ) == frozenset()
    assert allowed_in(WILL) == {"payload_format_indicator", "message_expiry_interval", "content_type",
                                "response_topic", "correlation_data", "will_delay_interval", "user_properties"}
    assert allowed_in(PT.SUBSCRIBE) == {"subscription_identifiers", "user_properties"}
    assert allowed_in(PT.UNSUBSCRIBE) == {"user_properties"}


# ---- interop with paho-mqtt's property codec

_KINDS = {
    "CONNECT": (PT.CONNECT, PacketTypes.CONNECT),
    "WILL": (WILL, PacketTypes.WILLMESSAGE),
    "CONNACK": (PT.CONNACK, PacketTypes.CONNACK),
    "PUBLISH_S2C": (PT.PUBLISH, PacketTypes.PUBLISH),
    "ACK": (PT.PUBACK, PacketTypes.PUBACK),
    "SUBSCRIBE": (PT.SUBSCRIBE, PacketTypes.SUBSCRIBE),
    "DISCONNECT": (PT.DISCONNECT, PacketTypes.DISCONNECT),
    "AUTH": (PT.AUTH, PacketTypes.AUTH),
}


def _to_paho(props: Properties, paho_type: int) -> PahoProperties:
    out = PahoProperties(paho_type)  # type: ignore[no-untyped-call]
    for d in PROPERTIES:
        value = getattr(props, d.name)
        if value is None or (d.multiple and not value):
            continue
        if d.name == "user_properties":
            out.UserProperty = list(value)
        elif d.name == "subscription_identifiers":
            out.SubscriptionIdentifier = list(value)
        else:
            name = out.getNameFromIdent(d.id)  # type: ignore[no-untyped-call]
            setattr(out, name.replace(" ", ""), value)
    return out


def _from_paho(paho: PahoProperties) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for d in PROPERTIES:
        attr = paho.getNameFromIdent(d.id).replace(" ", "")  # type: ignore[no-untyped-call]
        if hasattr(paho, attr):
            value = getattr(paho, attr)
            out[d.name] = list(value) if d.multiple else value
    return out


def _as_dict(props: Properties) -> dict[str, Any]:
    values = {f.name: getattr(props, f.name) for f in dataclasses.fields(props)}
    return {k: v for k, v in values.items() if v is not None and v != []}


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(sorted(_KINDS)), st.data())
def test_properties_interop_with_paho(kind: str, data: st.DataObject) -> None:
    where, paho_type = _KINDS[kind]
    props = data.draw(mst.properties(kind))
    # paho refuses Maximum Packet Size above 268_435_455; the spec only forbids 0 (a Four Byte Integer).
    assume(props.maximum_packet_size is None or props.maximum_packet_size <= 268_435_455)
    ours = encode_properties(props, where)
    # paho reads what we write
    paho = PahoProperties(paho_type)  # type: ignore[no-untyped-call]
    _, consumed = paho.unpack(ours)  # type: ignore[no-untyped-call]
    assert consumed == len(ours)
    assert _from_paho(paho) == _as_dict(props)
    # we read what paho writes
    theirs = _to_paho(props, paho_type).pack()  # type: ignore[no-untyped-call]
    decoded, end = read_properties(theirs, 0, len(theirs), where)
    assert end == len(theirs)
    assert decoded == props
