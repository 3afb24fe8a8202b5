"""bench.curves_common: sizes, fitting, percentiles and the MQTT frames of the cost-curve benches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bench_retained import WILDCARD, topic_of
from bench.bench_subscriptions import PROBE_TOPIC, filters_of
from bench.curves_common import (
    connect_frame,
    parse_publish,
    parse_sizes,
    percentile,
    publish_frame,
    slope,
    subscribe_frame,
)


def remaining_length(frame: bytes) -> tuple[int, int]:
    """(remaining length, header size) of an MQTT frame."""
    value, shift = 0, 0
    for i, byte in enumerate(frame[1:5], start=1):
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i + 1
    raise AssertionError("remaining length longer than 4 bytes")


@pytest.mark.parametrize(("text", "sizes"), [
    ("1000", [1000]), ("1k,10k,100k,1M", [1000, 10_000, 100_000, 1_000_000]), (" 5 , 2K ", [5, 2000]),
])
def test_parse_sizes(text: str, sizes: list[int]) -> None:
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "0", "-5", "1x", "k", "10k,1k", "1.5k"])
def test_parse_sizes_refuses_bad_input(text: str) -> None:
    with pytest.raises(ValueError):
        parse_sizes(text)


def test_slope_and_percentile() -> None:
    assert slope([1, 2, 3], [2, 4, 6]) == pytest.approx(2.0)
    assert slope([1, 10, 100], [5, 5, 5]) == pytest.approx(0.0)
    assert slope([1], [1]) is None and slope([2, 2], [1, 3]) is None
    assert percentile([], 99) is None
    assert percentile(list(range(1, 101)), 50) == 51 and percentile(list(range(1, 101)), 99) == 99
    assert percentile([7.0], 99) == 7.0


@given(st.binary(max_size=20_000), st.integers(0, 2), st.booleans())
def test_publish_frames_carry_their_length_and_parse_back(payload: bytes, qos: int, retain: bool) -> None:
    frame = publish_frame("a/b", payload, qos=qos, retain=retain, packet_id=7 if qos else 0)
    length, header = remaining_length(frame)
    assert len(frame) == header + length
    assert frame[0] == 0x30 | qos << 1 | int(retain)
    assert parse_publish(frame[0], frame[header:]) == ("a/b", 7 if qos else 0, payload)


def test_connect_and_subscribe_frames() -> None:
    assert connect_frame("c", clean=False, keepalive=60) == b"\x10\x0d\x00\x04MQTT\x04\x00\x00\x3c\x00\x01c"
    assert connect_frame("c", clean=True)[9] == 0x02
    assert publish_frame("t", b"x", qos=1, retain=True, packet_id=3, dup=True) == b"\x3b\x06\x00\x01t\x00\x03x"
    assert subscribe_frame(1, ["a/+", "b"], 1) == b"\x82\x0c\x00\x01\x00\x03a/+\x01\x00\x01b\x01"


def _matches(flt: str, topic: str) -> bool:
    f, t = flt.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


@pytest.mark.parametrize("i", [0, 1, 99, 12_345, 99_999])
def test_no_persistent_filter_matches_the_probe_topic(i: int) -> None:
    filters = filters_of(i)
    assert len(set(filters)) == 10 and sum("+" in f or "#" in f for f in filters) == 8
    assert not any(_matches(f, PROBE_TOPIC) for f in filters)


def test_the_wildcard_matches_the_first_hundred_thousand_retained_topics() -> None:
    assert [_matches(WILDCARD, topic_of(i)) for i in (0, 99_999, 100_000, 999_999)] == [True, True, False, False]
    assert len({topic_of(i) for i in range(5000)}) == 5000
