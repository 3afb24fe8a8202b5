"""The record of a forwarded publish: compact for a plain message, full otherwise; both round-trip through
msgpack, their size bounds their encoding, and anything else is refused with a clear error."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.broker.core.forward_wire import COMPACT_LENGTH, forward_record, parse_forward
from vmqpy.sessions.message import Message, decode_record, encode_record

REFUSED = (ValueError, TypeError, KeyError)


def through_the_wire(message: Message, groups: list[tuple[str, str]]) -> tuple[Any, Message, list[tuple[str, str]]]:
    record, size = forward_record(message, groups)
    encoded = encode_record(record)
    assert len(encoded) <= size
    decoded, got_groups, clients = parse_forward(decode_record(encoded))
    assert clients is None
    return record, decoded, got_groups


def with_id(message: Message, forward_id: int | None = 7) -> Message:
    message.forward_id = forward_id
    return message


@pytest.mark.parametrize(
    ("message", "groups", "compact"),
    [
        (with_id(Message("t/1", b"x" * 64, 0, False, "pub")), [], True),
        (with_id(Message("t/é/😀", b"x" * 70_000, 1, True, "pöb")), [], True),
        (with_id(Message("", b"", 2, False, "")), [], True),
        (with_id(Message("t/1", b"x", 1, False, "pub"), 2**63 - 1), [], True),
        (with_id(Message("t/1", b"x", 1, False, "pub")), [("g", "t/#")], False),  # a shared group: full
        (with_id(Message("t/1", b"x", 1, False, "pub"), None), [], False),  # no forward id: full
        (with_id(Message("t/1", b"x", 1, False, "pub", 123.5)), [], False),  # expiry: full
        (with_id(Message("t/1", b"x", 1, False, "pub", content_type="text/plain")), [], False),
        (with_id(Message("t/1", b"x", 1, False, "pub", user_properties=[("k", "v")])), [], False),
        (with_id(Message("t/1", b"x", 1, False, "pub", correlation_data=b"c", response_topic="r")), [], False),
        (with_id(Message("t/1", b"x", 1, False, "pub", payload_format_indicator=1)), [], False),
    ],
)
def test_a_forward_is_compact_only_for_a_plain_message_with_an_id_and_no_group(
    message: Message, groups: list[tuple[str, str]], compact: bool
) -> None:
    record, decoded, got_groups = through_the_wire(message, groups)
    assert (len(record) == COMPACT_LENGTH and type(record[0]) is str) is compact
    assert decoded == message and decoded.forward_id == message.forward_id and got_groups == groups


@pytest.mark.parametrize(
    "bad",
    [
        ["t", "not bytes", 0, False, "p", 1],
        ["t", b"", 3, False, "p", 1],  # no such QoS
        ["t", b"", -1, False, "p", 1],
        ["t", b"", 0, 1, "p", 1],  # retain is a bool
        ["t", b"", 0, False, None, 1],
        ["t", b"", 0, False, "p", "1"],
        ["t", b"", 0, False, "p", None],
        ["t", b"", 0, False, "p"],  # five values: neither form
        [2, [], []],  # an unknown version of the full form
        [1, ["t"], []],
        5,
        None,
        "t",
    ],
)
def test_a_record_that_is_not_a_forward_is_refused(bad: Any) -> None:
    with pytest.raises(REFUSED):
        parse_forward(bad)


texts = st.text(max_size=20)
messages = st.builds(
    Message,
    topic=texts,
    payload=st.binary(max_size=300),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    publisher=texts,
    expires_at=st.none() | st.floats(0, 1e10, allow_nan=False),
    payload_format_indicator=st.none() | st.integers(0, 1),
    content_type=st.none() | texts,
    response_topic=st.none() | texts,
    correlation_data=st.none() | st.binary(max_size=20),
    user_properties=st.lists(st.tuples(texts, texts), max_size=3),
)
groups_of = st.lists(st.tuples(texts, texts), max_size=3)


@given(messages, st.none() | st.integers(0, 2**63 - 1), groups_of)
def test_any_forward_round_trips_through_msgpack(
    message: Message, forward_id: int | None, groups: list[tuple[str, str]]
) -> None:
    message.forward_id = forward_id
    _record, decoded, got_groups = through_the_wire(message, groups)
    assert decoded == message and decoded.forward_id == forward_id and got_groups == groups
    if message.expires_at is not None:
        assert decoded.expires_at is not None and math.isclose(decoded.expires_at, message.expires_at)


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5) | st.binary(max_size=5),
    lambda inner: st.lists(inner, max_size=7),
    max_leaves=20,
)


@given(values)
def test_anything_decoded_is_either_a_forward_or_refused_with_a_clear_error(value: Any) -> None:
    try:
        message, groups, _clients = parse_forward(decode_record(encode_record(value)))
    except REFUSED:
        return
    assert isinstance(message, Message) and isinstance(groups, list)
