"""Property tests: decode(encode(p)) == p for generated valid packets, and incremental decoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.mqtt import strategies as mst
from tests.unit.mqtt.helpers import client, decode_all, decode_one, server
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.decoder import LongSubscribe
from vmqpy.mqtt.errors import MalformedPacket
from vmqpy.mqtt.packets import Connect, Packet, Pingreq, Publish, Subscribe, Subscription

FEW = settings(max_examples=60, deadline=None)
MANY = settings(max_examples=150, deadline=None)


@MANY
@given(st.data(), mst.levels)
def test_connect_roundtrip(data: st.DataObject, level: int) -> None:
    packet = data.draw(mst.connects(level))
    decoder = server()
    assert decode_one(decoder, encode(packet, level)) == packet
    assert decoder.protocol_level == level


@MANY
@given(st.data(), mst.levels)
def test_client_packet_roundtrip(data: st.DataObject, level: int) -> None:
    packet = data.draw(mst.client_packets(level))
    assert decode_one(server(level), encode(packet, level)) == packet


@MANY
@given(st.data(), mst.levels)
def test_server_packet_roundtrip(data: st.DataObject, level: int) -> None:
    packet = data.draw(mst.server_packets(level))
    assert decode_one(client(level), encode(packet, level)) == packet


@FEW
@given(st.data(), mst.levels)
def test_encode_is_canonical(data: st.DataObject, level: int) -> None:
    """Re-encoding a decoded packet gives the same bytes (no information is invented or lost)."""
    packet = data.draw(mst.server_packets(level))
    wire = encode(packet, level)
    assert encode(decode_one(client(level), wire), level) == wire


def _split(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(wire) + 1) for c in cuts})
    chunks = []
    last = 0
    for p in [*points, len(wire)]:
        chunks.append(wire[last:p])
        last = p
    return chunks


def _decode_chunks(decoder: Decoder, chunks: list[bytes]) -> list[Packet]:
    out: list[Packet] = []
    for chunk in chunks:
        out += decode_all(decoder, chunk)
    return out


@FEW
@given(st.data(), mst.levels, st.lists(st.integers(0, 10_000), max_size=30))
def test_incremental_client_stream(data: st.DataObject, level: int, cuts: list[int]) -> None:
    connect = data.draw(mst.connects(level))
    packets: list[Packet] = [connect, *data.draw(st.lists(mst.client_packets(level), max_size=8))]
    wire = b"".join(encode(p, level) for p in packets)
    decoder = server()
    assert _decode_chunks(decoder, _split(wire, cuts)) == packets
    assert decoder.next_packet() is NEED_DATA


@FEW
@given(st.data(), mst.levels, st.lists(st.integers(0, 10_000), max_size=30))
def test_incremental_server_stream(data: st.DataObject, level: int, cuts: list[int]) -> None:
    packets = data.draw(st.lists(mst.server_packets(level), min_size=1, max_size=8))
    wire = b"".join(encode(p, level) for p in packets)
    assert _decode_chunks(client(level), _split(wire, cuts)) == packets


@FEW
@given(st.data(), mst.levels, st.lists(st.integers(0, 10_000), max_size=30), st.sampled_from([1, 2, 3, 1000]))
def test_several_receives_between_drains(data: st.DataObject, level: int, cuts: list[int], every: int) -> None:
    """Callers may feed several chunks before draining (every=1000: a single drain at the end). NEED_DATA must
    mean that no complete packet is left, whichever chunks it straddles."""
    packets: list[Packet] = [data.draw(mst.connects(level)),
                             *data.draw(st.lists(mst.client_packets(level), max_size=8))]
    wire = b"".join(encode(p, level) for p in packets)
    decoder = server()
    out: list[Packet] = []
    for n, chunk in enumerate(_split(wire, cuts)):
        decoder.receive_data(chunk)
        if (n + 1) % every == 0:
            out += decode_all(decoder, b"", buffered=len(wire))
    out += decode_all(decoder, b"", buffered=len(wire))
    assert out == packets


@settings(max_examples=25, deadline=None)
@given(st.data(), mst.levels)
def test_one_byte_at_a_time(data: st.DataObject, level: int) -> None:
    packets: list[Packet] = [data.draw(mst.connects(level)),
                             *data.draw(st.lists(mst.client_packets(level), min_size=1, max_size=5))]
    wire = b"".join(encode(p, level) for p in packets)
    decoder = server()
    out: list[Packet] = []
    for i in range(len(wire)):
        out += decode_all(decoder, wire[i : i + 1])
    assert out == packets


def test_large_packets_split_and_compaction() -> None:
    """Packets above the 64 KiB body and buffer-compaction thresholds, fed in uneven chunks."""
    level = 5
    packets: list[Packet] = [Connect("big", level)]
    packets += [Publish(f"t/{i}", bytes([i]) * (70_000 + i * 1000), qos=1, packet_id=i + 1) for i in range(5)]
    packets += [Publish("small", b"x")] * 3
    wire = b"".join(encode(p, level) for p in packets)
    decoder = server()
    out: list[Packet] = []
    step = 33_333
    for i in range(0, len(wire), step):
        out += decode_all(decoder, wire[i : i + step])
    assert out == packets
    assert isinstance(out[0], Connect)


def test_empty_receive_is_noop() -> None:
    decoder = server(4)
    decoder.receive_data(b"")
    assert decoder.next_packet() is NEED_DATA
    decoder.receive_data(b"\xc0")
    decoder.receive_data(b"")
    assert decoder.next_packet() is NEED_DATA
    decoder.receive_data(b"\x00")
    assert decode_all(decoder, b"") == [Pingreq()]


@MANY
@given(st.data(), mst.levels, st.integers(min_value=1, max_value=5))
def test_a_long_subscribe_decoded_in_slices_is_the_subscribe_decoded_whole(data: st.DataObject, level: int,
                                                                           most: int) -> None:
    """A decoder with `long_subscribe` returns a SUBSCRIBE whose filters take more bytes as a LongSubscribe;
    decoding its filters `most` at a time ends with the packet a whole decode gives
    (vmqpy.broker.driver.subscribe_slices
    decodes a slice a loop turn)."""
    packet = data.draw(mst.subscribes(level))
    whole = decode_one(server(level), encode(packet, level))
    decoder = server(level)
    decoder.long_subscribe = 1
    decoder.receive_data(encode(packet, level))
    long = decoder.next_packet()
    assert isinstance(long, LongSubscribe)
    slices = 0
    while not long.done:
        assert long.decode(most) <= most
        slices += 1
    assert slices == -(-len(packet.subscriptions) // most)
    assert long.packet() == whole == packet


def test_a_malformed_filter_of_a_long_subscribe_is_found_by_the_slice_that_reaches_it() -> None:
    good = encode(Subscribe(1, [Subscription(f"f/{i}") for i in range(100)]), 5)
    bad = bytearray(good)
    bad[-1] = 0xC0  # the last filter's options: reserved bits set
    decoder = server(5)
    decoder.long_subscribe = 16
    decoder.receive_data(bytes(bad))
    long = decoder.next_packet()
    assert isinstance(long, LongSubscribe)
    assert long.decode(60) == 60 and not long.done
    with pytest.raises(MalformedPacket):
        long.decode(60)
