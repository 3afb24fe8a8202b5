"""Golden wire bytes, computed by hand from the MQTT 3.1.1 and 5.0 specs, checked in both directions.

Notation in the comments: fixed header (type<<4 | flags, remaining length), then the variable header and
payload field by field. Strings are a two-byte big-endian length + UTF-8; properties a variable byte integer
length + (identifier, value)*. Our encoder writes properties in identifier order, user properties in list order.
"""

from __future__ import annotations

import pytest

from tests.unit.mqtt.helpers import client, decode_one, server
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    SubOptions,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)


def h(text: str) -> bytes:
    """Hex with spaces and '|' separators allowed."""
    return bytes.fromhex(text.replace("|", " "))


C2S = "client->server"
S2C = "server->client"

# (id, protocol level, direction, packet, bytes)
GOLDEN: list[tuple[str, int, str, Packet, bytes]] = [
    # ---- CONNECT
    # 10 0F | 00 04 "MQTT" | level 04 | flags 02 (clean session) | keep alive 00 3C | client id 00 03 "abc"
    ("connect-311-minimal", 4, C2S, Connect("abc", 4, keep_alive=60),
     h("10 0F | 00 04 4D 51 54 54 | 04 | 02 | 00 3C | 00 03 61 62 63")),
    # flags EC = user name 80 | password 40 | will retain 20 | will QoS 1 (08) | will 04, clean session 0
    # rl = 6 + 1 + 1 + 2 + 4 ("c1") + 3 ("w") + 3 (b"x") + 3 ("u") + 4 (b"pw") = 27 = 0x1B
    ("connect-311-full", 4, C2S,
     Connect("c1", 4, clean_start=False, keep_alive=10, will=Will("w", b"x", qos=1, retain=True), username="u",
             password=b"pw"),
     h("10 1B | 00 04 4D 51 54 54 | 04 | EC | 00 0A | 00 02 63 31 | 00 01 77 | 00 01 78 | 00 01 75 | 00 02 70 77")),
    # MQTT 3.1: protocol name "MQIsdp", level 3; rl = 8 + 1 + 1 + 2 + 5 = 17
    ("connect-31", 3, C2S, Connect("abc", 3, protocol_name="MQIsdp", keep_alive=60),
     h("10 11 | 00 06 4D 51 49 73 64 70 | 03 | 02 | 00 3C | 00 03 61 62 63")),
    # 5.0: properties 08 = 11 (session expiry) 00000E10 (3600) | 21 (receive maximum) 0014 (20)
    # rl = 6 + 1 + 1 + 2 + 1 + 8 + 5 = 24
    ("connect-5-props", 5, C2S,
     Connect("abc", 5, keep_alive=60, properties=Properties(session_expiry_interval=3600, receive_maximum=20)),
     h("10 18 | 00 04 4D 51 54 54 | 05 | 02 | 00 3C | 08 11 00 00 0E 10 21 00 14 | 00 03 61 62 63")),
    # 5.0 with will: flags C6 = user 80 | password 40 | will 04 | clean start 02; no CONNECT properties (00);
    # will properties 05 = 18 (will delay interval) 00000005; will topic "t", will payload "bye", user, password
    # rl = 6 + 4 + 1 + 3 + 6 + 3 + 5 + 3 + 3 = 34
    ("connect-5-will", 5, C2S,
     Connect("c", 5, keep_alive=0, will=Will("t", b"bye", properties=Properties(will_delay_interval=5)),
             username="u", password=b"p"),
     h("10 22 | 00 04 4D 51 54 54 | 05 | C6 | 00 00 | 00 | 00 01 63 | 05 18 00 00 00 05 | 00 01 74"
       "| 00 03 62 79 65 | 00 01 75 | 00 01 70")),
    # 5.0 allows a password without a user name: flags 42
    ("connect-5-password-only", 5, C2S, Connect("", 5, keep_alive=5, password=b""),
     h("10 0F | 00 04 4D 51 54 54 | 05 | 42 | 00 05 | 00 | 00 00 | 00 00")),
    # ---- CONNACK
    ("connack-311-session-present", 4, S2C, Connack(True, 0), h("20 02 | 01 | 00")),
    ("connack-311-not-authorized", 4, S2C, Connack(False, 5), h("20 02 | 00 | 05")),
    ("connack-5-minimal", 5, S2C, Connack(True, 0), h("20 03 | 01 | 00 | 00")),
    # properties 07 = 12 (assigned client id) 0002 "id" | 24 (maximum QoS) 01
    ("connack-5-props", 5, S2C, Connack(False, 0, Properties(maximum_qos=1, assigned_client_identifier="id")),
     h("20 0A | 00 | 00 | 07 12 00 02 69 64 24 01")),
    ("connack-5-bad-auth-method", 5, S2C, Connack(False, 0x8C), h("20 03 | 00 | 8C | 00")),
    # ---- PUBLISH
    # 30 = PUBLISH QoS 0; topic 0003 "a/b"; payload "hi"
    ("publish-311-qos0", 4, C2S, Publish("a/b", b"hi"), h("30 07 | 00 03 61 2F 62 | 68 69")),
    # 3B = PUBLISH | DUP 08 | QoS 1 (02) | RETAIN 01; topic "a"; packet id 000A; empty payload
    ("publish-311-qos1-dup-retain", 4, S2C, Publish("a", b"", qos=1, retain=True, dup=True, packet_id=10),
     h("3B 05 | 00 01 61 | 00 0A")),
    # 34 = QoS 2; packet id 1234
    ("publish-31-qos2", 3, C2S, Publish("t", b"x", qos=2, packet_id=0x1234), h("34 06 | 00 01 74 | 12 34 | 78")),
    # remaining length 2 + 1 + 200 = 203 = CB 01 as a variable byte integer
    ("publish-311-two-byte-length", 4, C2S, Publish("t", b"\xaa" * 200),
     h("30 CB 01 | 00 01 74") + b"\xaa" * 200),
    # 5.0: property length 00 between topic and payload
    ("publish-5-qos0", 5, C2S, Publish("a/b", b"hi"), h("30 08 | 00 03 61 2F 62 | 00 | 68 69")),
    # properties 12 (18 bytes) = 01 01 (payload format UTF-8) | 02 0000003C (expiry 60) | 03 0001 "t" (content
    # type) | 26 0001 "k" 0001 "v" (user property)
    ("publish-5-props", 5, C2S,
     Publish("a", b"z", qos=1, packet_id=1,
             properties=Properties(payload_format_indicator=1, message_expiry_interval=60, content_type="t",
                                   user_properties=[("k", "v")])),
     h("32 19 | 00 01 61 | 00 01 | 12 01 01 02 00 00 00 3C 03 00 01 74 26 00 01 6B 00 01 76 | 7A")),
    # empty topic + topic alias 23 0005
    ("publish-5-topic-alias", 5, C2S, Publish("", b"p", properties=Properties(topic_alias=5)),
     h("30 07 | 00 00 | 03 23 00 05 | 70")),
    # subscription identifiers 1 and 200 (VBI C8 01), only server->client
    ("publish-5-subscription-ids", 5, S2C, Publish("a", b"", properties=Properties(subscription_identifiers=[1, 200])),
     h("30 09 | 00 01 61 | 05 0B 01 0B C8 01")),
    # ---- PUBACK / PUBREC / PUBREL (flags 0010) / PUBCOMP
    ("puback-311", 4, C2S, Puback(5), h("40 02 | 00 05")),
    ("puback-5-short", 5, S2C, Puback(5), h("40 02 | 00 05")),
    ("puback-5-reason", 5, C2S, Puback(5, 0x10), h("40 03 | 00 05 | 10")),
    # reason 80 + properties 05 = 1F (reason string) 0002 "no"
    ("puback-5-props", 5, S2C, Puback(5, 0x80, Properties(reason_string="no")),
     h("40 09 | 00 05 | 80 | 05 1F 00 02 6E 6F")),
    ("pubrec-311", 4, S2C, Pubrec(7), h("50 02 | 00 07")),
    ("pubrec-5-reason", 5, C2S, Pubrec(7, 0x10), h("50 03 | 00 07 | 10")),
    ("pubrel-311", 4, C2S, Pubrel(7), h("62 02 | 00 07")),
    ("pubrel-5-reason", 5, S2C, Pubrel(7, 0x92), h("62 03 | 00 07 | 92")),
    ("pubcomp-31", 3, S2C, Pubcomp(0xFFFF), h("70 02 | FF FF")),
    # user property 26 0001 "a" 0001 "b" (7 bytes)
    ("pubcomp-5-props", 5, C2S, Pubcomp(7, 0, Properties(user_properties=[("a", "b")])),
     h("70 0B | 00 07 | 00 | 07 26 00 01 61 00 01 62")),
    # ---- SUBSCRIBE (flags 0010)
    # packet id 000A; "a/+" QoS 1; "#" QoS 2
    ("subscribe-311", 4, C2S,
     Subscribe(10, [Subscription("a/+", SubOptions(1)), Subscription("#", SubOptions(2))]),
     h("82 0C | 00 0A | 00 03 61 2F 2B | 01 | 00 01 23 | 02")),
    # properties 02 = 0B 07 (subscription identifier 7); options 1E = QoS 2 | no local 04 | RAP 08 | RH 1 (10)
    ("subscribe-5", 5, C2S,
     Subscribe(10, [Subscription("a/b", SubOptions(2, True, True, 1))], Properties(subscription_identifiers=[7])),
     h("82 0B | 00 0A | 02 0B 07 | 00 03 61 2F 62 | 1E")),
    # shared subscription, retain handling 2 (20)
    ("subscribe-5-shared", 5, C2S, Subscribe(1, [Subscription("$share/g/t", SubOptions(0, False, False, 2))]),
     h("82 10 | 00 01 | 00 | 00 0A 24 73 68 61 72 65 2F 67 2F 74 | 20")),
    # ---- SUBACK
    ("suback-311", 4, S2C, Suback(10, [1, 0x80]), h("90 04 | 00 0A | 01 80")),
    ("suback-5", 5, S2C, Suback(10, [0, 0x87]), h("90 05 | 00 0A | 00 | 00 87")),
    # ---- UNSUBSCRIBE (flags 0010)
    ("unsubscribe-311", 4, C2S, Unsubscribe(3, ["a", "b/c"]), h("A2 0A | 00 03 | 00 01 61 | 00 03 62 2F 63")),
    ("unsubscribe-5", 5, C2S, Unsubscribe(3, ["a"], Properties(user_properties=[("x", "y")])),
     h("A2 0D | 00 03 | 07 26 00 01 78 00 01 79 | 00 01 61")),
    # ---- UNSUBACK
    ("unsuback-311", 4, S2C, Unsuback(3), h("B0 02 | 00 03")),
    ("unsuback-5", 5, S2C, Unsuback(3, [0, 0x11]), h("B0 05 | 00 03 | 00 | 00 11")),
    # ---- PINGREQ / PINGRESP
    ("pingreq-311", 4, C2S, Pingreq(), h("C0 00")),
    ("pingreq-5", 5, C2S, Pingreq(), h("C0 00")),
    ("pingresp-311", 4, S2C, Pingresp(), h("D0 00")),
    ("pingresp-5", 5, S2C, Pingresp(), h("D0 00")),
    # ---- DISCONNECT
    ("disconnect-311", 4, C2S, Disconnect(), h("E0 00")),
    ("disconnect-5-short", 5, C2S, Disconnect(), h("E0 00")),
    ("disconnect-5-with-will", 5, C2S, Disconnect(0x04), h("E0 01 | 04")),
    # reason 8E (session taken over) + properties 04 = 1F 0001 "x"
    ("disconnect-5-props", 5, S2C, Disconnect(0x8E, Properties(reason_string="x")),
     h("E0 06 | 8E | 04 1F 00 01 78")),
    # session expiry 0 is a real value (not "absent"): 11 00000000
    ("disconnect-5-session-expiry-0", 5, C2S, Disconnect(0, Properties(session_expiry_interval=0)),
     h("E0 07 | 00 | 05 11 00 00 00 00")),
    # ---- AUTH (5.0 only)
    ("auth-5-short", 5, C2S, Auth(), h("F0 00")),
    # reason 18 (continue) + properties 0D = 15 0005 "SCRAM" | 16 0002 0102
    ("auth-5-props", 5, S2C,
     Auth(0x18, Properties(authentication_method="SCRAM", authentication_data=b"\x01\x02")),
     h("F0 0F | 18 | 0D 15 00 05 53 43 52 41 4D 16 00 02 01 02")),
]


