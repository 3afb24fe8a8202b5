"""Hostile MQTT input for the fuzzers: valid seed packets of every type (3.1, 3.1.1 and 5.0, both directions)
and seeded mutators that break them the ways a decoder has to survive.

A case is `Case(seed, wire, chunks, max_packet_size)`: the bytes a peer sends after the seed's context (a fresh
server-side decoder for CONNECT, a server that has seen the CONNECT for other client packets, a client for
server packets), cut into `chunks` the way reads might deliver them. `make_case(rng)` draws one from a
`random.Random`, so a case is replayed from (run seed, case index) alone (`case_rng`).

Mutators (`MUTATORS`): bit flips, interesting byte values, truncation, garbage appended or inserted, bytes
deleted, the remaining length lied about (smaller, larger, huge, five bytes, non-minimal), a property list
rebuilt with duplicates, unknown and multi-byte identifiers and wrong lengths, invalid UTF-8 / U+0000 /
wildcards put into a string field, two packets spliced into one stream. Most mutants get their remaining length
fixed afterwards so that the body parsers, not only the fixed header, see them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

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
from vmqpy.mqtt.wire import MAX_REMAINING_LENGTH, encode_vbi

MARK: Final = b"ZZZZ"
"""Four bytes inside every string field of the seeds, where `bad_string` puts its ill-formed text."""
MAX_CASE_BYTES: Final = 4096
"""A case never holds more bytes than this (its remaining length may claim anything)."""


@dataclass(frozen=True, slots=True)
class Seed:
    """One valid packet's wire bytes and the context a decoder needs for it."""

    name: str
    level: int  # 3, 4 or 5
    to_server: bool  # a client's packet (decoded by a server) or a server's
    wire: bytes
    props_at: int | None  # index in `wire` of the Property Length (5.0 packets that have one), else None

    @property
    def is_connect(self) -> bool:
        return self.to_server and self.wire[0] >> 4 == 1


@dataclass(frozen=True, slots=True)
class Case:
    seed: Seed
    wire: bytes
    chunks: tuple[bytes, ...]
    max_packet_size: int
    mutators: tuple[str, ...]


def _full_props(where: str) -> Properties:
    """Properties with several fields set, so that their parsing is in the seed (strings carry MARK)."""
    user = [("kZZZZ", "vZZZZ"), ("k2", "v2")]
    if where == "PUBLISH":
        return Properties(payload_format_indicator=1, message_expiry_interval=60, content_type="ctZZZZ",
                          response_topic="re/ZZZZ", correlation_data=b"\x01\x02", topic_alias=3,
                          user_properties=user)
    if where == "PUBLISH_S2C":
        return Properties(payload_format_indicator=0, subscription_identifiers=[1, 300, 268_435_455],
                          content_type="ctZZZZ", user_properties=user)
    if where == "WILL":
        return Properties(will_delay_interval=5, payload_format_indicator=1, message_expiry_interval=9,
                          content_type="ZZZZ", response_topic="wr/ZZZZ", correlation_data=b"c", user_properties=user)
    if where == "CONNECT":
        return Properties(session_expiry_interval=30, receive_maximum=10, maximum_packet_size=65536,
                          topic_alias_maximum=8, request_response_information=1, request_problem_information=0,
                          authentication_method="mZZZZ", authentication_data=b"\x00\xff", user_properties=user)
    if where == "CONNACK":
        return Properties(session_expiry_interval=30, assigned_client_identifier="aZZZZ", server_keep_alive=20,
                          receive_maximum=5, topic_alias_maximum=4, maximum_qos=1, retain_available=1,
                          maximum_packet_size=1 << 20, wildcard_subscription_available=1,
                          subscription_identifier_available=0, shared_subscription_available=1,
                          reason_string="rZZZZ", response_information="riZZZZ", server_reference="sZZZZ",
                          user_properties=user)
    if where == "SUBSCRIBE":
        return Properties(subscription_identifiers=[77], user_properties=user)
    if where == "UNSUBSCRIBE":
        return Properties(user_properties=user)
    if where == "DISCONNECT":
        return Properties(session_expiry_interval=0, reason_string="byeZZZZ", server_reference="otherZZZZ",
                          user_properties=user)
    if where == "AUTH":
        return Properties(authentication_method="SCRAMZZZZ", authentication_data=b"\x01", reason_string="ZZZZ")
    return Properties(reason_string="whyZZZZ", user_properties=user)


