"""Every validation rule of the decoder: the exception class and the 5.0 reason code to answer with.

Each case is one hand-built byte string next to the rule it breaks. Decoders: "server" is a broker-side decoder
that has not seen a CONNECT; "server3/4/5" one that has (protocol level given); "client4/5" a client-side one.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.mqtt import strategies as mst
from tests.unit.mqtt.helpers import client, decode_all, decode_one, server
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.errors import (
    MalformedPacket,
    PacketTooLarge,
    ProtocolViolation,
    RemoteProtocolError,
    UnsupportedProtocolVersion,
)
from vmqpy.mqtt.packets import Connect, Properties, Publish


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


def decoder_for(kind: str) -> Decoder:
    if kind == "server":
        return server()
    if kind.startswith("server"):
        return server(int(kind[-1]))
    return client(int(kind[-1]))


CONNECT_311 = h("10 0C 00 04 4D 51 54 54 04 02 00 3C 00 00")  # client id ""
CONNECT_5 = h("10 0D 00 04 4D 51 54 54 05 02 00 3C 00 00 00")

M, P, T = MalformedPacket, ProtocolViolation, RemoteProtocolError
MAL, PROTO = rc.MALFORMED_PACKET, rc.PROTOCOL_ERROR

# (id, decoder kind, bytes, exception class, reason code)
CASES: list[tuple[str, str, bytes, type[RemoteProtocolError], int]] = [
    # ---- fixed header
    ("remaining-length-5-bytes", "server5", h("30 FF FF FF FF 01"), M, MAL),
    ("remaining-length-5-bytes-detected-early", "server5", h("30 FF FF FF 80"), M, MAL),
    ("reserved-type-0", "server4", h("00 00"), M, MAL),
    ("auth-type-in-311", "server4", h("F0 00"), M, MAL),
    ("auth-type-in-311-client", "client4", h("F0 00"), M, MAL),
    ("pubrel-flags-0", "server4", h("60 02 00 01"), M, MAL),
    ("subscribe-flags-0", "server5", h("80 06 00 01 00 00 01 61"), M, MAL),
    ("unsubscribe-flags-3", "server4", h("A3 05 00 01 00 01 61"), M, MAL),
    ("puback-flags-2", "server4", h("42 02 00 01"), M, MAL),
    ("pingreq-flags-1", "server4", h("C1 00"), M, MAL),
    ("disconnect-flags-2", "server5", h("E2 00"), M, MAL),
    ("connect-flags-1", "server", h("11 0C 00 04 4D 51 54 54 04 02 00 3C 00 00"), M, MAL),
    ("suback-flags-2", "client4", h("92 03 00 01 00"), M, MAL),
    ("publish-qos-3", "server4", h("36 05 00 01 61 00 01"), M, MAL),
    ("publish-qos-3-5", "server5", h("37 06 00 01 61 00 01 00"), M, MAL),
    ("publish-qos0-dup-311", "server4", h("38 03 00 01 61"), M, MAL),
    ("publish-qos0-dup-5", "server5", h("38 04 00 01 61 00"), M, MAL),
    # ---- connection state and direction
    ("first-packet-not-connect", "server", h("C0 00"), P, PROTO),
    ("first-packet-publish", "server", h("30 03 00 01 61"), P, PROTO),
    ("second-connect", "server4", CONNECT_311, P, PROTO),
    ("second-connect-same-stream", "server", CONNECT_311 + CONNECT_311, P, PROTO),
    ("client-sends-connack", "server4", h("20 02 00 00"), P, PROTO),
    ("client-sends-suback", "server5", h("90 04 00 01 00 00"), P, PROTO),
    ("client-sends-unsuback", "server4", h("B0 02 00 01"), P, PROTO),
    ("client-sends-pingresp", "server4", h("D0 00"), P, PROTO),
    ("server-sends-connect", "client4", CONNECT_311, P, PROTO),
    ("server-sends-subscribe", "client5", h("82 07 00 01 00 00 01 61 00"), P, PROTO),
    ("server-sends-unsubscribe", "client4", h("A2 05 00 01 00 01 61"), P, PROTO),
    ("server-sends-pingreq", "client5", h("C0 00"), P, PROTO),
    ("server-sends-disconnect-311", "client4", h("E0 00"), P, PROTO),
    # ---- CONNECT
    ("connect-bad-protocol-name", "server", h("10 0C 00 04 4D 51 54 58 04 02 00 3C 00 00"), P, PROTO),
    ("connect-reserved-flag", "server", h("10 0C 00 04 4D 51 54 54 04 03 00 3C 00 00"), M, MAL),
    ("connect-reserved-flag-5", "server", h("10 0D 00 04 4D 51 54 54 05 01 00 3C 00 00 00"), M, MAL),
    # will QoS 1 (08) without will flag
    ("connect-will-qos-without-will", "server", h("10 0C 00 04 4D 51 54 54 04 0A 00 3C 00 00"), M, MAL),
    # will retain (20) without will flag
    ("connect-will-retain-without-will", "server", h("10 0D 00 04 4D 51 54 54 05 22 00 3C 00 00 00"), M, MAL),
    # will flag + will QoS 3 (18)
    ("connect-will-qos-3", "server",
     h("10 11 00 04 4D 51 54 54 04 1E 00 3C 00 00 00 01 74 00 00"), M, MAL),
    # password flag 40 without user name flag 80: malformed before 5.0
    ("connect-password-without-user-311", "server", h("10 0E 00 04 4D 51 54 54 04 42 00 3C 00 00 00 00"), M, MAL),
    ("connect-password-without-user-31", "server",
     h("10 10 00 06 4D 51 49 73 64 70 03 42 00 3C 00 00 00 00"), M, MAL),
    ("connect-trailing-byte", "server", h("10 0D 00 04 4D 51 54 54 04 02 00 3C 00 00 FF"), M, MAL),
    ("connect-truncated-client-id", "server", h("10 0D 00 04 4D 51 54 54 04 02 00 3C 00 05 61"), M, MAL),
    ("connect-client-id-bad-utf8", "server", h("10 0E 00 04 4D 51 54 54 04 02 00 3C 00 02 C3 28"), M, MAL),
    ("connect-client-id-nul", "server", h("10 0E 00 04 4D 51 54 54 04 02 00 3C 00 02 61 00"), M, MAL),
    ("connect-user-name-surrogate", "server",
     h("10 11 00 04 4D 51 54 54 04 82 00 3C 00 00 00 03 ED A0 80"), M, MAL),
    ("connect-protocol-name-bad-utf8", "server", h("10 0C 00 04 4D 51 FF 54 04 02 00 3C 00 00"), M, MAL),
    ("connect-auth-data-without-method", "server",
     h("10 11 00 04 4D 51 54 54 05 02 00 3C 04 16 00 01 78 00 00"), P, PROTO),
    ("connect-will-delay-in-connect-props", "server",
     h("10 12 00 04 4D 51 54 54 05 02 00 3C 05 18 00 00 00 01 00 00"), M, MAL),
    ("connect-topic-alias-in-will-props", "server",
     h("10 16 00 04 4D 51 54 54 05 06 00 3C 00 00 00 03 23 00 01 00 01 74 00 00"), M, MAL),
    ("connect-receive-maximum-0", "server", h("10 10 00 04 4D 51 54 54 05 02 00 3C 03 21 00 00 00 00"), P, PROTO),
    ("connect-maximum-packet-size-0", "server",
     h("10 12 00 04 4D 51 54 54 05 02 00 3C 05 27 00 00 00 00 00 00"), P, PROTO),
    ("connect-request-problem-info-2", "server",
     h("10 0F 00 04 4D 51 54 54 05 02 00 3C 02 17 02 00 00"), P, PROTO),
    ("connect-request-response-info-2", "server",
     h("10 0F 00 04 4D 51 54 54 05 02 00 3C 02 19 02 00 00"), P, PROTO),
    # ---- PUBLISH
    ("publish-packet-id-0", "server4", h("32 05 00 01 61 00 00"), P, PROTO),
    ("publish-packet-id-0-qos2-5", "server5", h("34 06 00 01 61 00 00 00"), P, PROTO),
    ("publish-topic-bad-utf8", "server4", h("30 04 00 02 C3 28"), M, MAL),
    ("publish-topic-overlong-utf8", "server4", h("30 04 00 02 C0 AF"), M, MAL),
    ("publish-topic-nul", "server5", h("30 06 00 03 61 00 62 00"), M, MAL),
    ("publish-topic-surrogate", "server4", h("30 05 00 03 ED A0 80"), M, MAL),
    ("publish-topic-plus", "server4", h("30 05 00 03 61 2F 2B"), T, rc.TOPIC_NAME_INVALID),
    ("publish-topic-hash", "server5", h("30 04 00 01 23 00"), T, rc.TOPIC_NAME_INVALID),
    ("publish-topic-hash-client-side", "client4", h("30 05 00 03 61 2F 23"), T, rc.TOPIC_NAME_INVALID),
    ("publish-empty-topic-311", "server4", h("30 04 00 00 68 69"), P, PROTO),
    ("publish-empty-topic-5-no-alias", "server5", h("30 05 00 00 00 68 69"), P, PROTO),
    ("publish-topic-alias-0", "server5", h("30 06 00 00 03 23 00 00"), T, rc.TOPIC_ALIAS_INVALID),
    ("publish-topic-longer-than-packet", "server4", h("30 04 00 05 61 62"), M, MAL),
    ("publish-truncated-packet-id", "server4", h("32 04 00 01 61 00"), M, MAL),
    ("publish-5-missing-property-length", "server5", h("30 03 00 01 61"), M, MAL),
    ("publish-5-property-length-past-end", "server5", h("30 05 00 01 61 05 01"), M, MAL),
    ("publish-5-property-length-5-bytes", "server5", h("30 09 00 01 61 80 80 80 80 01 00"), M, MAL),
    ("publish-5-unknown-property", "server5", h("30 06 00 01 61 02 04 00"), M, MAL),
    ("publish-5-unknown-property-7f", "server5", h("30 06 00 01 61 02 7F 00"), M, MAL),
    ("publish-5-not-allowed-property", "server5", h("30 09 00 01 61 05 11 00 00 00 01"), M, MAL),
    ("publish-5-duplicate-payload-format", "server5", h("30 08 00 01 61 04 01 01 01 01"), P, PROTO),
    ("publish-5-property-length-too-long", "server5", h("30 08 00 01 61 05 01 01 01 01"), M, MAL),
    ("publish-5-duplicate-expiry", "server5",
     h("30 0E 00 01 61 0A 02 00 00 00 01 02 00 00 00 02"), P, PROTO),
    ("publish-5-duplicate-content-type", "server5", h("30 0C 00 01 61 08 03 00 01 61 03 00 01 62"), P, PROTO),
    ("publish-5-payload-format-2", "server5", h("30 06 00 01 61 02 01 02"), P, PROTO),
    ("publish-5-subscription-id-from-client", "server5", h("30 06 00 01 61 02 0B 01"), P, PROTO),
    ("publish-5-subscription-id-0", "client5", h("30 06 00 01 61 02 0B 00"), P, PROTO),
    ("publish-5-subscription-id-5-bytes", "client5", h("30 0A 00 01 61 06 0B 80 80 80 80 01"), M, MAL),
    ("publish-5-truncated-four-byte-property", "server5", h("30 08 00 01 61 04 02 00 00 00"), M, MAL),
    ("publish-5-truncated-string-property", "server5", h("30 08 00 01 61 04 03 00 05 61"), M, MAL),
    ("publish-5-user-property-bad-utf8", "server5", h("30 0C 00 01 61 08 26 00 01 FF 00 01 61 00"), M, MAL),
    ("publish-5-user-property-missing-value", "server5", h("30 08 00 01 61 04 26 00 01 61"), M, MAL),
    ("publish-5-content-type-nul", "server5", h("30 08 00 01 61 04 03 00 01 00"), M, MAL),
    # ---- acknowledgements
    ("puback-packet-id-0", "server4", h("40 02 00 00"), P, PROTO),
    ("pubrel-packet-id-0-5", "server5", h("62 02 00 00"), P, PROTO),
    ("pubrec-packet-id-0-client", "client5", h("50 02 00 00"), P, PROTO),
    ("pubcomp-truncated", "server4", h("70 01 00"), M, MAL),
    ("puback-trailing-311", "server4", h("40 03 00 01 00"), M, MAL),
    ("pubrec-trailing-31", "server3", h("50 03 00 01 00"), M, MAL),
    ("puback-5-trailing-after-properties", "server5", h("40 05 00 01 00 00 FF"), M, MAL),
    ("puback-5-property-not-allowed", "server5", h("40 06 00 01 00 02 01 01"), M, MAL),
    ("puback-5-duplicate-reason-string", "server5", h("40 0C 00 01 10 08 1F 00 01 61 1F 00 01 62"), P, PROTO),
    # ---- SUBSCRIBE
    ("subscribe-packet-id-0", "server4", h("82 06 00 00 00 01 61 00"), P, PROTO),
    ("subscribe-no-filters-311", "server4", h("82 02 00 01"), P, PROTO),
    ("subscribe-no-filters-5", "server5", h("82 03 00 01 00"), P, PROTO),
    ("subscribe-missing-options-byte", "server4", h("82 05 00 01 00 01 61"), M, MAL),
    ("subscribe-311-qos-3", "server4", h("82 06 00 01 00 01 61 03"), M, MAL),
    ("subscribe-311-upper-bits", "server4", h("82 06 00 01 00 01 61 04"), M, MAL),
    ("subscribe-311-upper-bits-80", "server3", h("82 06 00 01 00 01 61 81"), M, MAL),
    ("subscribe-5-reserved-bit-6", "server5", h("82 07 00 01 00 00 01 61 40"), M, MAL),
    ("subscribe-5-reserved-bit-7", "server5", h("82 07 00 01 00 00 01 61 81"), M, MAL),
    ("subscribe-5-qos-3", "server5", h("82 07 00 01 00 00 01 61 03"), P, PROTO),
    ("subscribe-5-retain-handling-3", "server5", h("82 07 00 01 00 00 01 61 30"), P, PROTO),
    ("subscribe-5-no-local-shared", "server5",
     h("82 10 00 01 00 00 0A 24 73 68 61 72 65 2F 67 2F 74 04"), P, PROTO),
    ("subscribe-5-subscription-id-0", "server5", h("82 09 00 01 02 0B 00 00 01 61 00"), P, PROTO),
    ("subscribe-5-two-subscription-ids", "server5", h("82 0B 00 01 04 0B 01 0B 02 00 01 61 00"), P, PROTO),
    ("subscribe-5-property-not-allowed", "server5", h("82 0A 00 01 03 23 00 01 00 01 61 00"), M, MAL),
    ("subscribe-filter-bad-utf8", "server4", h("82 07 00 01 00 02 C3 28 00"), M, MAL),
    ("subscribe-filter-nul", "server5", h("82 08 00 01 00 00 02 61 00 00"), M, MAL),
    # ---- UNSUBSCRIBE
    ("unsubscribe-packet-id-0", "server4", h("A2 05 00 00 00 01 61"), P, PROTO),
    ("unsubscribe-no-filters-311", "server4", h("A2 02 00 01"), P, PROTO),
    ("unsubscribe-no-filters-5", "server5", h("A2 03 00 01 00"), P, PROTO),
    ("unsubscribe-truncated-filter", "server4", h("A2 05 00 01 00 05 61"), M, MAL),
    ("unsubscribe-5-subscription-id-not-allowed", "server5", h("A2 08 00 01 02 0B 01 00 01 61"), M, MAL),
    # ---- server -> client packets
    ("connack-reserved-flags", "client4", h("20 02 02 00"), M, MAL),
    ("connack-311-trailing", "client4", h("20 03 00 00 00"), M, MAL),
    ("connack-5-missing-properties", "client5", h("20 02 00 00"), M, MAL),
    ("connack-5-maximum-qos-2", "client5", h("20 05 00 00 02 24 02"), P, PROTO),
    ("connack-5-retain-available-2", "client5", h("20 05 00 00 02 25 02"), P, PROTO),
    ("connack-5-will-delay-not-allowed", "client5", h("20 08 00 00 05 18 00 00 00 01"), M, MAL),
    ("connack-311-reserved-return-code", "client4", h("20 02 00 06"), M, MAL),
    ("connack-311-5.0-reason-code", "client4", h("20 02 00 87"), M, MAL),
    ("connack-31-session-present", "client3", h("20 02 01 00"), M, MAL),
    ("suback-311-reserved-code", "client4", h("90 03 00 01 03"), M, MAL),
    ("suback-311-5.0-reason-code", "client4", h("90 04 00 01 00 87"), M, MAL),
    ("suback-no-codes", "client4", h("90 02 00 01"), P, PROTO),
    ("suback-packet-id-0", "client5", h("90 04 00 00 00 00"), P, PROTO),
    ("unsuback-311-trailing", "client4", h("B0 03 00 01 00"), M, MAL),
    ("unsuback-5-no-codes", "client5", h("B0 03 00 01 00"), P, PROTO),
    ("pingresp-with-body", "client4", h("D0 01 00"), M, MAL),
    # ---- PINGREQ / DISCONNECT / AUTH
    ("pingreq-with-body", "server4", h("C0 01 00"), M, MAL),
    ("disconnect-311-with-body", "server4", h("E0 01 00"), M, MAL),
    ("disconnect-5-trailing", "server5", h("E0 03 00 00 00"), M, MAL),
    ("disconnect-5-property-not-allowed", "server5", h("E0 04 00 02 01 01"), M, MAL),
    ("auth-5-property-not-allowed", "server5", h("F0 04 18 02 01 01"), M, MAL),
    ("auth-5-property-length-past-end", "server5", h("F0 03 18 05 1F"), M, MAL),
]


# Cases whose bytes are deliberately not exactly one packet of the announced length.
NOT_ONE_PACKET = {"remaining-length-5-bytes", "remaining-length-5-bytes-detected-early", "second-connect-same-stream",
                  "pubcomp-truncated"}


def _announced_size(wire: bytes) -> int | None:
    """1 + length of the remaining-length field + its value, or None if that field is not a valid VBI."""
    value = 0
    for k in range(4):
        if 1 + k >= len(wire):
            return None
        value |= (wire[1 + k] & 0x7F) << (7 * k)
        if wire[1 + k] < 0x80:
            return 2 + k + value
    return None


@pytest.mark.parametrize(("case_id", "wire"), [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_case_bytes_are_one_whole_packet(case_id: str, wire: bytes) -> None:
    """Guards the table itself: a wrong hand-computed remaining length would test some other rule."""
    if case_id in NOT_ONE_PACKET:
        return
    assert _announced_size(wire) == len(wire)


@pytest.mark.parametrize(("kind", "wire", "error", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input(kind: str, wire: bytes, error: type[RemoteProtocolError], code: int) -> None:
    decoder = decoder_for(kind)
    with pytest.raises(error) as info:
        decode_all(decoder, wire)
    assert type(info.value) is error
    assert info.value.reason_code == code
    # The decoder is dead afterwards: it raises the same error again, whatever it is fed.
    decoder.receive_data(h("C0 00"))
    with pytest.raises(error):
        decoder.next_packet()


def test_case_ids_unique() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("wire", "level"),
    [
        (h("10 0C 00 04 4D 51 54 54 03 02 00 3C 00 00"), 3),  # MQTT name with level 3
        (h("10 0C 00 04 4D 51 54 54 06 02 00 3C 00 00"), 6),
        (h("10 0C 00 04 4D 51 54 54 00 02 00 3C 00 00"), 0),
        (h("10 0C 00 04 4D 51 54 54 84 02 00 3C 00 00"), 0x84),  # bridge bit + 4
        (h("10 0E 00 06 4D 51 49 73 64 70 04 02 00 3C 00 00"), 4),  # MQIsdp with level 4
        (h("10 07 00 04 4D 51 54 54 07"), 7),  # rest of the CONNECT missing: the level is enough to know
    ],
    ids=["mqtt-3", "mqtt-6", "mqtt-0", "mqtt-0x84", "mqisdp-4", "mqtt-7-truncated"],
)
def test_unsupported_protocol_version(wire: bytes, level: int) -> None:
    decoder = server()
    with pytest.raises(UnsupportedProtocolVersion) as info:
        decode_all(decoder, wire)
    assert info.value.level == level
    assert info.value.reason_code == rc.UNSUPPORTED_PROTOCOL_VERSION
    assert decoder.protocol_level is None


def test_protocol_level_known_even_if_rest_of_connect_is_malformed() -> None:
    """The broker needs the level to choose the CONNACK format for its error answer."""
    decoder = server()
    with pytest.raises(MalformedPacket):
        decode_all(decoder, h("10 0D 00 04 4D 51 54 54 05 03 00 3C 00 00 00"))  # reserved flag set
    assert decoder.protocol_level == 5


def test_packet_too_large_raised_from_the_fixed_header() -> None:
    decoder = Decoder(max_packet_size=100)
    decoder.receive_data(h("10 80 01"))  # a CONNECT announcing 128 bytes: 131 in all, no body sent yet
    with pytest.raises(PacketTooLarge) as info:
        decoder.next_packet()
    assert info.value.reason_code == rc.PACKET_TOO_LARGE


def test_packet_too_large_counts_the_whole_packet() -> None:
    connect = encode(Connect("x", 4), 4)
    limit = 20
    publish = encode(Publish("t", b"p" * (limit - 5)), 4)  # 2 header + 2 + 1 + 15 = 20 bytes
    assert len(publish) == limit
    decoder = Decoder(max_packet_size=limit)
    assert [type(p) for p in decode_all(decoder, connect + publish)] == [Connect, Publish]
    with pytest.raises(PacketTooLarge):
        decode_all(decoder, encode(Publish("t", b"p" * (limit - 4)), 4))


def test_empty_client_id_is_not_a_codec_error() -> None:
    assert decode_one(server(), CONNECT_311) == Connect("", 4, keep_alive=60)
    assert decode_one(server(), CONNECT_5) == Connect("", 5, keep_alive=60)


def test_password_without_user_name_is_fine_in_5() -> None:
    wire = h("10 0F 00 04 4D 51 54 54 05 42 00 3C 00 00 00 00 00")
    assert decode_one(server(), wire) == Connect("", 5, keep_alive=60, password=b"")


def test_user_property_may_repeat() -> None:
    wire = h("30 13 00 01 61 0E 26 00 01 6B 00 01 31 26 00 01 6B 00 01 32 78")
    packet = decode_one(server(5), wire)
    assert isinstance(packet, Publish)
    assert packet.properties.user_properties == [("k", "1"), ("k", "2")]
    assert packet.payload == b"x"


def test_first_packet_rule_checked_on_first_byte() -> None:
    """A non-CONNECT is refused from its first byte, without waiting for (or buffering) a body."""
    decoder = server()
    decoder.receive_data(h("30"))
    with pytest.raises(ProtocolViolation):
        decoder.next_packet()


def test_bad_flags_checked_before_the_body_arrives() -> None:
    decoder = server(4)
    decoder.receive_data(h("36 7F"))  # QoS 3, body not sent
    with pytest.raises(MalformedPacket):
        decoder.next_packet()


def test_incomplete_input_is_not_an_error() -> None:
    wire = encode(Connect("abc", 5), 5)
    decoder = server()
    for i in range(len(wire) - 1):
        decoder.receive_data(wire[i : i + 1])
        assert decoder.next_packet() is NEED_DATA
    decoder.receive_data(wire[-1:])
    assert decoder.next_packet() == Connect("abc", 5)


# ---- fuzzing: garbage never escapes as anything but RemoteProtocolError, and never loops forever


def _drain(decoder: Decoder, data: bytes) -> None:
    decoder.receive_data(data)
    for _ in range(len(data) + 2):
        try:
            packet = decoder.next_packet()
        except RemoteProtocolError:
            return
        if packet is NEED_DATA:
            return
    raise AssertionError("next_packet neither consumed input nor asked for more")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.binary(max_size=200))
def test_random_bytes_after_connect(level: int, garbage: bytes) -> None:
    name = "MQIsdp" if level == 3 else "MQTT"
    decoder = server()
    assert decode_all(decoder, encode(Connect("fuzz", level, name), level)) == [Connect("fuzz", level, name)]
    _drain(decoder, garbage)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([4, 5]), st.binary(max_size=200))
def test_random_bytes_client_side(level: int, garbage: bytes) -> None:
    _drain(client(level), garbage)


@settings(max_examples=300, deadline=None)
@given(st.data(), mst.levels, st.booleans())
def test_mutated_valid_packets(data: st.DataObject, level: int, to_server: bool) -> None:
    """Bit flips, truncations and insertions in valid streams reach the deep validation paths."""
    strategy = mst.client_packets(level) if to_server else mst.server_packets(level)
    wire = bytearray(b"".join(encode(p, level) for p in data.draw(st.lists(strategy, min_size=1, max_size=3))))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(0, max(0, len(wire) - 1)))
        if op == "flip" and wire:
            wire[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del wire[at : at + data.draw(st.integers(1, 3))]
        else:
            wire[at:at] = data.draw(st.binary(min_size=1, max_size=3))
    _drain(server(level) if to_server else client(level), bytes(wire))


@pytest.mark.parametrize("response_topic", ["a/+/b", "a/#", "#"])
def test_a_response_topic_with_wildcards_is_a_protocol_error(response_topic: str) -> None:
    """[MQTT-3.3.2-14]: a Response Topic is a topic name; a wildcard in it is refused (DISCONNECT 0x82)."""
    wire = encode(Publish("t", b"x", 1, packet_id=1, properties=Properties(response_topic=response_topic)), 5)
    with pytest.raises(ProtocolViolation, match="Response Topic"):
        decode_one(server(5), wire)
    ok = encode(Publish("t", b"x", 1, packet_id=1, properties=Properties(response_topic="reply/to/me")), 5)
    assert isinstance(decode_one(server(5), ok), Publish)
