"""frame_auth: session keys, sealing and opening; tampering, replay, reordering and cutting are refused."""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.cluster.errors import ClusterProtocolError, ClusterUsageError
from vmqpy.cluster.frame_auth import (
    KEY_SIZE,
    TAG_SIZE,
    FrameAuthenticationFailed,
    FrameOpener,
    FrameSealer,
    derive_keys,
    frame_tag,
)
from vmqpy.cluster.framing import NEED_DATA, Frame, FrameDecoder, FrameType, encode_frame

KEY = bytes(range(KEY_SIZE))
OTHER_KEY = bytes(KEY_SIZE)

SIDES: dict[str, Any] = {
    "dialer_name": "a",
    "dialer_incarnation": 1,
    "dialer_nonce": b"d" * 16,
    "acceptor_name": "b",
    "acceptor_incarnation": 2,
    "acceptor_nonce": b"A" * 16,
}

# ------------------------------------------------------------------------------------------------ keys


def test_the_two_sides_agree_and_the_directions_differ() -> None:
    dialer = derive_keys("cookie", dialer=True, **SIDES)
    acceptor = derive_keys("cookie", dialer=False, **SIDES)
    assert dialer.send == acceptor.receive and dialer.receive == acceptor.send
    assert dialer.send != dialer.receive
    assert len(dialer.send) == len(dialer.receive) == KEY_SIZE


def test_keys_follow_the_documented_derivation() -> None:
    """The module docstring's formula, written out here by hand (a change of the wire format must show)."""
    def lp(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    message = (b"vmqpy-cluster-v1 session" + lp(b"d" * 16) + lp(b"A" * 16) + lp(b"a") + lp(b"b")
               + struct.pack(">QQ", 1, 2))
    key = hashlib.scrypt(b"cookie", salt=b"vmqpy-cluster-v1 cookie", n=1 << 14, r=8, p=1, maxmem=1 << 26, dklen=32)
    session = hmac.new(key, message, hashlib.sha256).digest()
    keys = derive_keys("cookie", dialer=True, **SIDES)
    assert keys.send == hmac.new(session, b"D", hashlib.sha256).digest()
    assert keys.receive == hmac.new(session, b"A", hashlib.sha256).digest()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dialer_nonce", b"e" * 16),
        ("acceptor_nonce", b"B" * 16),
        ("dialer_name", "c"),
        ("acceptor_name", "c"),
        ("dialer_incarnation", 3),
        ("acceptor_incarnation", 3),
    ],
)
def test_every_handshake_field_changes_the_keys(field: str, value: object) -> None:
    base = derive_keys("cookie", dialer=True, **SIDES)
    changed = derive_keys("cookie", dialer=True, **{**SIDES, field: value})
    assert changed.send != base.send and changed.receive != base.receive


def test_the_cookie_changes_the_keys_and_must_not_be_empty() -> None:
    assert derive_keys("other", dialer=True, **SIDES) != derive_keys("cookie", dialer=True, **SIDES)
    with pytest.raises(ClusterUsageError):
        derive_keys("", dialer=True, **SIDES)


@pytest.mark.parametrize("key", [b"", bytes(16), bytes(33)])
def test_keys_of_the_wrong_size_are_misuse(key: bytes) -> None:
    with pytest.raises(ClusterUsageError):
        FrameSealer(key)
    with pytest.raises(ClusterUsageError):
        FrameOpener(key)


# ------------------------------------------------------------------------------------------------ tags

FRAME = encode_frame(FrameType.METADATA, b"payload")


def test_a_sealed_frame_is_the_frame_then_its_tag() -> None:
    sealer = FrameSealer(KEY)
    sealed = sealer.seal(FRAME)
    assert sealed[:-TAG_SIZE] == FRAME and len(sealed) == len(FRAME) + TAG_SIZE
    # the module docstring's formula, with the standard library's HMAC
    expected = hmac.new(KEY, struct.pack(">Q", 0) + FRAME, hashlib.sha256).digest()[:TAG_SIZE]
    assert sealed[-TAG_SIZE:] == expected == frame_tag(KEY, 0, FRAME)
    assert sealer.sequence == 1
    # the same frame again gets another tag (sequence 1)
    assert sealer.seal(FRAME)[-TAG_SIZE:] != expected


def open_all(opener: FrameOpener, stream: list[bytes]) -> None:
    for sealed in stream:
        opener.open(sealed[:-TAG_SIZE], sealed[-TAG_SIZE:])


def stream_of(count: int) -> list[bytes]:
    sealer = FrameSealer(KEY)
    return [sealer.seal(encode_frame(FrameType.FORWARD, bytes([i]) * 10)) for i in range(count)]


Received = Callable[[list[bytes]], list[bytes]]


@pytest.mark.parametrize(
    ("name", "received", "refused_at"),
    [
        ("replayed", lambda s: [s[0], s[1], s[1]], 2),
        ("reordered", lambda s: [s[0], s[2], s[1]], 1),
        ("dropped", lambda s: [s[0], s[2]], 1),
        ("replayed first", lambda s: [s[0], s[0]], 1),
        ("tag of another frame", lambda s: [s[0], s[1][:-TAG_SIZE] + s[2][-TAG_SIZE:]], 1),
        ("unsealed", lambda s: [s[0], FRAME + bytes(TAG_SIZE)], 1),
        ("other key", lambda s: [FrameSealer(OTHER_KEY).seal(FRAME)], 0),
    ],
)
def test_what_the_opener_refuses(name: str, received: Received, refused_at: int) -> None:
    frames = received(stream_of(3))
    opener = FrameOpener(KEY)
    with pytest.raises(FrameAuthenticationFailed) as caught:
        open_all(opener, frames)
    assert isinstance(caught.value, ClusterProtocolError)
    assert "frame authentication failed" in caught.value.reason
    assert caught.value.sequence == opener.sequence == refused_at