def _templates(level: int) -> list[tuple[str, bool, Callable[[Properties], Packet], str | None]]:
    """(name, to_server, packet from properties, where its properties are) for every packet type."""
    will = Will("w/ZZZZ", b"last words", 1, True, _full_props("WILL") if level == 5 else Properties())
    subs = [Subscription("f/ZZZZ/+", SubOptions(1)), Subscription("$share/gZZZZ/s/#", SubOptions(2)),
            Subscription("#", SubOptions(0, no_local=level == 5, retain_handling=2 if level == 5 else 0))]
    name = "MQIsdp" if level == 3 else "MQTT"
    t: list[tuple[str, bool, Callable[[Properties], Packet], str | None]] = [
        ("connect", True, lambda p: Connect("cZZZZ", level, name, True, 60, None, None, None, p), "CONNECT"),
        ("connect-will-auth", True,
         lambda p: Connect("cZZZZ", level, name, False, 0, will, "uZZZZ", b"secret", p), "CONNECT"),
        ("publish-qos0", True, lambda p: Publish("a/ZZZZ", b"hello", 0, False, False, None, p), "PUBLISH"),
        ("publish-qos1", True, lambda p: Publish("a/b/ZZZZ", b"x" * 40, 1, True, False, 7, p), "PUBLISH"),
        ("publish-qos2-dup", True, lambda p: Publish("ZZZZ", b"", 2, False, True, 65535, p), "PUBLISH"),
        ("puback", True, lambda p: Puback(1, 0x10 if level == 5 else 0, p), "ACK"),
        ("pubrec", True, lambda p: Pubrec(2, 0x10 if level == 5 else 0, p), "ACK"),
        ("pubrel", True, lambda p: Pubrel(3, 0x92 if level == 5 else 0, p), "ACK"),
        ("pubcomp", True, lambda p: Pubcomp(4, 0x92 if level == 5 else 0, p), "ACK"),
        ("subscribe", True, lambda p: Subscribe(5, subs, p), "SUBSCRIBE"),
        ("unsubscribe", True, lambda p: Unsubscribe(6, ["f/ZZZZ/+", "#"], p), "UNSUBSCRIBE"),
        ("pingreq", True, lambda p: Pingreq(), None),
        ("disconnect", True, lambda p: Disconnect(0x04 if level == 5 else 0, p), "DISCONNECT"),
        ("connack", False, lambda p: Connack(True, 0, p), "CONNACK"),
        ("publish-s2c", False, lambda p: Publish("s/ZZZZ", b"down", 1, False, False, 9, p), "PUBLISH_S2C"),
        ("puback-s2c", False, lambda p: Puback(9, 0x10 if level == 5 else 0, p), "ACK"),
        ("suback", False, lambda p: Suback(5, [0, 1, 2, 0x80], p), "ACK"),
        ("unsuback", False, lambda p: Unsuback(6, [0, 0x11] if level == 5 else [], p), "ACK"),
        ("pingresp", False, lambda p: Pingresp(), None),
    ]
    if level == 5:
        t += [("auth", True, lambda p: Auth(0x18, p), "AUTH"),
              ("disconnect-s2c", False, lambda p: Disconnect(0x8E, p), "DISCONNECT"),
              ("auth-s2c", False, lambda p: Auth(0x18, p), "AUTH")]
    return t


def _seed(name: str, level: int, to_server: bool, build: Callable[[Properties], Packet], where: str | None) -> Seed:
    if level != 5 or where is None:
        return Seed(f"v{level}-{name}", level, to_server, encode(build(Properties()), level), None)
    bare = encode(build(Properties()), level)
    full = encode(build(_full_props(where)), level)
    # Both differ first at the Property Length (0 in `bare`); the fixed header may differ in its length byte(s).
    hb, hf = _header_len(bare), _header_len(full)
    i = 0
    while i < len(bare) - hb and bare[hb + i] == full[hf + i]:
        i += 1
    return Seed(f"v{level}-{name}", level, to_server, full, hf + i)


def _header_len(wire: bytes) -> int:
    i = 1
    while wire[i] & 0x80:
        i += 1
    return i + 1


def build_seeds() -> tuple[Seed, ...]:
    return tuple(_seed(name, level, to_server, build, where)
                 for level in (3, 4, 5) for name, to_server, build, where in _templates(level))


SEEDS: Final = build_seeds()


# -- framing -----------------------------------------------------------------------------------------------------
def split(wire: bytes) -> tuple[int, bytes]:
    """(first byte, body) of a single packet's bytes whose fixed header may be broken (then body = the rest)."""
    i = 1
    while i < len(wire) and i < 5 and wire[i] & 0x80:
        i += 1
    return wire[0], wire[i + 1 :]


def reframe(first: int, body: bytes) -> bytes:
    """The packet with a remaining length that matches its body."""
    return bytes((first,)) + encode_vbi(min(len(body), MAX_REMAINING_LENGTH)) + body


