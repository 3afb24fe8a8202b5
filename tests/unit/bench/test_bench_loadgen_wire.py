"""The load generator's frame splitter (`bench.loadgen.wire.split_frames`), against frames from vmqpy's codec."""

from __future__ import annotations

import pytest

from bench.loadgen.wire import ClientError, split_frames
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connack, Pingresp, Puback, Publish, Suback

FRAMES = [
    encode(Connack(False, 0), 4),
    encode(Suback(1, [1]), 4),
    encode(Publish("bench/x", b"p" * 64, qos=1, packet_id=7), 4),  # remaining length in one byte
    encode(Publish("bench/" + "y" * 150, b"q" * 64, qos=0), 4),  # in two bytes
    encode(Publish("bench/" + "z" * 20_000, b"", qos=0), 4),  # in three bytes
    encode(Puback(513), 4),
    encode(Pingresp(), 4),  # no body
]
STREAM = b"".join(FRAMES)


def triples(frames: list[int]) -> list[tuple[int, int, int]]:
    it = iter(frames)
    return list(zip(it, it, it, strict=True))


def header_size(frame: bytes) -> int:
    """First byte and remaining length: 2 to 5 bytes."""
    return 2 + next(k for k in range(4) if frame[1 + k] < 0x80)


def expected_upto(limit: int) -> tuple[list[tuple[int, int, int]], int]:
    """The frames of STREAM that end at or before `limit`: (first byte, body start, end), and where they end."""
    out = []
    start = 0
    for frame in FRAMES:
        end = start + len(frame)
        if end > limit:
            break
        out.append((frame[0], start + header_size(frame), end))
        start = end
    return out, start


def test_the_whole_stream_splits_into_its_frames() -> None:
    frames, used = split_frames(STREAM)
    assert used == len(STREAM)
    assert [first for first, _, _ in triples(frames)] == [0x20, 0x90, 0x32, 0x30, 0x30, 0x40, 0xD0]
    assert [header_size(f) for f in FRAMES] == [2, 2, 2, 3, 4, 2, 2]
    assert [STREAM[h:end] for _, h, end in triples(frames)] == [f[header_size(f):] for f in FRAMES]


def test_every_prefix_yields_exactly_its_complete_frames() -> None:
    for limit in range(len(STREAM) + 1):
        frames, used = split_frames(STREAM[:limit])
        assert (triples(frames), used) == expected_upto(limit), limit


def test_an_incomplete_header_waits() -> None:
    assert split_frames(b"\x30") == ([], 0)
    assert split_frames(b"\x30\x80") == ([], 0)  # the remaining length goes on in the next byte
    assert split_frames(b"\x40\x02\x00\x01\x30\x80\x80") == ([0x40, 2, 4], 4)


def test_a_remaining_length_of_five_bytes_is_refused() -> None:
    with pytest.raises(ClientError, match="malformed remaining length"):
        split_frames(b"\x30\xff\xff\xff\xff\x01")
