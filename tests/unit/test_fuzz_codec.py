"""The codec fuzzing harness (bench/fuzz_cases.py, bench/fuzz_codec.py), a short run of it, and properties of the
codec under hostile input: valid packets of every type (hypothesis strategies), mutated, never raise anything
but the codec's protocol errors, and the errors carry the reason codes docs/mqtt-codec.md prescribes."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import fuzz_cases, fuzz_codec
from bench.fuzz_cases import BAD_TEXT, MARK, MAX_CASE_BYTES, MUTATORS, SEEDS, Case, Seed, case_rng, make_case
from bench.fuzz_codec import decoder_for, drain, fuzz, run_case
from tests.unit.mqtt import strategies as mst
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.codec import Decoder, encode
from vmqpy.mqtt.errors import MalformedPacket, PacketTooLarge, ProtocolViolation, RemoteProtocolError
from vmqpy.mqtt.packets import Packet, PacketType, Publish
from vmqpy.mqtt.wire import MAX_REMAINING_LENGTH, encode_str, encode_vbi

EXAMPLES = settings(max_examples=300)


def _seed_of(packet: Packet, level: int, to_server: bool) -> Seed:
    return Seed(f"hyp-{type(packet).__name__}", level, to_server, encode(packet, level), None)


def test_seeds_cover_every_packet_type_at_every_level() -> None:
    for level in (3, 4, 5):
        types = {s.wire[0] >> 4 for s in SEEDS if s.level == level}
        expected = set(range(1, 15)) | ({15} if level == 5 else set())
        assert types == expected, f"level {level}: missing {expected - types}"


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
def test_every_seed_is_a_valid_packet_in_its_context(seed: Seed) -> None:
    [packet] = drain(decoder_for(seed, 268_435_460), (seed.wire,))
    assert encode(packet, seed.level) == seed.wire


@pytest.mark.parametrize("seed", [s for s in SEEDS if s.props_at is not None], ids=lambda s: s.name)
def test_props_at_points_at_the_property_length(seed: Seed) -> None:
    """rebuild_properties relies on it: a property list of 0 there gives the packet without properties."""
    assert seed.props_at is not None
    at = seed.props_at
    length, after = fuzz_cases._read_vbi(seed.wire, at) or (0, 0)
    assert length > 0
    first, body = fuzz_cases.split(seed.wire)
    header = len(seed.wire) - len(body)
    stripped = fuzz_cases.reframe(first, body[: at - header] + b"\x00" + seed.wire[after + length:])
    [packet] = drain(decoder_for(seed, 268_435_460), (stripped,))
    assert packet.properties.is_empty()  # type: ignore[union-attr]


@pytest.mark.parametrize("name", [n for n, _ in MUTATORS])
def test_each_mutator_is_deterministic_and_bounded(name: str) -> None:
    mutator = dict(MUTATORS)[name]
    for i, seed in enumerate(SEEDS):
        first = mutator(random.Random(i), seed, seed.wire)
        assert first == mutator(random.Random(i), seed, seed.wire)
        assert isinstance(first, bytes) and len(first) <= MAX_CASE_BYTES + len(seed.wire)


def test_cases_are_replayed_from_run_seed_and_index() -> None:
    a = make_case(case_rng(7, 1234))
    b = make_case(case_rng(7, 1234))
    assert (a.seed, a.wire, a.chunks, a.max_packet_size) == (b.seed, b.wire, b.chunks, b.max_packet_size)
    assert b"".join(a.chunks) == a.wire and len(a.wire) <= MAX_CASE_BYTES
    assert make_case(case_rng(8, 1234)).wire != a.wire or make_case(case_rng(7, 1235)).wire != a.wire


# -- the harness finds what it is for ----------------------------------------------------------------------------
def test_short_run_finds_no_crash_and_no_hang() -> None:
    report = fuzz(3000, 20261126, progress=False)
    assert report.cases == 3000
    assert report.crashes == [] and report.hangs == [] and report.asymmetry_count == 0, report.text()
    assert report.outcomes["MalformedPacket"] > 0 and report.outcomes["accepted"] > 0


def test_a_crash_in_the_codec_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Decoder.next_packet

    def broken(self: Decoder) -> Any:
        packet = real(self)
        if isinstance(packet, Publish):
            raise KeyError("a bug")
        return packet

    monkeypatch.setattr(Decoder, "next_packet", broken)
    report = fuzz(500, 3, progress=False)
    assert report.crashes and "KeyError" in report.crashes[0].what


def test_a_slow_case_is_reported_as_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz_codec.run_case

    def slow(case: Case) -> fuzz_codec.Outcome:
        time.sleep(0.03)
        return real(case)

    monkeypatch.setattr(fuzz_codec, "run_case", slow)
    report = fuzz(3, 4, hang_seconds=0.01, progress=False)
    assert len(report.hangs) == 3


def test_a_case_that_never_ends_is_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    def forever(case: Case) -> fuzz_codec.Outcome:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # bounded, but far past the alarm
            pass
        raise AssertionError("the alarm did not ring")

    monkeypatch.setattr(fuzz_codec, "run_case", forever)
    report = fuzz(1, 5, hang_seconds=0.02, progress=False)
    assert len(report.hangs) == 1 and report.crashes == []


# -- hypothesis: structured packets, mutated ---------------------------------------------------------------------
@EXAMPLES
@given(st.data(), mst.levels, st.randoms(use_true_random=False))
def test_mutated_client_packets_raise_only_protocol_errors(data: st.DataObject, level: int,
                                                           rng: random.Random) -> None:
    packet = data.draw(st.one_of(mst.client_packets(level), mst.connects(level)))
    seed = _seed_of(packet, level, to_server=True)
    wire, names = fuzz_cases.mutate(rng, seed)
    case = Case(seed, wire, fuzz_cases.chunked(rng, wire), rng.choice((268_435_460, 64)), names)
    outcome = run_case(case)  # raises on a crash
    assert outcome.asymmetry is None, outcome.asymmetry


@EXAMPLES
@given(st.data(), mst.levels, st.randoms(use_true_random=False))
def test_mutated_server_packets_raise_only_protocol_errors(data: st.DataObject, level: int,
                                                           rng: random.Random) -> None:
    if level == 3:
        level = 4  # a 3.1 client decoder reads like 3.1.1 here
    packet = data.draw(mst.server_packets(level))
    seed = _seed_of(packet, level, to_server=False)
    wire, names = fuzz_cases.mutate(rng, seed)
    outcome = run_case(Case(seed, wire, fuzz_cases.chunked(rng, wire), 268_435_460, names))
    assert outcome.asymmetry is None, outcome.asymmetry


@settings(max_examples=500)
@given(st.randoms(use_true_random=False))
def test_generated_cases_raise_only_protocol_errors(rng: random.Random) -> None:
    run_case(make_case(rng))


@EXAMPLES
@given(st.data(), mst.levels, st.integers(0, 4000))
def test_every_prefix_of_a_valid_packet_waits_for_more(data: st.DataObject, level: int, cut: int) -> None:
    packet = data.draw(mst.client_packets(level))
    wire = encode(packet, level)
    prefix = wire[: cut % len(wire)]
    assert drain(Decoder(server=True, protocol_level=level), (prefix,)) == []


# -- reason codes of hostile input -------------------------------------------------------------------------------
_MULTIPLE = {0x0B, 0x26}
_IN_PUBLISH = {0x01, 0x02, 0x03, 0x08, 0x09, 0x23, 0x26}  # allowed in a client's PUBLISH (0x0B is not: 0x82)
_KNOWN = set(fuzz_cases._KNOWN_IDS)


def _value(pid: int) -> bytes:
    """A valid value for property `pid` (any allowed range), for the duplicate/unknown-id model."""
    if pid in fuzz_cases._BYTE_IDS:
        return b"\x01"
    if pid in fuzz_cases._U16_IDS:
        return b"\x00\x05"
    if pid in fuzz_cases._U32_IDS:
        return b"\x00\x00\x00\x05"
    if pid == 0x0B:
        return b"\x05"
    if pid == 0x26:
        return encode_str("k", "k") + encode_str("v", "v")
    return encode_str("text", "t")


@settings(max_examples=400)
@given(st.lists(st.sampled_from(sorted(_KNOWN | {0x00, 0x04, 0x2B, 0x7F, 0x80})), min_size=1, max_size=8))
def test_publish_property_list_errors_follow_the_spec(ids: list[int]) -> None:
    """Duplicates (0x82 Protocol Error), unknown ids and properties a PUBLISH may not carry (0x81 Malformed), a
    Subscription Identifier from a client (0x82): the first offending property decides, as a plain model says."""
    block = b"".join(encode_vbi(pid) + _value(pid) for pid in ids)
    body = encode_str("t/x", "topic") + encode_vbi(len(block)) + block + b"payload"
    wire = bytes((0x30,)) + encode_vbi(len(body)) + body
    expected: int | None = None
    seen: set[int] = set()
    for pid in ids:
        if pid not in _KNOWN or pid not in _IN_PUBLISH | {0x0B}:
            expected = rc.MALFORMED_PACKET
            break
        if pid in seen and pid not in _MULTIPLE:
            expected = rc.PROTOCOL_ERROR
            break
        seen.add(pid)
    if expected is None and 0x0B in seen:
        expected = rc.PROTOCOL_ERROR  # a client may not send a Subscription Identifier
    decoder = Decoder(server=True, protocol_level=5)
    if expected is None:
        [packet] = drain(decoder, (wire,))
        assert packet.type == PacketType.PUBLISH
    else:
        with pytest.raises(RemoteProtocolError) as err:
            drain(decoder, (wire,))
        assert err.value.reason_code == expected, (ids, err.value)


_UTF8_BREAKERS = [t for t in BAD_TEXT if b"+" not in t and b"#" not in t and len(t) == len(MARK)]


@pytest.mark.parametrize("bad", _UTF8_BREAKERS, ids=lambda b: b.hex())
@pytest.mark.parametrize("seed", [s for s in SEEDS if MARK in s.wire], ids=lambda s: s.name)
def test_ill_formed_text_in_any_string_field_is_malformed(seed: Seed, bad: bytes) -> None:
    """Every UTF-8 string field of every seed (client id, topics, filters, user name, user properties, reason
    strings...) answers ill-formed UTF-8 and U+0000 with 0x81, whichever field it is in."""
    start = 0
    while (i := seed.wire.find(MARK, start)) >= 0:
        start = i + 1
        wire = seed.wire[:i] + bad + seed.wire[i + 4:]
        with pytest.raises(MalformedPacket):
            drain(decoder_for(seed, 268_435_460), (wire,))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
def test_a_huge_remaining_length_is_refused_from_the_header(seed: Seed) -> None:
    first, body = fuzz_cases.split(seed.wire)
    wire = bytes((first,)) + encode_vbi(MAX_REMAINING_LENGTH) + body[:10]
    with pytest.raises(PacketTooLarge) as err:
        drain(decoder_for(seed, 1 << 20), (wire,))
    assert err.value.reason_code == rc.PACKET_TOO_LARGE
    # without a limit below it, the decoder waits for the body without buffering more than it got
    assert drain(decoder_for(seed, 268_435_460), (wire,)) == []


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
def test_a_five_byte_remaining_length_is_malformed(seed: Seed) -> None:
    wire = bytes((seed.wire[0],)) + b"\xff\xff\xff\xff\x01" + b"\x00" * 8
    with pytest.raises(MalformedPacket):
        drain(decoder_for(seed, 268_435_460), (wire,))


@pytest.mark.parametrize("seed", [s for s in SEEDS if s.to_server and not s.is_connect and len(s.wire) > 2],
                         ids=lambda s: s.name)
def test_a_length_shorter_than_the_fields_is_malformed(seed: Seed) -> None:
    """A remaining length one byte short of the body: the packet ends inside a field (0x81), except a PUBLISH
    with a payload, which just gets one byte shorter."""
    first, body = fuzz_cases.split(seed.wire)
    wire = bytes((first,)) + encode_vbi(len(body) - 1) + body[:-1]
    [whole] = drain(decoder_for(seed, 268_435_460), (seed.wire,))
    if isinstance(whole, Publish) and whole.payload:
        assert drain(decoder_for(seed, 268_435_460), (wire,)) == [
            Publish(whole.topic, whole.payload[:-1], whole.qos, whole.retain, whole.dup, whole.packet_id,
                    whole.properties)]
        return
    with pytest.raises(MalformedPacket):
        drain(decoder_for(seed, 268_435_460), (wire,))


def test_a_second_connect_is_a_protocol_error() -> None:
    connect = next(s for s in SEEDS if s.name == "v5-connect")
    with pytest.raises(ProtocolViolation) as err:
        drain(Decoder(server=True), (connect.wire + connect.wire,))
    assert err.value.reason_code == rc.PROTOCOL_ERROR
