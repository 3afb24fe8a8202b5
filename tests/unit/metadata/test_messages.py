"""Wire codec: every message round-trips; any other bytes raise MessageDecodeError, never anything else."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dvv.causal_container import CausalContainer
from dvv.dots import Counters
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark
from vmqpy.metadata import messages
from vmqpy.metadata.errors import MessageDecodeError
from vmqpy.metadata.hlc import Stamp
from vmqpy.metadata.messages import Push, PushAck, SyncObject, SyncReject, SyncReply, SyncRequest, decode, encode

WM = Watermark.new(["a", "b"]).update_cell("a", "b", 3)
CLOCK = NodeClock({"a": (5, 0b101), "b": (2, 0), "c": (0, 1 << 70)})
OBJ = CausalContainer({("a", 4): {"qos": 1}, ("b", 2): [1, "x", b"y"]}, {"a": 4, "c": 9})

SAMPLES: list[messages.StoreMessage] = [
    Push("subs", ("tenant", "a/+/b", 3, b"\x00"), ("a", 7), {"hlc": [1, 2, "a"], "qos": 1}, {"a": 6, "b": 2}),
    Push("subs", (), ("a", 8), None, {"a": 8}),
    SyncRequest(1, 500, CLOCK, WM),
    SyncRequest(2**40, 1, NodeClock(), None),
    SyncReply(3, False, 10, VersionVector({"a": 5}), (SyncObject("p", ("k",), OBJ, (("a", 1),)),), {}, None),
    SyncReply(
        4,
        True,
        0,
        VersionVector(),
        (SyncObject("p", ("k", 2), CausalContainer(), ()),),
        {"a": Counters.from_runs([range(1, 10), range(20, 21)])},
        WM,
    ),
    SyncReject(5, "not_a_member"),
    PushAck((1, 7, 2**40)),
    PushAck(()),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: messages.StoreMessage) -> None:
    data = encode(message)
    back = decode(data)
    assert back == message
    assert back.size == len(data)
    assert encode(back) == data


def test_push_container_covers_the_dot_and_stamps_encode_as_lists() -> None:
    push = Push("p", ("k",), ("a", 3), {"hlc": Stamp(1, 2, "a")}, {"b": 1})
    back = decode(encode(push))
    assert isinstance(back, Push)
    assert back.value == {"hlc": [1, 2, "a"]}
    assert back.container() == CausalContainer({("a", 3): {"hlc": [1, 2, "a"]}}, {"a": 3, "b": 1})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_raise_decode_error_only(data: bytes) -> None:
    try:
        decode(data)
    except MessageDecodeError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([encode(m) for m in SAMPLES]), st.data())
def test_mutated_messages_raise_decode_error_or_decode(data: bytes, draw: st.DataObject) -> None:
    kind = draw.draw(st.sampled_from(["truncate", "flip", "insert"]))
    pos = draw.draw(st.integers(0, len(data) - 1))
    if kind == "truncate":
        mutated = data[:pos]
    elif kind == "flip":
        mutated = data[:pos] + bytes([data[pos] ^ draw.draw(st.integers(1, 255))]) + data[pos + 1 :]
    else:
        mutated = data[:pos] + draw.draw(st.binary(min_size=1, max_size=4)) + data[pos:]
    try:
        message = decode(mutated)
    except MessageDecodeError:
        return
    assert encode(message)  # whatever decodes is a well-formed message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4) | st.binary(max_size=4),
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
        max_leaves=20,
    )
)
def test_well_formed_msgpack_of_any_shape_raises_decode_error_only(obj: object) -> None:
    for payload in (obj, [1, 1, obj], [1, 2, obj, obj], [1, 3, 1, True, 0, obj, obj, obj, None], [1, 4, obj, obj]):
        try:
            decode(msgpack.packb(payload, use_bin_type=True))
        except MessageDecodeError:
            pass


@pytest.mark.parametrize(
    "payload",
    [
        [2, 1],  # unknown version
        [1, 99],  # unknown type
        [1, 1, "p", ["k"], "a", 0, [], []],  # counter 0
        [1, 1, "p", ["k"], "a", 1, [None], []],  # nil value
        [1, 1, "p", [1.5], "a", 1, [], []],  # float key item
        [1, 1, "p", ["k"], "a", 1, [1, 2], []],  # two values
        [1, 2, 1, 0, b"", None],  # limit 0, empty clock bytes
        [1, 2, 1, 5, b"\x01\x07\x90", None],  # a DotKeyMap where a NodeClock belongs
        [1, 3, 1, "yes", 0, [], [], [], None],  # done is not a bool
        [1, 3, 1, True, 0, [], [], ["a", [5, 3, 1, 2]], None],  # runs not ascending
        [1, 3, 1, True, 0, ["a", 1, "a", 2], [], [], None],  # duplicate node in base
        [1, 3, 1, True, 0, [], [["p", ["k"], [["a", 1, 0, "a", 1, 0], []], []]], [], None],  # duplicate dot
        [1, 4, -1, "x"],
        [1, 5, [0]],  # counter 0
        [1, 5, [1, "2"]],  # a counter that is not an int
        [1, 5, 3],  # counters not an array
        [1, 5, [1], [2]],  # a field too many
    ],
)
def test_bad_payloads(payload: list[object]) -> None:
    with pytest.raises(MessageDecodeError):
        decode(msgpack.packb(payload, use_bin_type=True))


def test_non_bytes_raise_decode_error() -> None:
    for bad in (None, 3, "text", object()):
        with pytest.raises(MessageDecodeError):
            decode(bad)  # type: ignore[arg-type]


def test_storage_rows_round_trip_and_reject_garbage() -> None:
    key = ("t", 1, b"b")
    assert messages.unpack_full_key(messages.pack_full_key("p", key)) == ("p", key)
    assert messages.unpack_container(messages.pack_container(OBJ)) == OBJ
    assert messages.unpack_dot(messages.pack_dot(("a", 9))) == ("a", 9)
    packed = msgpack.packb({"v": 1})
    single = messages.pack_single("a", 3, packed, {"b": 2})
    assert messages.unpack_container(single) == CausalContainer({("a", 3): {"v": 1}}, {"b": 2})
    assert messages.unpack_container(messages.pack_single("a", 3, None, {})) == CausalContainer()
    for garbage in (b"", b"\x02\x90", b"\x01\xc1", b"\x01\x92\x90"):
        for unpack in (messages.unpack_full_key, messages.unpack_container, messages.unpack_dot):
            with pytest.raises(MessageDecodeError):
                unpack(garbage)
