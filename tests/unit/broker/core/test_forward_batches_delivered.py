"""A FORWARD frame's publishes delivered in one call (`broker.forwards.deliver_batch`) do exactly what delivering them
one by one (`Broker.deliver_forwarded`) does: the same publishes reach the same sessions in the same order with
the same QoS, retain flag and subscription identifiers, the same are queued for an offline persistent session,
the same counters move, the same answer about persistent sessions; malformed records are counted and skipped.
Two real Brokers (node b) over in-memory metadata stores and temporary storages, subscribed alike."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.fakes import MemoryMetadata, TakenOverSink
from vmqpy.broker.core import forward_wire
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.config import Config
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions.message import Message, decode_record, encode_record
from vmqpy.storage import Storage

NOW = 1_700_000_000.0
TOPICS = ["t/a", "t/b", "u/a", "x"]
# (client id, online, [(filter, qos, no_local, retain as published, subscription id)])
SUBSCRIBERS: list[tuple[str, bool, list[tuple[str, int, bool, bool, int | None]]]] = [
    ("plain", True, [("t/a", 1, False, False, None)]),
    ("overlap", True, [("t/#", 0, False, True, 3), ("t/a", 2, False, False, 4)]),
    ("nolocal", True, [("t/+", 1, True, True, None)]),
    ("shared1", True, [("$share/g/u/#", 1, False, False, None)]),
    ("shared2", True, [("$share/g/u/#", 0, False, False, None)]),
    ("offline", False, [("#", 1, False, False, 9)]),
]


@contextmanager
def node_b() -> Iterator[tuple[Broker, dict[str, TakenOverSink]]]:
    """Broker b with `SUBSCRIBERS` (the offline one a persistent session that disconnected)."""
    with TemporaryDirectory() as tmp:
        storage = Storage(Path(tmp) / "b.db")
        storage.open()
        try:
            broker = Broker(Config(nodename="b"), SessionStore(storage), MemoryMetadata(), rng=random.Random(7))
            sinks: dict[str, TakenOverSink] = {}
            for client_id, online, subs in SUBSCRIBERS:
                sink = TakenOverSink()
                session, _present = broker.open_session(client_id, 5, False, None if online else 3600.0, sink, NOW)
                broker.attach(session, sink, 4, 0, NOW)
                for topic_filter, qos, no_local, rap, sub_id in subs:
                    broker.subscribe(session, [Subscription(topic_filter, SubOptions(qos, no_local, rap))], sub_id)
                if online:
                    sinks[client_id] = sink
                else:
                    broker.close_session(session, sink, NOW, None, 0.0)
            yield broker, sinks
        finally:
            storage.close()


def seen(broker: Broker, sinks: dict[str, TakenOverSink]) -> dict[str, Any]:
    """What the sessions got, what waits for them, and the counters of forwarding."""
    out: dict[str, Any] = {
        cid: [(p.topic, p.payload, p.qos, p.retain, p.packet_id, p.properties.subscription_identifiers,
               p.properties.user_properties) for p in sink.publishes()]
        for cid, sink in sinks.items()
    }
    for cid, session in broker.sessions.items():
        out[cid + " queued"] = [(o.message.topic, o.message.payload, o.qos, o.retain, o.subscription_ids)
                                for o in session.queue]
    for name in ("forward_delivered", "forward_malformed", "publish_dropped"):
        out[name] = broker.metrics[name]
    return out


messages = st.builds(
    Message,
    topic=st.sampled_from(TOPICS),
    payload=st.binary(max_size=8),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    publisher=st.sampled_from(["pub", "nolocal", "plain"]),
    user_properties=st.lists(st.tuples(st.just("k"), st.text(max_size=3)), max_size=1),
)
MALFORMED: list[Any] = [
    ["t/a", "not bytes", 0, False, "pub", 1],
    ["t/a", b"", 3, False, "pub", 1],
    ["t/a", b"", 0, 1, "pub", 1],
    ["t/a", b"", 0, False, None, 1],
    ["t/a", b"", 0, False, "pub", "id"],
    [2, [], []],
    "garbage",
]


@st.composite
def forwards(draw: st.DrawFn) -> Any:
    """A forward record as msgpack gives it back: compact, full (properties, a shared group), or malformed."""
    kind = draw(st.sampled_from(["forward", "forward", "forward", "grouped", "malformed"]))
    if kind == "malformed":
        return draw(st.sampled_from(MALFORMED))
    message = draw(messages)
    message.forward_id = draw(st.integers(1, 2**62))
    groups = [("g", "u/#")] if kind == "grouped" else []
    record, _size = forward_wire.forward_record(message, groups)
    return decode_record(encode_record(record))


@settings(max_examples=60, deadline=None)
@given(st.lists(forwards(), max_size=12), st.data())
def test_a_batch_is_delivered_as_its_forwards_one_by_one(records: list[Any], data: st.DataObject) -> None:
    seqs = [data.draw(st.integers(0, 3)) for _ in records]
    with node_b() as (one, one_sinks), node_b() as (batch, batch_sinks):
        durable_one = False
        for seq, record in zip(seqs, records, strict=True):
            durable_one = one.deliver_forwarded(record, NOW, "a", seq) or durable_one
        durable_batch = batch.forwards.deliver_batch(list(zip(seqs, records, strict=True)), NOW, "a")
        assert seen(batch, batch_sinks) == seen(one, one_sinks)
        assert durable_batch == durable_one


@pytest.mark.parametrize("bad", MALFORMED)
def test_a_malformed_forward_is_counted_and_skipped_and_the_rest_delivered(bad: Any) -> None:
    good = Message("t/a", b"1", 1, forward_id=5)
    record = decode_record(encode_record(forward_wire.forward_record(good, [])[0]))
    with node_b() as (broker, sinks):
        broker.forwards.deliver_batch([(1, bad), (2, record)], NOW, "a")
        assert [p.payload for p in sinks["plain"].publishes()] == [b"1"]
        assert broker.metrics["forward_malformed"] == 1 and broker.metrics["forward_delivered"] == 1


def test_a_batch_for_a_persistent_subscriber_says_so() -> None:
    durable = Message("t/b", b"q", 1, forward_id=6)  # only the offline persistent session and overlap get it
    plain = Message("x", b"q", 0, forward_id=7)
    with node_b() as (broker, _sinks):
        assert broker.forwards.deliver_batch([(1, forward_wire.forward_record(durable, [])[0])], NOW, "a")
        assert not broker.forwards.deliver_batch([(0, forward_wire.forward_record(plain, [])[0])], NOW, "a")


def test_with_late_forwards_to_pass_on_each_forward_goes_through_its_own_number() -> None:
    passed: list[tuple[str, str, int]] = []
    with node_b() as (broker, _sinks):
        broker._moved.routes[("gone", "t/#")] = (None, None, 0.0)  # type: ignore[assignment]  # only tested for
        broker._moved.pass_on = lambda m, peer, seq, clients: passed.append((m.topic, peer, seq))  # type: ignore
        records = [forward_wire.forward_record(Message(t, b"", 1, forward_id=i), [])[0]
                   for i, t in enumerate(["t/a", "x"], 1)]
        broker.forwards.deliver_batch([(4, records[0]), (5, records[1])], NOW, "a")
    assert passed == [("t/a", "a", 4), ("x", "a", 5)]