# -- mutators: (rng, seed, bytes) -> bytes ------------------------------------------------------------------------
Mutator = Callable[[random.Random, Seed, bytes], bytes]
INTERESTING: Final = (0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0x81, 0xC0, 0xFE, 0xFF)
BAD_TEXT: Final = (
    b"\xff\xfe\xfd\xfc",  # never valid in UTF-8
    b"\xc0\x80ab",  # overlong U+0000
    b"\xed\xa0\x80a",  # a surrogate
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"ab\x00c",  # U+0000
    b"a\xe2\x82",  # a truncated sequence (3 bytes: the length prefix then lies)
    b"a/+b",  # wildcards
    b"#/##",
    b"\xef\xbf\xbf\x00",  # U+FFFF then U+0000
)


def flip_bits(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    b = bytearray(wire)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def set_bytes(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    b = bytearray(wire)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice(INTERESTING) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(b)


def truncate(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    return wire[: rng.randrange(1, len(wire))] if len(wire) > 1 else wire


def append_garbage(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    return wire + rng.randbytes(rng.randint(1, 64))


def insert_bytes(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    i = rng.randrange(1, len(wire) + 1)
    return wire[:i] + rng.randbytes(rng.randint(1, 8)) + wire[i:]


def delete_bytes(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    if len(wire) < 3:
        return wire
    i = rng.randrange(1, len(wire) - 1)
    return wire[:i] + wire[i + rng.randint(1, 8) :]


def lie_about_length(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """The remaining length says something else than the body's size."""
    first, body = split(wire)
    n = len(body)
    choice = rng.randrange(7)
    if choice == 0:
        header = encode_vbi(max(0, n - rng.randint(1, 4)))
    elif choice == 1:
        header = encode_vbi(n + rng.randint(1, 16))
    elif choice == 2:
        header = encode_vbi(rng.choice((MAX_REMAINING_LENGTH, 2_097_152, 16_384, 128)))
    elif choice == 3:
        header = b"\xff\xff\xff\xff\x7f"  # five bytes
    elif choice == 4:
        header = b"\xff\xff\xff\xff"  # four continuation bytes, then the body
    elif choice == 5:
        header = bytes((n & 0x7F | 0x80, n >> 7))  # non-minimal: two bytes for a small length
    else:
        header = encode_vbi(0)
    return bytes((first,)) + header + body


def huge_length(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """A packet that claims close to 256 MiB and brings a few bytes."""
    first, body = split(wire)
    return bytes((first,)) + encode_vbi(MAX_REMAINING_LENGTH - rng.randrange(4)) + body[: rng.randrange(64)]


_KNOWN_IDS: Final = (0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x11, 0x12, 0x13, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A,
                     0x1C, 0x1F, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A)
_UNKNOWN_IDS: Final = (0x00, 0x04, 0x10, 0x14, 0x20, 0x2B, 0x7F, 0x80, 0x4000, 268_435_455)
_BYTE_IDS = frozenset({0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A})
_U16_IDS = frozenset({0x13, 0x21, 0x22, 0x23})
_U32_IDS = frozenset({0x02, 0x11, 0x18, 0x27})
_STR_IDS = frozenset({0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F})


def _text_field(rng: random.Random) -> bytes:
    data = rng.choice((b"ok", b"", rng.choice(BAD_TEXT), b"x" * rng.randint(0, 300)))
    n = len(data) + rng.choice((0, 0, 0, 0, 1, -1, 1000))
    return max(0, min(n, 0xFFFF)).to_bytes(2, "big") + data


def _property(rng: random.Random, pid: int) -> bytes:
    head = encode_vbi(pid)
    if pid in _BYTE_IDS:
        value = bytes((rng.choice((0, 1, 2, 0xFF)),))
    elif pid in _U16_IDS:
        value = rng.choice((0, 1, 0xFFFF, rng.randrange(0x10000))).to_bytes(2, "big")
    elif pid in _U32_IDS:
        value = rng.choice((0, 1, 0xFFFF_FFFF)).to_bytes(4, "big")
    elif pid == 0x0B:
        value = rng.choice((b"\x00", b"\x01", b"\xff\xff\xff\x7f", b"\xff\xff\xff\xff\x01", b"\x80"))
    elif pid in _STR_IDS or pid in (0x09, 0x16):
        value = _text_field(rng)
    elif pid == 0x26:
        value = _text_field(rng) + _text_field(rng)
    else:
        value = rng.randbytes(rng.randrange(5))
    if rng.random() < 0.1:
        value = value[: rng.randrange(len(value) + 1)]  # cut short
    return head + value


def rebuild_properties(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """Replace a 5.0 packet's property list by one with duplicates, unknown ids and odd values."""
    if seed.props_at is None or seed.props_at >= len(wire):
        return set_bytes(rng, seed, wire)
    at = seed.props_at
    old = _read_vbi(wire, at)
    if old is None:
        return set_bytes(rng, seed, wire)
    plen, after = old
    ids: list[int] = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        ids.append(rng.choice(_UNKNOWN_IDS) if r < 0.15 else ids[-1] if ids and r < 0.45 else rng.choice(_KNOWN_IDS))
    block = b"".join(_property(rng, pid) for pid in ids)
    length = len(block) + rng.choice((0, 0, 0, 0, 1, -1, 100))
    head = encode_vbi(max(0, length))
    first, _ = split(wire)
    body_start = _header_len(wire) if len(wire) > 1 else 1
    body = wire[body_start:at] + head + block + wire[after + plen :]
    return reframe(first, body)


def _read_vbi(b: bytes, i: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    while i < len(b) and shift < 28:
        value |= (b[i] & 0x7F) << shift
        i += 1
        if b[i - 1] < 0x80:
            return value, i
        shift += 7
    return None


def bad_string(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """Ill-formed UTF-8, U+0000 or wildcards in a string field (the length prefix stays right)."""
    at = [i for i in range(len(wire) - 3) if wire[i : i + 4] == MARK]
    if not at:
        return set_bytes(rng, seed, wire)
    i = rng.choice(at)
    return wire[:i] + rng.choice(BAD_TEXT) + wire[i + 4 :]


def change_type(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """Another packet type or flags in the first byte (a CONNECT twice, a server packet from a client...)."""
    return bytes((rng.randrange(256) if rng.random() < 0.5 else (wire[0] & 0xF0) | rng.randrange(16),)) + wire[1:]


def splice(rng: random.Random, seed: Seed, wire: bytes) -> bytes:
    """Two packets in one stream: this one and another seed of the same level and direction (or the reverse)."""
    other = rng.choice([s for s in SEEDS if s.level == seed.level and s.to_server == seed.to_server
                        and not s.is_connect])
    return wire + other.wire if rng.random() < 0.7 else other.wire + wire


MUTATORS: Final[tuple[tuple[str, Mutator], ...]] = (
    ("flip_bits", flip_bits),
    ("set_bytes", set_bytes),
    ("truncate", truncate),
    ("append_garbage", append_garbage),
    ("insert_bytes", insert_bytes),
    ("delete_bytes", delete_bytes),
    ("lie_about_length", lie_about_length),
    ("huge_length", huge_length),
    ("rebuild_properties", rebuild_properties),
    ("bad_string", bad_string),
    ("change_type", change_type),
    ("splice", splice),
)
_KEEP_HEADER: Final = frozenset({"lie_about_length", "huge_length", "truncate", "splice"})


def mutate(rng: random.Random, seed: Seed, wire: bytes | None = None) -> tuple[bytes, tuple[str, ...]]:
    """1 to 3 mutators applied to `wire` (default: the seed's); (mutant, names of the mutators applied)."""
    out = seed.wire if wire is None else wire
    names: list[str] = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        name, mutator = rng.choice(MUTATORS)
        out = mutator(rng, seed, out) or b"\x00"
        names.append(name)
    if names[-1] not in _KEEP_HEADER and rng.random() < 0.7:
        first, body = split(out)
        out = reframe(first, body)  # a consistent length: the body parsers get to see the damage
    return out[:MAX_CASE_BYTES], tuple(names)


def chunked(rng: random.Random, wire: bytes) -> tuple[bytes, ...]:
    """`wire` cut at 0 to 4 random points (a read may end anywhere)."""
    if len(wire) < 2 or rng.random() < 0.5:
        return (wire,)
    cuts = sorted({rng.randrange(1, len(wire)) for _ in range(rng.randint(1, 4))})
    return tuple(wire[a:b] for a, b in zip((0, *cuts), (*cuts, len(wire)), strict=True))


def case_rng(run_seed: int, index: int) -> random.Random:
    """The generator of case `index` of the run with `run_seed`: any case is replayed from these two numbers."""
    return random.Random(run_seed * 0x1_0000_0001 + index)


def make_case(rng: random.Random, seeds: Sequence[Seed] = SEEDS) -> Case:
    seed = rng.choice(seeds)
    wire, names = mutate(rng, seed)
    max_size = rng.choice((268_435_460, 268_435_460, 65_536, 64))
    return Case(seed, wire, chunked(rng, wire), max_size, names)
