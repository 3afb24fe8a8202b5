"""The load generator of bench/: its wire format, its loss and latency accounting.

The short real run against a node is tests/integration/test_bench_loadgen.py.
"""

from __future__ import annotations

import array
import asyncio
from typing import Any

import pytest

from bench import loadgen
from tests.unit.transports import FakeTransport
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Puback, Publish


def decode_all(data: bytes, server: bool) -> list[Any]:
    dec = Decoder(server=server, protocol_level=4)
    dec.receive_data(data)
    out = []
    for _ in range(100_000):
        p = dec.next_packet()
        if p is NEED_DATA:
            break
        out.append(p)
    return out


# ------------------------------------------------------------------------------------------------ wire format


def test_built_frames_are_valid_publishes_for_the_codec() -> None:
    prefix = loadgen.publish_prefix("bench/t/0", 0)
    data = loadgen.build_qos0(prefix, 7, 100, 3, 123_456_789)
    packets = decode_all(data, server=True)
    assert [type(p) for p in packets] == [Publish] * 3
    for k, p in enumerate(packets):
        assert (p.topic, p.qos, len(p.payload)) == ("bench/t/0", 0, loadgen.PAYLOAD_SIZE)
        assert loadgen.HEADER.unpack_from(p.payload) == (7, 100 + k, 123_456_789)


def test_long_topic_needs_a_two_byte_remaining_length() -> None:
    topic = "bench/" + "x" * 200
    prefix = loadgen.publish_prefix(topic, 1)
    assert prefix[1] & 0x80  # the remaining length takes two bytes
    [p] = decode_all(prefix + b"\x00\x05" + loadgen.payload(1, 2, 3), server=True)
    assert (p.topic, p.qos, p.packet_id) == (topic, 1, 5)


@pytest.mark.parametrize("topic", ["", "a/+", "a/#"])
def test_bad_topics_are_refused(topic: str) -> None:
    with pytest.raises(ValueError):
        loadgen.publish_prefix(topic, 0)


# ------------------------------------------------------------------------------------------------ accounting


def test_acked_not_delivered_counts_exactly_the_missing_acked_ones() -> None:
    acked = bytearray(10)
    delivered = bytearray(6)  # shorter: seqs 6..9 never arrived
    for s in (0, 1, 2, 3, 5, 7, 9):
        acked[s] = 1
    for s in (0, 2, 3, 4, 5):
        delivered[s] = 1
    # acked and missing: 1, 7, 9 (4 was delivered but never acked: not a loss of an acked message)
    assert loadgen.acked_not_delivered(acked, delivered) == 3
    assert loadgen.acked_not_delivered(acked, bytes(20)) == 7
    assert loadgen.acked_not_delivered(b"", delivered) == 0


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))
    assert loadgen.percentile(values, 50) == 50
    assert loadgen.percentile(values, 99) == 99
    assert loadgen.percentile(values, 100) == 100
    assert loadgen.percentile([5], 99) == 5
    assert loadgen.percentile([], 50) is None


def test_summarize_on_a_handcrafted_run() -> None:
    acked = bytearray(8)
    for s in range(6):  # 0..5 acked, 6 and 7 sent and never acked
        acked[s] = 1
    pub0 = loadgen.PubResult(pub_id=0, qos=1, sent=8, acked=6, acked_map=bytes(acked), unacked=2)
    pub1 = loadgen.PubResult(pub_id=1, qos=1, sent=3, acked=3, acked_map=b"\x01\x01\x01")
    seen0 = bytearray(8)
    for s in (0, 1, 2, 4, 6):  # 3 and 5 acked and lost; 7 lost and never acked; 6 arrived unacked
        seen0[s] = 1
    lat = array.array("q", [1_000_000, 2_000_000, 3_000_000, 4_000_000])
    sub0 = loadgen.SubResult(sub_id=0, sources=[0], delivered=6, in_window=4, dups=1, seen={0: bytes(seen0)},
                             latencies=lat.tobytes())
    sub1 = loadgen.SubResult(sub_id=1, sources=[1], delivered=3, in_window=3, seen={1: b"\x01\x01\x01"})
    r = loadgen.summarize("t", 1, 2.0, [pub0, pub1], [sub0, sub1], sent_in_window=10)
    assert (r.sent, r.acked, r.unacked) == (11, 9, 2)
    assert (r.expected, r.unique_delivered, r.lost, r.acked_lost, r.dups) == (11, 8, 3, 2, 1)
    assert (r.delivered_in_window, r.delivered_total) == (7, 9)
    assert r.rate == 3.5 and r.sent_rate == 5.0
    assert (r.p50_ms, r.p99_ms, r.latency_samples) == (2.0, 4.0, 4)
    assert r.errors == []


