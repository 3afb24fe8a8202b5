"""The fleet benchmarks' raw MQTT client (bench/mqtt_raw.py) and argument parsing (bench/bench_sessions_memory.py):
the packets it writes decode with the project's codec, and the framing of what it reads survives any split."""

from __future__ import annotations

import argparse
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bench_sessions_memory import parse_size
from bench.bench_storm import suite_rows
from bench.mqtt_raw import connect_packet, publish_packet, split_packets, subscribe_packet
from vmqpy.mqtt.codec import NEED_DATA, Decoder
from vmqpy.mqtt.packets import Connect, Publish, Subscribe


def decode(data: bytes) -> list[object]:
    """What a broker's decoder makes of `data` (the first packet must be the CONNECT)."""
    decoder = Decoder(server=True)
    decoder.receive_data(data)
    out: list[object] = []
    for _ in range(100):
        packet = decoder.next_packet()
        if packet is NEED_DATA:
            return out
        out.append(packet)
    raise AssertionError("more packets than written")


def decode_one(data: bytes) -> object:
    packets = decode(data)
    assert len(packets) == 1
    return packets[0]


@pytest.mark.parametrize("clean", [True, False])
def test_connect_packet_decodes(clean: bool) -> None:
    packet = decode_one(connect_packet("device-7", clean, keep_alive=600))
    assert isinstance(packet, Connect)
    assert packet.client_id == "device-7" and packet.clean_start is clean and packet.keep_alive == 600


def test_subscribe_and_publish_packets_decode() -> None:
    _connect, sub, pub = decode(connect_packet("c", True) + subscribe_packet(3, "storm/1", 1)
                                + publish_packet("storm/1", b"m0", 9))
    assert isinstance(sub, Subscribe) and sub.packet_id == 3 and sub.subscriptions[0].topic_filter == "storm/1"
    assert isinstance(pub, Publish) and (pub.topic, pub.payload, pub.qos, pub.packet_id) == ("storm/1", b"m0", 1, 9)


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 300_000])
def test_split_packets_reads_every_remaining_length(size: int) -> None:
    packet = publish_packet("t", b"x" * size, 1)
    buffer = bytearray(packet + packet[:3])
    assert split_packets(buffer) == [(0x32, packet[2 if size < 120 else 3 if size < 16_370 else 4:])]
    assert buffer == bytearray(packet[:3]), "a partial packet stays for the next read"


def test_a_malformed_remaining_length_is_an_error() -> None:
    with pytest.raises(ValueError):
        split_packets(bytearray(b"\x30\xff\xff\xff\xff\x01"))


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(0, 4000), max_size=6))
def test_split_packets_reassembles_any_split(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(publish_packet("a/b", p, i + 1) for i, p in enumerate(payloads))
    buffer, got = bytearray(), []
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for start, end in itertools.pairwise(points):
        buffer += stream[start:end]
        got += split_packets(buffer)
    assert not buffer
    assert [body[5 + 2:] for _first, body in got] == payloads


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("10k", 10_000), ("50K", 50_000), (" 200 ", 200)])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "k", "ten", "0", "-5", "1.5k"])
def test_parse_size_refuses_bad_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_suite_rows_take_the_medians_of_the_rounds() -> None:
    result = {
        "args": {"clients": "100"},
        "persistent": {"vmqpy": [{"new_per_s": 10.0, "new_us_cpu": 300.0, "resume_per_s": 8.0, "resume_us_cpu": 350.0},
                                 {"new_per_s": 30.0, "new_us_cpu": 100.0, "resume_per_s": 9.0, "resume_us_cpu": 360.0},
                                 {"new_per_s": 20.0, "new_us_cpu": 200.0, "resume_per_s": 7.0, "resume_us_cpu": 340.0}],
                       "mosquitto": []},
        "storm": {"vmqpy": [{"all_connected_s": 1.0, "all_delivered_s": 1.5, "connect_p50_ms": 5.0,
                             "connect_p99_ms": 9.0, "cpu_s": 0.5, "messages": 300, "rss_kib": 2048}]},
    }
    persistent, storm = suite_rows(result)
    assert (persistent["broker"], persistent["rate"], persistent["cpu_us"]) == ("vmqpy", 20.0, 200.0)
    assert persistent["note"] == "resumed 8/s, 350 us CPU"
    assert storm["scenario"] == "reconnect storm (100 clients)"
    assert storm["cpu_us"] == pytest.approx(5000.0) and storm["p99_ms"] == 9.0 and storm["rss"] == "peak 2 MiB"
