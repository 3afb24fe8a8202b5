"""Misuse of the API raises LocalProtocolError (never silently writes bytes a peer must reject)."""

from __future__ import annotations

from typing import Any

import pytest

import vmqpy
from vmqpy.mqtt.codec import Decoder, encode
from vmqpy.mqtt.errors import LocalProtocolError, MQTTError
from vmqpy.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Properties,
    Puback,
    Publish,
    Pubrel,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)

BAD: list[tuple[str, int, Any]] = [
    ("auth-in-311", 4, Auth()),
    ("auth-in-31", 3, Auth(0x18)),
    ("level-6", 6, Pingreq()),
    ("level-6-publish", 6, Publish("a")),
    ("publish-qos-3", 4, Publish("a", qos=3, packet_id=1)),
    ("publish-qos-1-no-id", 5, Publish("a", qos=1)),
    ("publish-qos-2-id-0", 4, Publish("a", qos=2, packet_id=0)),
    ("publish-id-too-big", 4, Publish("a", qos=1, packet_id=65536)),
    ("publish-qos0-dup", 4, Publish("a", dup=True)),
    ("publish-wildcard-plus", 4, Publish("a/+")),
    ("publish-wildcard-hash", 5, Publish("#")),
    ("publish-nul", 4, Publish("a\x00")),
    ("publish-surrogate", 4, Publish("\ud800")),
    ("publish-topic-too-long", 4, Publish("x" * 65536)),
    ("publish-empty-topic-311", 4, Publish("")),
    ("publish-empty-topic-5-no-alias", 5, Publish("")),
    ("publish-topic-alias-0", 5, Publish("a", properties=Properties(topic_alias=0))),
    ("publish-property-not-allowed", 5, Publish("a", properties=Properties(session_expiry_interval=1))),
    ("publish-property-out-of-range", 5, Publish("a", properties=Properties(message_expiry_interval=2**32))),
    ("publish-payload-format-2", 5, Publish("a", properties=Properties(payload_format_indicator=2))),
    ("publish-subscription-id-0", 5, Publish("a", properties=Properties(subscription_identifiers=[0]))),
    ("publish-subscription-id-too-big", 5,
     Publish("a", properties=Properties(subscription_identifiers=[268_435_456]))),
    ("publish-user-property-nul", 5, Publish("a", properties=Properties(user_properties=[("a", "\x00")]))),
    ("publish-correlation-data-too-long", 5, Publish("a", properties=Properties(correlation_data=b"x" * 65536))),
    ("connect-password-without-user-311", 4, Connect("c", password=b"p")),
    ("connect-will-qos-3", 4, Connect("c", will=Will("t", b"", qos=3))),
    ("connect-keep-alive-too-big", 4, Connect("c", keep_alive=65536)),
    ("connect-client-id-nul", 4, Connect("c\x00")),
    ("connect-will-delay-in-connect", 5, Connect("c", 5, properties=Properties(will_delay_interval=1))),
    ("connect-receive-maximum-0", 5, Connect("c", 5, properties=Properties(receive_maximum=0))),
    ("connect-topic-alias-in-will", 5, Connect("c", 5, will=Will("t", b"", properties=Properties(topic_alias=1)))),
    ("connack-311-code-6", 4, Connack(False, 6)),
    ("connack-5-code-256", 5, Connack(False, 256)),
    ("connack-maximum-qos-2", 5, Connack(False, 0, Properties(maximum_qos=2))),
    ("puback-id-0", 4, Puback(0)),
    ("pubrel-reason-256", 5, Pubrel(1, 256)),
    ("puback-topic-alias", 5, Puback(1, 0, Properties(topic_alias=1))),
    ("subscribe-empty", 4, Subscribe(1, [])),
    ("subscribe-qos-3", 4, Subscribe(1, [Subscription("a", SubOptions(qos=3))])),
    ("subscribe-retain-handling-3", 5, Subscribe(1, [Subscription("a", SubOptions(retain_handling=3))])),
    ("subscribe-two-subscription-ids", 5,
     Subscribe(1, [Subscription("a")], Properties(subscription_identifiers=[1, 2]))),
    ("subscribe-id-0", 5, Subscribe(0, [Subscription("a")])),
    ("suback-empty", 4, Suback(1, [])),
    ("suback-311-code-3", 4, Suback(1, [3])),
    ("suback-5-code-256", 5, Suback(1, [256])),
    ("unsubscribe-empty", 5, Unsubscribe(1, [])),
    ("unsuback-5-no-codes", 5, Unsuback(1)),
    ("unsuback-5-code-minus-1", 5, Unsuback(1, [-1])),
    ("disconnect-reason-256", 5, Disconnect(256)),
    ("disconnect-property-not-allowed", 5, Disconnect(0, Properties(topic_alias=1))),
    ("auth-property-not-allowed", 5, Auth(0x18, Properties(session_expiry_interval=1))),
]


@pytest.mark.parametrize(("level", "packet"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_encode_rejects(level: int, packet: Packet) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet, level)


def test_encode_rejects_what_is_not_a_packet() -> None:
    """The pure encoder says LocalProtocolError; the compiled one checks the argument's declared type first (mypyc),
    so it is a TypeError there. Either way nothing is written."""
    error = TypeError if vmqpy.BUILD.compiled else LocalProtocolError
    with pytest.raises(error):
        encode(object(), 4)  # type: ignore[arg-type]


def test_local_protocol_error_is_an_mqtt_error() -> None:
    assert issubclass(LocalProtocolError, MQTTError)


def test_payload_may_be_large() -> None:
    wire = encode(Publish("t", b"x" * 2_000_000), 4)
    # remaining length 2 + 1 + 2_000_000 = 2_000_003 = 3 + 9*128 + 122*128**2 -> VBI 83 89 7A
    assert wire[:6] == bytes.fromhex("30 83 89 7A 00 01")
    assert len(wire) == 4 + 2_000_003


@pytest.mark.parametrize(
    "kwargs",
    [
        {"server": False},  # a client-side decoder needs the level
        {"protocol_level": 6},
        {"server": False, "protocol_level": 2},
        {"max_packet_size": 1},
        {"max_packet_size": 268_435_461},
    ],
)
def test_decoder_constructor_rejects(kwargs: dict[str, Any]) -> None:
    with pytest.raises(LocalProtocolError):
        Decoder(**kwargs)


def test_decoder_constructor_defaults() -> None:
    decoder = Decoder()
    assert decoder.protocol_level is None
    assert Decoder(server=False, protocol_level=3).protocol_level == 3
