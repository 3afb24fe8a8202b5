"""Framing: golden bytes, round trips, any split of the stream, and every kind of bad input."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.cluster.errors import (
    ClusterProtocolError,
    ClusterUsageError,
    FrameTooLarge,
    MalformedFrame,
    UndecodableFrame,
    UnknownFrameType,
    UnsupportedVersion,
)
from vmqpy.cluster.framing import NEED_DATA, PROTOCOL_VERSION, Frame, FrameDecoder, FrameType, encode_frame


def decode_all(decoder: FrameDecoder) -> list[Frame]:
    frames: list[Frame] = []
    for _ in range(100_000):  # bounded
        frame = decoder.next_frame()
        if frame is NEED_DATA:
            return frames
        frames.append(frame)
    raise AssertionError("decoder never asked for data")


def raw_frame(obj: Any) -> bytes:
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


# ------------------------------------------------------------------------------------------------ golden bytes

GOLDEN = [
    (FrameType.HEARTBEAT, None, "00000004" "930103c0"),
    (FrameType.METADATA, b"abc", "00000008" "930104c403616263"),
    (FrameType.FORWARD, b"", "00000005" "930105c400"),
    (FrameType.BYE, "x", "00000005" "930108a178"),
    (FrameType.REACHABILITY, ["a", "b"], "00000008" "93010792a161a162"),
    (FrameType.CONTROL, {"op": "join"}, "0000000c" "93010681a26f70a46a6f696e"),
    (FrameType.CHALLENGE_RESPONSE, bytes(32), "00000025" "930102c420" + "00" * 32),
    (
        FrameType.HELLO,
        {"name": "a", "incarnation": 1, "nonce": bytes(16), "listen": ["h", 1]},
        "0000003b" "930101" "84" "a46e616d65a161" "ab696e6361726e6174696f6e01" "a56e6f6e6365c410" + "00" * 16
        + "a66c697374656e" "92a16801",
    ),
]


def test_frame_type_values_are_the_wire_values() -> None:
    assert PROTOCOL_VERSION == 1
    assert [(t.name, t.value) for t in FrameType] == [
        ("HELLO", 1),
        ("CHALLENGE_RESPONSE", 2),
        ("HEARTBEAT", 3),
        ("METADATA", 4),
        ("FORWARD", 5),
        ("CONTROL", 6),
        ("REACHABILITY", 7),
        ("BYE", 8),
        ("REPLICA", 9),
    ]


@pytest.mark.parametrize(("frame_type", "body", "wire"), GOLDEN, ids=[g[0].name for g in GOLDEN])
def test_golden_encode(frame_type: FrameType, body: Any, wire: str) -> None:
    assert encode_frame(frame_type, body).hex() == wire


@pytest.mark.parametrize(("frame_type", "body", "wire"), GOLDEN, ids=[g[0].name for g in GOLDEN])
def test_golden_decode(frame_type: FrameType, body: Any, wire: str) -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(bytes.fromhex(wire))
    assert decode_all(decoder) == [Frame(frame_type, body)]
    assert decoder.buffered() == 0


# ------------------------------------------------------------------------------------------------ round trips

names = st.text(min_size=0, max_size=20)
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=20) | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
frames = st.one_of(
    st.builds(Frame, st.sampled_from([FrameType.METADATA, FrameType.FORWARD]), st.binary(max_size=300)),
    st.builds(Frame, st.just(FrameType.CHALLENGE_RESPONSE), st.binary(min_size=32, max_size=32)),
    st.builds(Frame, st.just(FrameType.HEARTBEAT), st.none()),
    st.builds(Frame, st.just(FrameType.BYE), names),
    st.builds(Frame, st.just(FrameType.REACHABILITY), st.lists(names, max_size=5)),
    st.builds(
        Frame, st.sampled_from([FrameType.CONTROL, FrameType.HELLO]), st.dictionaries(st.text(max_size=8), plain)
    ),
)


@given(frames)
def test_round_trip(frame: Frame) -> None:
    decoder = FrameDecoder(1 << 16)
    decoder.receive_data(encode_frame(frame.type, frame.body))
    assert decode_all(decoder) == [frame]


@given(st.lists(frames, min_size=1, max_size=8), st.data())
@settings(max_examples=200)
def test_any_split_of_the_stream_gives_the_same_frames(batch: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(f.type, f.body) for f in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder(1 << 16)
    got: list[Frame] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        decoder.receive_data(stream[start:cut])
        got += decode_all(decoder)
        start = cut
    assert got == batch
    assert decoder.buffered() == 0


def test_byte_by_byte() -> None:
    stream = encode_frame(FrameType.METADATA, b"x" * 300) + encode_frame(FrameType.BYE, "done")
    decoder = FrameDecoder(1024)
    got: list[Frame] = []
    for i in range(len(stream)):
        decoder.receive_data(stream[i : i + 1])
        got += decode_all(decoder)
    assert got == [Frame(FrameType.METADATA, b"x" * 300), Frame(FrameType.BYE, "done")]


def test_many_frames_in_one_chunk_and_a_partial_tail() -> None:
    """More than the compaction threshold of consumed bytes, with a frame straddling the chunks."""
    frame = encode_frame(FrameType.METADATA, b"y" * 1000)
    stream = frame * 200
    decoder = FrameDecoder(4096)
    decoder.receive_data(stream[:-500])
    assert len(decode_all(decoder)) == 199
    assert decoder.buffered() == len(frame) - 500
    decoder.receive_data(stream[-500:])
    assert decode_all(decoder) == [Frame(FrameType.METADATA, b"y" * 1000)]
    assert decoder.buffered() == 0


# ------------------------------------------------------------------------------------------------ VerneMQ wire suite


def test_invalid_initial_frame() -> None:
    """Not our protocol at all (an HTTP request): its first 4 bytes read as a huge length."""
    decoder = FrameDecoder(1 << 20)
    decoder.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert "exceeds the maximum frame size" in info.value.reason


def test_partial_frame_needs_data_then_completes() -> None:
    wire = encode_frame(FrameType.FORWARD, b"publish")
    decoder = FrameDecoder(1024)
    decoder.receive_data(wire[:2])
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(wire[2:7])
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(wire[7:])
    assert decoder.next_frame() == Frame(FrameType.FORWARD, b"publish")
    assert decoder.next_frame() is NEED_DATA


def test_oversized_frame_is_refused_from_the_length_prefix_alone() -> None:
    decoder = FrameDecoder(1000)
    decoder.receive_data(struct.pack(">I", 1001))  # no body at all
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert (info.value.size, info.value.maximum) == (1001, 1000)
    assert decoder.buffered() == 0  # nothing kept
    decoder.receive_data(b"z" * 5000)
    assert decoder.buffered() == 0  # and nothing buffered afterwards


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    body = b"q" * 100
    wire = encode_frame(FrameType.METADATA, body)
    decoder = FrameDecoder(len(wire) - 4)
    decoder.receive_data(wire)
    assert decode_all(decoder) == [Frame(FrameType.METADATA, body)]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"\xc1", UndecodableFrame),  # a reserved msgpack byte
        (b"\x93\x01", UndecodableFrame),  # truncated array inside a complete frame
        (msgpack.packb([1, 4, b"a"]) + b"\x00", UndecodableFrame),  # trailing bytes
        (msgpack.packb(msgpack.ExtType(5, b"x")), UndecodableFrame),  # extension types are refused
        (b"\xa3abc", MalformedFrame),  # valid msgpack, not an array
        (msgpack.packb([]), MalformedFrame),
        (msgpack.packb(["1", 4, b""]), MalformedFrame),  # version not an int
        (msgpack.packb([True, 4, b""]), MalformedFrame),  # a bool is not a version
        (msgpack.packb([1, 4]), MalformedFrame),
        (msgpack.packb([1, 4, b"", 0]), MalformedFrame),
        (msgpack.packb([1, "4", b""]), MalformedFrame),  # type not an int
        (msgpack.packb([2, 4, b""]), UnsupportedVersion),
        (msgpack.packb([1, 99, b""]), UnknownFrameType),
        (msgpack.packb([1, 0, None]), UnknownFrameType),
        (msgpack.packb([1, 4, "text"]), MalformedFrame),  # METADATA must be bytes
        (msgpack.packb([1, 6, [1]]), MalformedFrame),  # CONTROL must be a map
        (msgpack.packb([1, 7, ["a", 1]]), MalformedFrame),  # REACHABILITY must be strings
        (msgpack.packb([1, 3, 0]), MalformedFrame),  # HEARTBEAT must be nil
        (msgpack.packb([1, 8, b"bytes"], use_bin_type=True), MalformedFrame),  # BYE must be a string
    ],
)
def test_invalid_inner_frame(payload: bytes, error: type[ClusterProtocolError]) -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(struct.pack(">I", len(payload)) + payload)
    with pytest.raises(error) as info:
        decoder.next_frame()
    assert info.value.reason
    assert type(info.value) is error


def test_the_msgpack_timestamp_is_the_one_extension_accepted() -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(encode_frame(FrameType.CONTROL, {"at": msgpack.Timestamp(5, 0)}))
    assert decode_all(decoder) == [Frame(FrameType.CONTROL, {"at": msgpack.Timestamp(5, 0)})]


def test_empty_frame_is_invalid() -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(b"\x00\x00\x00\x00")
    with pytest.raises(UndecodableFrame):
        decoder.next_frame()


def test_a_failed_decoder_stays_failed() -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(raw_frame([1, 99, None]))
    with pytest.raises(UnknownFrameType):
        decoder.next_frame()
    decoder.receive_data(encode_frame(FrameType.HEARTBEAT, None))
    with pytest.raises(UnknownFrameType):
        decoder.next_frame()


def test_frames_before_a_bad_one_are_returned() -> None:
    decoder = FrameDecoder(1024)
    decoder.receive_data(encode_frame(FrameType.FORWARD, b"1") + raw_frame([1, 99, None]))
    assert decoder.next_frame() == Frame(FrameType.FORWARD, b"1")
    with pytest.raises(UnknownFrameType):
        decoder.next_frame()


@given(st.binary(max_size=400), st.integers(1, 64))
@settings(max_examples=300)
def test_random_bytes_raise_only_protocol_errors(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(256)
    for start in range(0, len(data), chunk):
        decoder.receive_data(data[start : start + chunk])
        try:
            decode_all(decoder)
        except ClusterProtocolError as exc:
            assert exc.reason
            return


@given(st.lists(st.binary(max_size=30), max_size=4))
def test_random_payloads_in_valid_length_prefixes(payloads: list[bytes]) -> None:
    decoder = FrameDecoder(256)
    decoder.receive_data(b"".join(struct.pack(">I", len(p)) + p for p in payloads))
    try:
        decode_all(decoder)
    except ClusterProtocolError:
        pass


# ------------------------------------------------------------------------------------------------ misuse


@pytest.mark.parametrize(
    ("frame_type", "body"),
    [
        (FrameType.METADATA, "not bytes"),
        (FrameType.FORWARD, bytearray(b"x")),
        (FrameType.CONTROL, [1]),
        (FrameType.REACHABILITY, ["a", 2]),
        (FrameType.HEARTBEAT, b""),
        (FrameType.BYE, None),
        (FrameType.CONTROL, {"x": object()}),  # not msgpack-able
        (42, None),
    ],
)
def test_encode_refuses_bodies_that_do_not_fit(frame_type: Any, body: Any) -> None:
    with pytest.raises(ClusterUsageError):
        encode_frame(frame_type, body)


def test_max_frame_size_must_be_positive() -> None:
    with pytest.raises(ClusterUsageError):
        FrameDecoder(0)


# ------------------------------------------------------------------------------------------------ before the handshake


def test_the_largest_handshake_frames_fit_the_pre_authentication_limit() -> None:
    """Measured, not assumed: a HELLO with the longest name, listen host, nonce and intent the handshake accepts,
    and a refusing BYE with its MAC, are far below HANDSHAKE_FRAME_MAX."""
    from vmqpy.cluster.framing import HANDSHAKE_FRAME_MAX
    from vmqpy.cluster.handshake import INTENT_MAX, NAME_MAX, NONCE_MAX, Handshake

    hello = Handshake("n" * NAME_MAX, (1 << 64) - 1, "c" * 64, b"x" * NONCE_MAX, "p" * NAME_MAX,
                      listen=("h" * NAME_MAX, 65535), intent="j" * INTENT_MAX).start()
    bye = encode_frame(FrameType.BYE, {"reason": "r" * 200, "mac": b"m" * 32})
    response = encode_frame(FrameType.CHALLENGE_RESPONSE, b"m" * 32)
    largest = max(len(hello), len(bye), len(response))
    assert largest < 1024 < HANDSHAKE_FRAME_MAX


def test_a_frame_larger_than_a_handshake_frame_is_refused_until_authenticated() -> None:
    from vmqpy.cluster.frame_auth import FrameOpener
    from vmqpy.cluster.framing import HANDSHAKE_FRAME_MAX

    decoder = FrameDecoder(64 << 20)
    decoder.receive_data(struct.pack(">I", HANDSHAKE_FRAME_MAX + 1))  # under the frame limit: 64 MiB
    with pytest.raises(FrameTooLarge, match="before the link is authenticated"):
        decoder.next_frame()
    assert decoder.buffered() == 0  # nothing of it is kept
    authenticated = FrameDecoder(64 << 20)
    authenticated.authenticate(FrameOpener(b"k" * 32))
    authenticated.receive_data(struct.pack(">I", HANDSHAKE_FRAME_MAX + 1))
    assert authenticated.next_frame() is NEED_DATA  # the full limit once authenticated
