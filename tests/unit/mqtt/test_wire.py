"""The wire data types: the one Variable Byte Integer reader at the boundaries of each length (spec 1.5.5,
table 1-1), and how the decoder answers a remaining length or property VBI that is too long or cut short."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.mqtt.helpers import server
from vmqpy.mqtt.codec import MAX_REMAINING_LENGTH, NEED_DATA
from vmqpy.mqtt.errors import LocalProtocolError, MalformedPacket
from vmqpy.mqtt.packets import Publish
from vmqpy.mqtt.wire import encode_bin, encode_str, encode_vbi, read_bin, read_str, read_u16, read_vbi

# value, its Variable Byte Integer (the smallest and largest value of each length, spec table 1-1)
VBI_BOUNDARIES = [
    (0, b"\x00"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"),
    (2_097_151, b"\xff\xff\x7f"),
    (2_097_152, b"\x80\x80\x80\x01"),
    (268_435_455, b"\xff\xff\xff\x7f"),
]


@pytest.mark.parametrize(("value", "wire"), VBI_BOUNDARIES)
def test_read_vbi_at_the_boundaries(value: int, wire: bytes) -> None:
    data = b"\xaa" + wire + b"\xbb"  # read in the middle of other bytes
    assert read_vbi(data, 1, len(data)) == (value, 1 + len(wire))


@pytest.mark.parametrize(("value", "wire"), VBI_BOUNDARIES)
def test_encode_vbi_at_the_boundaries(value: int, wire: bytes) -> None:
    assert encode_vbi(value) == wire


def test_largest_vbi_is_the_maximum_remaining_length() -> None:
    assert VBI_BOUNDARIES[-1][0] == MAX_REMAINING_LENGTH


@pytest.mark.parametrize("wire", [b"\xff\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x01", b"\xff\xff\xff\x80"])
def test_a_fifth_byte_is_malformed(wire: bytes) -> None:
    """The fourth byte has the continuation bit: malformed, whether the fifth byte arrived or not."""
    with pytest.raises(MalformedPacket, match=r"^remaining length longer than 4 bytes$"):
        read_vbi(wire, 0, len(wire), "remaining length")
    with pytest.raises(MalformedPacket, match=r"^variable byte integer longer than 4 bytes$"):
        read_vbi(wire, 0, len(wire))


@pytest.mark.parametrize(("value", "wire"), VBI_BOUNDARIES)
def test_a_truncated_vbi_is_need_data(value: int, wire: bytes) -> None:
    for cut in range(len(wire)):
        assert read_vbi(wire, 0, cut) is NEED_DATA


def test_read_vbi_stops_at_end() -> None:
    assert read_vbi(b"\x80\x01", 0, 1) is NEED_DATA
    assert read_vbi(b"\x05\x06", 1, 1) is NEED_DATA


@given(st.integers(0, MAX_REMAINING_LENGTH))
def test_vbi_round_trip(value: int) -> None:
    wire = encode_vbi(value)
    assert read_vbi(wire, 0, len(wire)) == (value, len(wire))


# ---- the decoder: the remaining length and the VBIs inside properties go through read_vbi


def test_truncated_remaining_length_waits_for_more_bytes() -> None:
    wire = b"\x30" + encode_vbi(203) + b"\x00\x01a" + b"x" * 200
    decoder = server(4)
    decoder.receive_data(wire[:2])  # the remaining length's first byte only
    assert decoder.next_packet() is NEED_DATA
    decoder.receive_data(wire[2:])
    assert decoder.next_packet() == Publish("a", b"x" * 200)


def test_remaining_length_of_five_bytes_is_malformed() -> None:
    decoder = server(4)
    decoder.receive_data(b"\x30\xff\xff\xff\xff")
    with pytest.raises(MalformedPacket, match=r"^remaining length longer than 4 bytes$"):
        decoder.next_packet()


def test_truncated_property_vbi_is_malformed() -> None:
    """Inside a complete packet there are no more bytes to wait for."""
    decoder = server(5)
    decoder.receive_data(b"\x30\x04\x00\x01a\x80")  # property length cut after its first byte
    with pytest.raises(MalformedPacket, match=r"^truncated variable byte integer$"):
        decoder.next_packet()


def test_property_vbi_of_five_bytes_is_malformed() -> None:
    decoder = server(5)
    decoder.receive_data(b"\x30\x09\x00\x01a\x80\x80\x80\x80\x01\x00")
    with pytest.raises(MalformedPacket, match=r"^variable byte integer longer than 4 bytes$"):
        decoder.next_packet()


# ---- two-byte integers, strings and binary data


def test_read_u16() -> None:
    assert read_u16(b"\x00\x12\x34", 1, 3, "keep alive") == 0x1234
    with pytest.raises(MalformedPacket, match=r"^truncated keep alive$"):
        read_u16(b"\x12\x34", 1, 2, "keep alive")


def test_string_round_trip_and_limits() -> None:
    wire = encode_str("ä/b", "topic")
    assert wire == b"\x00\x04\xc3\xa4/b"
    assert read_str(wire + b"!", 0, len(wire) + 1, "topic") == ("ä/b", 6)
    assert encode_str("x" * 300, "topic")[:2] == b"\x01\x2c"
    with pytest.raises(LocalProtocolError):
        encode_str("x" * 65_536, "topic")
    with pytest.raises(LocalProtocolError):
        encode_str("a\x00", "topic")
    with pytest.raises(MalformedPacket, match=r"^topic runs past the end of its packet$"):
        read_str(wire, 0, len(wire) - 1, "topic")
    with pytest.raises(MalformedPacket, match=r"^topic contains U\+0000$"):
        read_str(b"\x00\x01\x00", 0, 3, "topic")


def test_binary_round_trip_and_limits() -> None:
    wire = encode_bin(b"\x00\xff", "password")
    assert wire == b"\x00\x02\x00\xff"
    assert read_bin(wire, 0, len(wire), "password") == (b"\x00\xff", 4)
    with pytest.raises(LocalProtocolError):
        encode_bin(bytes(65_536), "password")
    with pytest.raises(MalformedPacket, match=r"^truncated password length$"):
        read_bin(wire, 0, 1, "password")