def test_summarize_qos0_counts_loss_but_no_acked_loss() -> None:
    pub = loadgen.PubResult(pub_id=0, qos=0, sent=5)
    sub = loadgen.SubResult(sub_id=0, sources=[0], delivered=3, in_window=3, seen={0: b"\x01\x00\x01\x01"})
    r = loadgen.summarize("t", 0, 1.0, [pub], [sub])
    assert (r.lost, r.acked_lost, r.p50_ms) == (2, 0, None)


# ------------------------------------------------------------------------------------------------ clients


async def test_subscriber_accounts_every_split_of_the_stream() -> None:
    """Frames from the codec, fed in every 1..n-byte split: same deliveries, duplicates, PUBACKs, latencies."""
    frames = []
    for seq in (0, 1, 2, 1, 5):  # seq 1 twice (a duplicate), 3 and 4 missing
        frames.append(encode(Publish("bench/x", loadgen.payload(3, seq, 1_000), qos=1, packet_id=seq + 10), 4))
    frames.append(encode(Publish("bench/" + "y" * 150, loadgen.payload(4, 0, 1_000), qos=0), 4))  # 2-byte length
    frames.append(encode(Publish("bench/x", b"not ours", qos=0), 4))
    stream = b"".join(frames)
    for step in (1, 2, 3, 7, 64, len(stream)):
        sub = loadgen.Subscriber(0, "bench/#", 1, [3, 4])
        fake = FakeTransport()
        sub.connection_made(fake)
        sub.w0, sub.w1 = 0, 1 << 62  # everything is in the window
        for i in range(0, len(stream), step):
            sub.data_received(stream[i : i + step])
        assert sub._buf == b""
        assert (sub.delivered, sub.in_window, sub.dups, sub.malformed) == (7, 7, 1, 1)
        assert bytes(sub.seen[3][:6]) == b"\x01\x01\x01\x00\x00\x01"
        assert sub.seen[4][0] == 1
        assert sub.next_seq[3] == 6 and sub.next_seq[4] == 1
        assert len(sub.latencies) == 6 and min(sub.latencies) > 0
        acks = decode_all(bytes(fake.written), server=True)
        assert acks == [Puback(seq + 10) for seq in (0, 1, 2, 1, 5)]
        assert sub.complete({3: 6, 4: 1}) is False  # 3 and 4 of source 3 never came
        assert sub.complete({3: 3, 4: 1}) is True


async def test_publisher_window_and_acks() -> None:
    pub = loadgen.Publisher(2, "bench/p", 1, window=4)
    fake = FakeTransport()
    pub.connection_made(fake)
    pub.start_window()
    sent = decode_all(bytes(fake.written), server=True)
    assert [loadgen.HEADER.unpack_from(p.payload)[:2] for p in sent] == [(2, 0), (2, 1), (2, 2), (2, 3)]
    assert pub.outstanding == 4
    ids = [p.packet_id for p in sent]
    # PUBACK for two of them, one unknown id, split mid-packet: two more are sent to refill the window
    data = encode(Puback(ids[1]), 4) + encode(Puback(ids[0]), 4) + encode(Puback(999), 4)
    fake.written.clear()
    pub.data_received(data[:3])
    pub.data_received(data[3:])
    assert (pub.acked, pub.outstanding, pub.unexpected_acks, pub.sent) == (2, 4, 1, 6)
    more = decode_all(bytes(fake.written), server=True)
    assert [loadgen.HEADER.unpack_from(p.payload)[1] for p in more] == [4, 5]
    assert len({p.packet_id for p in [*sent, *more]}) == 6  # no identifier in flight is reused
    pub.stop()
    assert not pub.idle.done()
    pub.data_received(b"".join(encode(Puback(p.packet_id), 4) for p in [sent[2], sent[3], *more]))
    assert pub.idle.done() and pub.outstanding == 0 and pub.sent == 6
    assert bytes(pub.result().acked_map) == b"\x01" * 6


