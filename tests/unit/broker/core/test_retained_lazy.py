"""Retained messages kept packed at a restart (docs/performance.md, "Restart").

`load_retained` puts the record of a plain retained message (`plain_record`) into the tree as it is, and the
tree unpacks it (`Message.unpack`) when first read. Invisible to every reader: `get`, `items` and `match` hand out
the message an eager load would have built; any other record is unpacked at load as before, so a malformed one
is refused with the same error, and an expired one is deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.fakes import MemoryMetadata, RecordingSink
from tests.unit.broker.sessions import entry
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.core.retained import Packed, RetainedStore
from vmqpy.config import Config
from vmqpy.mqtt.packets import Subscription
from vmqpy.sessions import records
from vmqpy.sessions.message import Message, plain_record
from vmqpy.storage import Storage

T0 = 1_000_000.0


def stored(message: Message) -> Any:
    """The record as the metadata store gives it back after a restart (msgpack round trip)."""
    return msgpack.unpackb(msgpack.packb(message.pack(), use_bin_type=True), raw=False, strict_map_key=False)


PLAIN = ["t/1", b"p", 1, True, "pub", None, [None, None, None, None], []]


@pytest.mark.parametrize(
    ("record", "plain"),
    [
        (PLAIN, True),
        (stored(Message("a/b", b"", 0, False, "")), True),
        (Message("a/b", b"x", 2, True, "c").pack(), True),  # in-process: user properties as ()
        (stored(Message("a", b"x", 1, True, "c", expires_at=T0)), False),
        (stored(Message("a", b"x", 1, True, "c", user_properties=[("k", "v")])), False),
        (stored(Message("a", b"x", 1, True, "c", content_type="text/plain")), False),
        (stored(Message("a", b"x", 1, True, "c", forward_id=7)), False),
        ([b"t/1", *PLAIN[1:]], False),
        ([PLAIN[0], "p", *PLAIN[2:]], False),
        ([*PLAIN[:2], True, *PLAIN[3:]], False),
        ([*PLAIN[:3], 1, *PLAIN[4:]], False),
        ([*PLAIN[:4], None, *PLAIN[5:]], False),
        ([*PLAIN[:6], [None, None, None], []], False),
        ([*PLAIN[:7], [["k", "v"]]], False),
        (PLAIN[:7], False),
        (tuple(PLAIN), False),
        ("t/1", False),
        (None, False),
    ],
)
def test_plain_record_table(record: Any, plain: bool) -> None:
    assert plain_record(record) is plain


texts = st.text(max_size=8)
messages = st.builds(
    Message,
    topic=texts,
    payload=st.binary(max_size=8),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    publisher=texts,
    expires_at=st.one_of(st.none(), st.floats(0, 2e9)),
    content_type=st.one_of(st.none(), texts),
    user_properties=st.lists(st.tuples(texts, texts), max_size=2),
    forward_id=st.one_of(st.none(), st.integers(1, 2**40)),
)
items = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), texts, st.binary(max_size=3),
                  st.lists(st.none(), max_size=5), st.just([]), st.floats(allow_nan=False))


@given(messages)
def test_a_record_is_plain_exactly_when_its_message_is(message: Message) -> None:
    record = stored(message)
    assert plain_record(record) is (message.plain and message.forward_id is None)
    if plain_record(record):
        unpacked = Message.unpack(record)
        assert unpacked == message and unpacked.expires_at is None


@given(st.lists(items, min_size=7, max_size=9))
def test_any_plain_record_unpacks_and_never_expires(record: list[Any]) -> None:
    """What the load keeps packed can be unpacked later, and the load may skip its expiry check."""
    if plain_record(record):
        message = Message.unpack(record)
        assert message.pack()[:6] == record[:6] and not message.expired(float("inf"))


def eager_and_lazy(entries: list[tuple[str, Message]]) -> tuple[RetainedStore[Message], RetainedStore[Message]]:
    eager: RetainedStore[Message] = RetainedStore()
    eager.set_many(entries)
    lazy: RetainedStore[Message] = RetainedStore(Message.unpack)
    lazy.set_many([(topic, stored(m) if i % 2 else m) for i, (topic, m) in enumerate(entries)])
    return eager, lazy


_topics = st.lists(st.sampled_from(["a", "b", "", "$s", "ret", "0"]), min_size=1, max_size=4).map("/".join)


@given(st.lists(st.tuples(_topics, messages.filter(lambda m: m.plain and m.forward_id is None)), max_size=20))
def test_a_store_of_packed_records_answers_as_a_store_of_messages(pairs: list[tuple[str, Message]]) -> None:
    entries = sorted({topic: message for topic, message in pairs}.items())
    eager, lazy = eager_and_lazy(entries)
    assert len(lazy) == len(eager)
    for pattern in ("#", "+/#", "a/+", "ret/0/#", "$s/#", "+", "/"):
        got = lazy.match(pattern)
        assert all(type(m) is Message for _t, m in got)
        assert sorted(got, key=lambda tm: tm[0]) == sorted(eager.match(pattern), key=lambda tm: tm[0])
    for topic, _message in entries:
        assert lazy.get(topic) == eager.get(topic)
    assert sorted(lazy.items(), key=lambda tm: tm[0]) == sorted(eager.items(), key=lambda tm: tm[0])


def test_a_packed_record_is_unpacked_once() -> None:
    calls: list[Packed] = []

    def unpack(record: Packed) -> Message:
        calls.append(record)
        return Message.unpack(record)

    store: RetainedStore[Message] = RetainedStore(unpack)
    store.set_many([("t/1", list(PLAIN)), ("t/2", Message("t/2", b"m", 0))])
    first = store.match("t/#")
    assert len(calls) == 1, "a message is not unpacked"
    assert sorted(first, key=lambda tm: tm[0]) == [("t/1", Message.unpack(PLAIN)), ("t/2", Message("t/2", b"m", 0))]
    assert store.get("t/1") is dict(first)["t/1"], "the unpacked message replaced the record (frames are shared)"
    assert next(m for _t, m in store.items() if m.topic == "t/1") is dict(first)["t/1"]
    assert len(calls) == 1 and len(store) == 2
    store.delete("t/1")
    assert store.get("t/1") is None and len(store) == 1
    plain: RetainedStore[list[int]] = RetainedStore()  # without `unpack`, a list is a value like any other
    plain.set_many([("x", [1, 2])])
    assert plain.get("x") == [1, 2]


@pytest.fixture
def metadata_broker(tmp_path: Path) -> Iterator[tuple[Broker, MemoryMetadata]]:
    storage = Storage(tmp_path / "b.db")
    storage.open()
    metadata = MemoryMetadata()
    try:
        yield Broker(Config(nodename="b"), SessionStore(storage), metadata), metadata
    finally:
        storage.close()


def keep(metadata: MemoryMetadata, topic: str, record: Any) -> None:
    """A retained record as a restarted node's store holds it (written before the broker's handlers exist)."""
    metadata.data[(records.RETAIN, records.retain_key(topic))] = [[1, 0, "b"], record]


def test_the_load_keeps_plain_records_packed_and_delivers_them(
    metadata_broker: tuple[Broker, MemoryMetadata],
) -> None:
    broker, metadata = metadata_broker
    keep(metadata, "r/plain", stored(Message("r/plain", b"kept", 1, True, "p")))
    keep(metadata, "r/props", stored(Message("r/props", b"props", 1, True, "p", content_type="text/plain")))
    keep(metadata, "r/old", stored(Message("r/old", b"old", 1, True, "p", expires_at=T0 - 1)))
    broker.load(T0)
    assert len(broker.retained) == 2
    assert (records.RETAIN, records.retain_key("r/old")) not in metadata.data, "an expired message is deleted"
    node = broker.retained._find("r/plain")
    assert node is not None and node.item is not None and type(node.item[1]) is list, "kept packed"
    sink = RecordingSink()
    session, _present = broker.open_session("c1", 5, True, 0.0, sink, T0)
    broker.attach(session, sink, 65535, 0, T0)
    _codes, added = broker.subscribe(session, [Subscription("r/#", entry("r/#", qos=1).options)], None)
    broker.deliver_retained(session, added, T0)
    delivered = sorted((p.topic, p.payload, p.retain) for p in sink.publishes())
    assert delivered == [("r/plain", b"kept", True), ("r/props", b"props", True)]
    assert broker.retained.get("r/plain") == Message("r/plain", b"kept", 1, True, "p")


@pytest.mark.parametrize("record", [["r/bad", b"x", 1], "not a record", None, [*PLAIN[:7], [["k"]]]])
def test_a_malformed_record_is_refused_at_load_as_before(
    metadata_broker: tuple[Broker, MemoryMetadata], record: Any,
) -> None:
    broker, metadata = metadata_broker
    keep(metadata, "r/bad", record)
    with pytest.raises(Exception) as before:
        records.retained_message([[1, 0, "b"], record])
    with pytest.raises(type(before.value)) as at_load:
        broker.load(T0)
    assert str(at_load.value) == str(before.value)