def test_a_failed_frame_does_not_advance_the_count() -> None:
    stream = stream_of(2)
    opener = FrameOpener(KEY)
    with pytest.raises(FrameAuthenticationFailed):
        opener.open(stream[1][:-TAG_SIZE], stream[1][-TAG_SIZE:])
    assert opener.sequence == 0


# ------------------------------------------------------------------------------------------------ properties


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=20))
@settings(max_examples=200)
def test_a_good_stream_is_accepted(bodies: list[bytes]) -> None:
    sealer, opener = FrameSealer(KEY), FrameOpener(KEY)
    open_all(opener, [sealer.seal(encode_frame(FrameType.METADATA, body)) for body in bodies])
    assert opener.sequence == sealer.sequence == len(bodies)


@given(st.lists(st.binary(max_size=100), min_size=1, max_size=8), st.data())
@settings(max_examples=300)
def test_any_flipped_bit_is_refused(bodies: list[bytes], data: st.DataObject) -> None:
    sealer = FrameSealer(KEY)
    stream = [sealer.seal(encode_frame(FrameType.METADATA, body)) for body in bodies]
    victim = data.draw(st.integers(0, len(stream) - 1))
    position = data.draw(st.integers(0, len(stream[victim]) - 1))
    bit = data.draw(st.integers(0, 7))
    tampered = bytearray(stream[victim])
    tampered[position] ^= 1 << bit
    stream[victim] = bytes(tampered)
    opener = FrameOpener(KEY)
    with pytest.raises(FrameAuthenticationFailed) as caught:
        open_all(opener, stream)
    assert caught.value.sequence == victim


@given(st.lists(st.binary(max_size=50), min_size=2, max_size=8), st.data())
@settings(max_examples=200)
def test_any_replay_or_swap_is_refused(bodies: list[bytes], data: st.DataObject) -> None:
    sealer = FrameSealer(KEY)
    stream = [sealer.seal(encode_frame(FrameType.METADATA, body)) for body in bodies]
    i = data.draw(st.integers(0, len(stream) - 1))
    j = data.draw(st.integers(0, len(stream) - 1).filter(lambda k: k != i))
    if data.draw(st.booleans()):
        stream[i], stream[j] = stream[j], stream[i]  # reordered
    else:
        stream.insert(j + 1, stream[i])  # replayed after frame j
    with pytest.raises(FrameAuthenticationFailed):
        open_all(FrameOpener(KEY), stream)


# ------------------------------------------------------------------------------------------------ the decoder


def decode_sealed(data: bytes, key: bytes = KEY) -> list[Frame]:
    decoder = FrameDecoder(1 << 20)
    decoder.authenticate(FrameOpener(key))
    decoder.receive_data(data)
    frames: list[Frame] = []
    for _ in range(1000):
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return frames
        frames.append(frame)
    raise AssertionError("too many frames")


@given(st.lists(st.binary(max_size=100), max_size=10), st.data())
@settings(max_examples=100)
def test_the_decoder_checks_every_tag_across_any_split(bodies: list[bytes], data: st.DataObject) -> None:
    sealer = FrameSealer(KEY)
    wire = b"".join(sealer.seal(encode_frame(FrameType.FORWARD, body)) for body in bodies)
    decoder = FrameDecoder(1 << 20)
    decoder.authenticate(FrameOpener(KEY))
    got: list[Frame] = []
    rest = wire
    for _ in range(len(wire) + 1):
        if not rest:
            break
        n = data.draw(st.integers(1, len(rest)))
        decoder.receive_data(rest[:n])
        rest = rest[n:]
        while (frame := decoder.next_frame()) is not NEED_DATA:
            got.append(frame)
    assert got == [Frame(FrameType.FORWARD, body) for body in bodies]
    assert decoder.buffered() == 0


def test_the_decoder_refuses_a_frame_before_decoding_its_msgpack() -> None:
    """A frame whose msgpack is garbage but whose tag is wrong fails on the tag (nothing of it is parsed)."""
    garbage = struct.pack(">I", 1) + b"\xc1"
    with pytest.raises(FrameAuthenticationFailed):
        decode_sealed(garbage + bytes(TAG_SIZE))
    with pytest.raises(FrameAuthenticationFailed):
        decode_sealed(FrameSealer(OTHER_KEY).seal(FRAME))


def test_the_decoder_waits_for_the_tag() -> None:
    sealed = FrameSealer(KEY).seal(FRAME)
    assert decode_sealed(sealed[:-1]) == []
    assert decode_sealed(sealed) == [Frame(FrameType.METADATA, b"payload")]


@given(st.binary(min_size=KEY_SIZE, max_size=KEY_SIZE), st.integers(0, (1 << 64) - 1), st.binary(max_size=3000))
@settings(max_examples=200)
def test_the_precomputed_hmac_is_the_standard_one(key: bytes, sequence: int, frame: bytes) -> None:
    expected = hmac.new(key, struct.pack(">Q", sequence) + frame, hashlib.sha256).digest()[:TAG_SIZE]
    assert frame_tag(key, sequence, frame) == expected
