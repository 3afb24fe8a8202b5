"""Replica operations as records (vmqpy.replicas.ops): round trips and clear refusals."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.replicas.ops import Op, decode_op, encode_op

OPS = [
    Op("put", "c", seq=7, value=b"\x93\x01"),
    Op("del", "c", seq=7),
    Op("in", "c", packet_id=65535, present=True),
    Op("in", "c", packet_id=1, present=False),
    Op("session", "c", value=b"rec"),
    Op("drop", "c"),
    Op("sync", "c", value=b"rec", incoming=(1, 65535)),
    Op("lin", "c", value=b"names"),
]


@pytest.mark.parametrize("op", OPS, ids=[o.kind for o in OPS])
def test_round_trip_through_msgpack(op: Op) -> None:
    wire = msgpack.unpackb(msgpack.packb(encode_op(op), use_bin_type=True), raw=False)
    assert decode_op(wire) == op


@pytest.mark.parametrize(("record", "message"), [
    (None, "not a replica operation"),
    (["nope", "c"], "not a replica operation"),
    (["put"], "not a replica operation"),
    (["put", 5, 1, b""], "client id is a string"),
    (["put", "c", 1], "4 elements"),
    (["put", "c", -1, b""], "seq is an integer"),
    (["put", "c", 1, "text"], "message is bytes"),
    (["del", "c", "1"], "seq is an integer"),
    (["in", "c", 0, True], "packet id is an integer from 1 to 65535"),
    (["in", "c", 65536, True], "packet id is an integer from 1 to 65535"),
    (["in", "c", 1, 1], "presence is a boolean"),
    (["session", "c", None], "session record is bytes"),
    (["drop", "c", 1], "2 elements"),
    (["sync", "c", b"rec"], "4 elements"),
    (["sync", "c", None, []], "session record is bytes"),
    (["sync", "c", b"rec", 5], "incoming packet ids are a list"),
    (["sync", "c", b"rec", [0]], "packet id is an integer from 1 to 65535"),
    (["lin", "c", None], "names is bytes"),
    (["lin", "c"], "3 elements"),
])
def test_malformed_records_are_refused_with_the_reason(record: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_op(record)


def test_encoding_an_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="unknown replica operation"):
        encode_op(Op("nope", "c"))


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text() | st.binary(),
                    lambda inner: st.lists(inner, max_size=5), max_leaves=10))
def test_any_value_decodes_or_raises_value_error(record: Any) -> None:
    try:
        decode_op(record)
    except ValueError:
        pass