async def test_qos0_publisher_waits_for_its_window() -> None:
    fb = [0]
    pub = loadgen.Publisher(0, "bench/q", 0, window=64, batch=32, feedback=fb)
    fake = FakeTransport()
    pub.connection_made(fake)
    pub.w0 = 0
    task = asyncio.ensure_future(pub.flood(loadgen.monotonic_ns() + 200_000_000))
    await asyncio.sleep(0.05)
    assert pub.sent == 64  # nothing received: the window is full
    fb[0] = 32  # the subscriber got 0..31
    await asyncio.sleep(0.05)
    assert pub.sent == 96
    await task
    assert len(decode_all(bytes(fake.written), server=True)) == pub.sent


async def test_qos0_publisher_with_several_subscribers_follows_the_slowest() -> None:
    """A fan-out's publisher reads one feedback slot per subscriber; its window counts from the lowest."""
    fb = [0, 0, 0]
    pub = loadgen.Publisher(0, "bench/f", 0, window=64, batch=32, feedback=fb, slots=[0, 1, 2])
    fake = FakeTransport()
    pub.connection_made(fake)
    pub.w0 = 0
    task = asyncio.ensure_future(pub.flood(loadgen.monotonic_ns() + 200_000_000))
    await asyncio.sleep(0.05)
    assert pub.sent == 64
    fb[0] = fb[1] = 64  # two subscribers got everything, the third nothing: the window stays full
    await asyncio.sleep(0.05)
    assert pub.sent == 64
    fb[2] = 32
    await asyncio.sleep(0.05)
    assert pub.sent == 96
    await task


async def test_subscriber_with_a_slot_reports_there() -> None:
    fb = [0, 0, 0]
    sub = loadgen.Subscriber(2, "bench/f", 0, [0], feedback=fb, slot=2)
    sub.connection_made(FakeTransport())
    sub.data_received(b"".join(encode(Publish("bench/f", loadgen.payload(0, seq, 1_000), qos=0), 4)
                               for seq in range(5)))
    assert fb == [0, 0, 5]
    with pytest.raises(ValueError):
        loadgen.Subscriber(0, "bench/#", 0, [0, 1], feedback=fb, slot=1)


# ------------------------------------------------------------------------------------------------ scenarios


@pytest.mark.parametrize("procs", [1, 2, 3])
def test_fanout_plan_one_publisher_every_subscriber_on_its_topic(procs: int) -> None:
    sc = loadgen.Scenario("qos1-fanout10", "fanout", 10, 1)
    assert sc.copies == 10
    plan = sc.plan("bench/t", procs, rate=5_000.0)
    pubs = [p for ps, _ in plan for p in ps]
    subs = [s for _, ss in plan for s in ss]
    assert len(plan) == min(procs, 10) and plan[0][0] == pubs
    (pub,) = pubs
    assert pub["slots"] == list(range(10)) and pub["publishers"] == 1
    assert pub["rate"] == 500.0  # 5,000 deliveries per s are 500 publishes to 10 subscribers
    assert sorted(s["slot"] for s in subs) == list(range(10))
    assert all(s["filter"] == pub["topic"] and s["sources"] == [0] for s in subs)
    assert len({s["client_id"] for s in subs} | {pub["client_id"]}) == 11


def test_pairs_and_fanin_publish_at_the_delivered_rate() -> None:
    for shape in ("pairs", "fanin"):
        sc = loadgen.Scenario(f"qos0-{shape}4", shape, 4, 0)
        assert sc.copies == 1
        pubs = [p for ps, _ in sc.plan("bench/t", 2, rate=400.0) for p in ps]
        assert len(pubs) == 4 and all(p["rate"] == 400.0 and p["publishers"] == 4 for p in pubs)
    assert [s.name for s in loadgen.default_scenarios()] == [
        "qos0-pairs10", "qos1-pairs10", "qos0-fanout10", "qos1-fanout10", "qos0-fanin10", "qos1-fanin10"]