@pytest.mark.parametrize(("level", "direction", "packet", "wire"), [g[1:] for g in GOLDEN],
                         ids=[g[0] for g in GOLDEN])
def test_encode_golden(level: int, direction: str, packet: Packet, wire: bytes) -> None:
    assert encode(packet, level) == wire


@pytest.mark.parametrize(("level", "direction", "packet", "wire"), [g[1:] for g in GOLDEN],
                         ids=[g[0] for g in GOLDEN])
def test_decode_golden(level: int, direction: str, packet: Packet, wire: bytes) -> None:
    if isinstance(packet, Connect):
        decoder = server()
        assert decoder.protocol_level is None
        assert decode_one(decoder, wire) == packet
        assert decoder.protocol_level == level
        return
    decoder = server(level) if direction == C2S else client(level)
    assert decode_one(decoder, wire) == packet


def test_golden_covers_every_type_and_version() -> None:
    seen = {(type(g[3]).__name__, g[1] == 5) for g in GOLDEN}
    names = {type(g[3]).__name__ for g in GOLDEN}
    assert len(names) == 15
    for name in names - {"Auth"}:
        assert (name, False) in seen and (name, True) in seen, name


# What encoding for an older protocol drops or translates (one way: the result decodes to something else).
LOSSY: list[tuple[str, int, Packet, bytes]] = [
    ("puback-reason-dropped-311", 4, Puback(5, 0x80, Properties(reason_string="no")), h("40 02 00 05")),
    ("publish-props-dropped-311", 4, Publish("a", b"", properties=Properties(message_expiry_interval=1)),
     h("30 03 00 01 61")),
    ("publish-packet-id-ignored-qos0", 4, Publish("a", b"", qos=0, packet_id=9), h("30 03 00 01 61")),
    ("subscribe-5-options-dropped-311", 4,
     Subscribe(10, [Subscription("a/b", SubOptions(2, True, True, 1))], Properties(subscription_identifiers=[7])),
     h("82 08 00 0A 00 03 61 2F 62 02")),
    ("suback-5-failure-codes-to-80", 4, Suback(10, [0, 0x87, 0xA2]), h("90 05 00 0A 00 80 80")),
    ("unsuback-codes-dropped-311", 4, Unsuback(3, [0, 0x11]), h("B0 02 00 03")),
    ("disconnect-reason-dropped-311", 4, Disconnect(0x8E, Properties(reason_string="x")), h("E0 00")),
    ("connack-5-code-mapped-311", 4, Connack(False, 0x87), h("20 02 00 05")),
    ("connack-5-unsupported-version-311", 4, Connack(False, 0x84), h("20 02 00 01")),
    ("connack-5-server-busy-311", 4, Connack(False, 0x89), h("20 02 00 03")),
    ("connack-31-no-session-present", 3, Connack(True, 0), h("20 02 00 00")),
    ("connect-31-default-name", 3, Connect("abc", keep_alive=60),
     h("10 11 00 06 4D 51 49 73 64 70 03 02 00 3C 00 03 61 62 63")),
    ("connect-level-argument-wins", 5, Connect("abc", protocol_level=4, keep_alive=60),
     h("10 10 00 04 4D 51 54 54 05 02 00 3C 00 00 03 61 62 63")),
]


@pytest.mark.parametrize(("level", "packet", "wire"), [g[1:] for g in LOSSY], ids=[g[0] for g in LOSSY])
def test_encode_for_older_versions(level: int, packet: Packet, wire: bytes) -> None:
    assert encode(packet, level) == wire
