"""Codec: round trips, pinned version-1 bytes, compactness and hostile input."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvv import codec, dvvset
from dvv.causal_container import CausalContainer
from dvv.dot_key_map import DotKeyMap
from dvv.errors import DecodeError, EncodeError
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark

from .histories import PROPS, DotHistory, DvvHistory, dvv_histories, dvv_to_container, node_clock_histories, values_st


def roundtrip(obj: object) -> object:
    data = codec.to_bytes(obj)  # type: ignore[arg-type]
    assert data[0] == codec.FORMAT_VERSION
    back = codec.from_bytes(data)
    assert type(back) is type(obj)
    return back


def samples() -> list[object]:
    s0 = dvvset.update(dvvset.new("v1"), "a")
    return [
        ("a", 1),
        VersionVector(),
        VersionVector({"a": 3, "b": 2**40}),
        dvvset.Clock(),
        dvvset.update_with(dvvset.new("v2"), s0, "b"),
        dvvset.new_list([1, [2], {"x": b"y"}], {"a": 2}),
        NodeClock(),
        NodeClock({"a": (5, 0b1110), "b": (0, 0), "c": (3, 1 << 200)}),
        CausalContainer(),
        CausalContainer({("a", 1): {"x": [1, 2]}, ("b", 9): None}, {"a": 1, "b": 9, "c": 4}),
        Watermark(),
        Watermark.new(["a", "b"]).update_cell("a", "b", 7).retire_peer("a"),
        DotKeyMap(),
        DotKeyMap({("a", 1): "k", ("a", 3): ("prefix", "topic/x"), ("b", 2): 42, ("b", 4): b"raw"}),
    ]


@pytest.mark.parametrize("obj", samples(), ids=lambda o: type(o).__name__)
def test_roundtrip_samples(obj: object) -> None:
    assert roundtrip(obj) == obj


def test_version_1_bytes_are_pinned() -> None:
    """An older node's bytes must stay readable: these literals are format version 1 forever."""
    assert codec.to_bytes(("a", 1)) == b"\x01\x01\x92\xa1a\x01"
    assert codec.to_bytes(VersionVector({"a": 3})) == b"\x01\x02\x92\xa1a\x03"
    assert codec.to_bytes(NodeClock({"a": (5, 14)})) == b"\x01\x04\x93\xa1a\x05\x0e"
    container = b"\x01\x05\x94\xa1a\x01\xa1x\x92\xa1a\x01"
    assert codec.to_bytes(CausalContainer({("a", 1): "x"}, {"a": 1})) == container
    assert codec.from_bytes(container) == CausalContainer({("a", 1): "x"}, {"a": 1})
    clock = b"\x01\x03\x92\x93\xa1a\x02\x92\xa2v2\xa2v1\x90"
    assert codec.from_bytes(clock) == dvvset.Clock((dvvset.Entry("a", 2, ("v2", "v1")),))
    assert codec.from_bytes(b"\x01\x06\x92\x92\xa1a\x92\xa1b\x07\x90") == Watermark({"a": {"b": 7}})
    assert codec.from_bytes(b"\x01\x07\x92\xa1a\x94\x01\xa1k\x03\x92\xa1t\x01") == DotKeyMap(
        {("a", 1): "k", ("a", 3): ("t", 1)}
    )


def test_container_with_one_value_and_stripped_context_is_compact() -> None:
    value = b"\x00" * 100
    for node in ("a", "node1", "vmq1@10.0.0.12"):
        for counter in (1, 300, 70_000, 2**32 + 1):
            stripped = CausalContainer({(node, counter): value}, {node: counter}).strip(NodeClock({node: (counter, 0)}))
            assert stripped.context() == {}
            overhead = len(codec.to_bytes(stripped)) - len(msgpack.packb(value, use_bin_type=True))
            assert overhead < 40, (node, counter, overhead)


