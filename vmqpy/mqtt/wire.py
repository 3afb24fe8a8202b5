"""MQTT's wire data types (spec 1.5): one byte, two-byte integers, UTF-8 Encoded Strings, Binary Data and the
Variable Byte Integer, read from a packet's bytes and encoded to bytes; and the size limits they imply.

Readers take the bytes `b`, the index `i` to read at and the index `end` a field may not run past. They return
the value and the index after it, and raise `MalformedPacket` for a field that does not fit before `end`,
except `read_vbi`, which returns `NEED_DATA` so that the fixed header can wait for more bytes.
Encoders check that the value fits its wire type and raise `LocalProtocolError` otherwise.
"""

from __future__ import annotations

from typing import Final

from vmqpy.mqtt.errors import LocalProtocolError, MalformedPacket

MAX_REMAINING_LENGTH: Final = 268_435_455  # the largest Variable Byte Integer
MAX_PACKET_SIZE: Final = 268_435_460  # 1 type byte + 4 length bytes + the largest remaining length


class NeedData:
    """Type of `NEED_DATA`: the bytes end before the value (or packet) does; more are needed."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final[NeedData] = NeedData()


def read_vbi(b: bytes, i: int, end: int, what: str = "variable byte integer") -> tuple[int, int] | NeedData:
    """The Variable Byte Integer at b[i:end] -> (value, next index), or NEED_DATA if b[i:end] ends inside it.
    MalformedPacket if it has a fifth byte (`what` names it in the message)."""
    value = 0
    shift = 0
    while True:
        if i >= end:
            return NEED_DATA
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7
        if shift == 28:
            raise MalformedPacket(f"{what} longer than 4 bytes")


def read_u16(b: bytes, i: int, end: int, what: str) -> int:
    """The Two Byte Integer at b[i:end] (the next index is i + 2)."""
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what}")
    return (b[i] << 8) | b[i + 1]


def read_str(b: bytes, i: int, end: int, what: str = "string") -> tuple[str, int]:
    """A UTF-8 Encoded String (2-byte length prefix) -> (str, next index). Ill-formed UTF-8 or U+0000 is
    malformed; Python's strict UTF-8 decoder also rejects surrogates, overlong forms and > U+10FFFF."""
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what} length")
    j = i + 2 + ((b[i] << 8) | b[i + 1])
    if j > end:
        raise MalformedPacket(f"{what} runs past the end of its packet")
    try:
        s = b[i + 2 : j].decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedPacket(f"{what} is not well-formed UTF-8") from e
    if "\x00" in s:
        raise MalformedPacket(f"{what} contains U+0000")
    return s, j


def read_bin(b: bytes, i: int, end: int, what: str) -> tuple[bytes, int]:
    """Binary Data (2-byte length prefix) -> (bytes, next index)."""
    if i + 2 > end:
        raise MalformedPacket(f"truncated {what} length")
    j = i + 2 + ((b[i] << 8) | b[i + 1])
    if j > end:
        raise MalformedPacket(f"{what} runs past the end of its packet")
    return b[i + 2 : j], j

BYTES: Final = tuple(bytes((n,)) for n in range(256))
"""`BYTES[n] == bytes((n,))`, without building a new object."""
SHORT_LENGTHS: Final = tuple(n.to_bytes(2, "big") for n in range(256))
"""The two-byte length prefixes of strings shorter than 256 bytes."""


def encode_vbi(n: int) -> bytes:
    """The Variable Byte Integer of `n` (0 <= n <= MAX_REMAINING_LENGTH; callers check the range)."""
    if n < 128:
        return BYTES[n]
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_byte(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"{what} {value} does not fit in a byte")
    return BYTES[value]


def encode_u16(value: int, what: str) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise LocalProtocolError(f"{what} {value} does not fit in two bytes")
    return value.to_bytes(2, "big")


def encode_str(s: str, what: str) -> bytes:
    """A UTF-8 Encoded String: 2-byte length, then the UTF-8 bytes (no U+0000, at most 65535 bytes)."""
    try:
        data = s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise LocalProtocolError(f"{what} cannot be encoded as UTF-8") from e
    n = len(data)
    if n > 0xFFFF:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes")
    if "\x00" in s:
        raise LocalProtocolError(f"{what} contains U+0000")
    return (SHORT_LENGTHS[n] if n < 256 else n.to_bytes(2, "big")) + data


def encode_bin(data: bytes, what: str) -> bytes:
    """Binary Data: 2-byte length, then the bytes (at most 65535)."""
    n = len(data)
    if n > 0xFFFF:
        raise LocalProtocolError(f"{what} is longer than 65535 bytes")
    return n.to_bytes(2, "big") + bytes(data)