def test_encode_errors() -> None:
    with pytest.raises(EncodeError):
        codec.to_bytes(object())  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        codec.to_bytes(CausalContainer({("a", 1): object()}))
    with pytest.raises(EncodeError):
        codec.to_bytes(("a", 0))
    with pytest.raises(EncodeError):
        codec.to_bytes(VersionVector({"a": 2**70}))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x01\x02",
        b"\x02\x02\x90",  # unknown version
        b"\x01\x63\x90",  # unknown tag
        b"\x01\x02\x92\xa1a",  # truncated
        b"\x01\x02\x90\x90",  # trailing bytes
        b"\x01\x02\x91\xa1a",  # odd flat vector
        b"\x01\x02\x92\x01\x02",  # node id not a str
        b"\x01\x02\x94\xa1b\x01\xa1a\x01",  # unsorted ids
        b"\x01\x02\x92\xa1a\xff",  # negative counter
        b"\x01\x02\x92\xa1a\xc3",  # bool counter
        b"\x01\x01\x92\xa1a\x00",  # dot with counter 0
        b"\x01\x04\x93\xa1a\x05\x01",  # node clock entry not normalised
        b"\x01\x04\x93\xa1a\x05\xc4\x02\x02\x00",  # bytes bitmap with a trailing zero byte
        b"\x01\x03\x92\x93\xa1a\x01\x92\x01\x02\x90",  # more values than events
        b"\x01\x05\x97\xa1a\x01\x01\xa1a\x01\x02\x90",  # duplicate dot
        b"\x01\x05\x92\x01\x90",  # container array of the wrong length
        b"\x01\x06\x92\x92\xa1a\x92\xa1b\x07\x92\xa1a\x90",  # row both active and retired
        b"\x01\x07\x92\xa1a\x92\x01\x81\xa1x\x01",  # dot-key-map key is a map
        b"\x01\x05\xc1",  # reserved msgpack byte
        b"\x01\x05" + b"\x91" * 5000,  # deeply nested
        b"\x01\x02\xdd\xff\xff\xff\xff",  # array claiming 4 billion items
    ],
)
def test_bad_bytes_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.from_bytes(data)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(DecodeError):
        codec.from_bytes(12)  # type: ignore[arg-type]


# -- properties ------------------------------------------------------------------------------------
@PROPS
@given(dvv_histories(), node_clock_histories(), st.data())
def test_roundtrip_of_history_objects(h: DvvHistory, d: DotHistory, data: st.DataObject) -> None:
    clock = data.draw(st.sampled_from(h.snapshots))
    nc = data.draw(st.sampled_from(d.clocks))
    container = dvv_to_container(clock)
    wm = Watermark.new(d.nodes)
    for i, node in enumerate(d.nodes):
        wm = wm.update_peer(node, d.clocks[i % len(d.clocks)])
    dkm = DotKeyMap().add_many((dot, f"key{dot[1] % 3}") for dot in nc.dots())
    for obj in (clock, dvvset.join(clock), nc, nc.base(), container, container.strip(nc), wm, dkm):
        assert roundtrip(obj) == obj
    if d.nodes[1:]:
        assert roundtrip(wm.retire_peer(d.nodes[0])) == wm.retire_peer(d.nodes[0])


@PROPS
@given(st.lists(values_st, max_size=4), st.lists(values_st, max_size=2))
def test_roundtrip_of_arbitrary_msgpack_values(vals: list[object], anonymous: list[object]) -> None:
    clock = dvvset.Clock((dvvset.Entry("n", len(vals) + 1, tuple(vals)),), tuple(anonymous))
    assert roundtrip(clock) == clock
    container = CausalContainer({("n", i + 1): v for i, v in enumerate(vals)}, {"n": len(vals)})
    assert roundtrip(container) == container


@PROPS
@given(st.binary(max_size=64))
def test_random_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    for candidate in (data, b"\x01" + data, bytes([1, data[0] % 8]) + data[1:] if data else data):
        try:
            obj = codec.from_bytes(candidate)
        except DecodeError:
            continue
        assert codec.from_bytes(codec.to_bytes(obj)) == obj


@PROPS
@given(st.sampled_from(samples()), st.data())
def test_mutated_valid_bytes_only_ever_raise_decode_error(obj: object, data: st.DataObject) -> None:
    raw = bytearray(codec.to_bytes(obj))  # type: ignore[arg-type]
    for _ in range(data.draw(st.integers(1, 3))):
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, len(raw) - 1))
        if action == "flip":
            raw[pos] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del raw[pos:]
            if not raw:
                raw.append(0)
        else:
            raw.insert(pos, data.draw(st.integers(0, 255)))
    try:
        decoded = codec.from_bytes(bytes(raw))
    except DecodeError:
        return
    assert codec.from_bytes(codec.to_bytes(decoded)) == decoded
