"""A forwarded message reaches a session that just moved here at most once, though two nodes send it: the
publisher's node, which learned the new route, and the node the session left, which passes on what it still
gets for it (docs/netsplit.md, "Duplicates after a move"). One real Broker (node b) over an in-memory store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.fakes import MemoryMetadata, RecordingSink, TakenOverSink
from tests.unit.broker.sessions import entry
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.session import FORWARD_MEMORY, FORWARD_MEMORY_IDS, Session
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions import records
from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery

NOW = 1_700_000_000.0


def moved_here(broker: Broker, client_id: str, qos: int) -> RecordingSink:
    """`client_id` connects here and its session (subscribed to t/#) is handed over from node a."""
    sink = TakenOverSink()
    session, _present = broker.open_session(client_id, 5, False, None, sink, NOW)
    broker.attach(session, sink, 100, 0, NOW)
    image = SessionImage(client_id, True, 5, None)
    image.subscriptions.append(entry("t/#"))
    broker.migration.adopt_image(session, image)
    return sink


def forward(message: Message, clients: list[str] | None = None) -> list[object]:
    record, _size = records.forward_record(message, [], clients)
    return record


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("passed_on_first", [False, True])
def test_a_message_forwarded_twice_is_delivered_once(
        node_b: tuple[Broker, MemoryMetadata], qos: int, passed_on_first: bool) -> None:
    broker, _metadata = node_b
    sink = moved_here(broker, "c1", qos)
    message = Message("t/x", b"once", qos, forward_id=4711)
    direct, passed_on = forward(message), forward(message, ["c1"])
    for record in (passed_on, direct) if passed_on_first else (direct, passed_on):
        broker.deliver_forwarded(record, NOW + 1, peer="c" if record is direct else "a", seq=1)
    assert [p.payload for p in sink.publishes()] == [b"once"]
    assert broker.metrics["forward_delivered"] == 2


def test_other_messages_and_other_sessions_are_not_held_back(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    moved = moved_here(broker, "c1", 1)
    local = RecordingSink()
    session, _present = broker.open_session("c2", 5, True, 0, local, NOW)
    broker.attach(session, local, 100, 0, NOW)
    broker.subscribe(session, [Subscription("t/#", SubOptions(1))], None)
    for forward_id in (1, 2, 3):
        broker.deliver_forwarded(forward(Message("t/x", str(forward_id).encode(), 1, forward_id=forward_id)), NOW)
    broker.deliver_forwarded(forward(Message("t/x", b"1", 1, forward_id=1), ["c2"]), NOW)
    assert [p.payload for p in moved.publishes()] == [b"1", b"2", b"3"]
    assert [p.payload for p in local.publishes()] == [b"1", b"2", b"3", b"1"], "c2 did not move: not watched"


def test_the_watch_ends(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    sink = moved_here(broker, "c1", 1)
    session = broker.sessions["c1"]
    assert session.recent_forwards is not None
    late = session.watch_until + 1
    broker.deliver_forwarded(forward(Message("t/x", b"a", 1, forward_id=9)), late)
    broker.deliver_forwarded(forward(Message("t/x", b"a", 1, forward_id=9)), late)
    assert session.recent_forwards is None and len(sink.publishes()) == 2


def test_the_forward_id_travels_and_is_kept_by_the_forwarding_node(node_b: tuple[Broker, MemoryMetadata]) -> None:
    message = Message("t/x", b"p", 1, forward_id=123)
    assert Message.unpack(message.pack()).forward_id == 123
    assert Message.unpack(Message("t/x", b"p", 1).pack()).forward_id is None, "old records read as before"
    plain_record = Message("t", b"", 0).pack()
    assert len(plain_record) == 8


def watching() -> Session:
    session = Session("c", protocol_level=5, max_inflight=10, max_online=10**6, max_offline=10**6,
                      expiry_interval=None)
    session.watch_forwards(NOW + 10**6)
    return session


def test_ids_are_remembered_for_a_while_then_forgotten() -> None:
    session = watching()
    message = Message("t", b"p", 1, forward_id=5)
    assert session.deliver(message, 1, False, [], NOW) is Delivery.QUEUED
    assert session.deliver(message, 1, False, [], NOW + FORWARD_MEMORY / 2) is Delivery.DUPLICATE
    session.deliver(Message("t", b"p", 1, forward_id=6), 1, False, [], NOW + FORWARD_MEMORY + 1)
    assert session.deliver(message, 1, False, [], NOW + FORWARD_MEMORY + 2) is Delivery.QUEUED, "forgotten"


@given(st.lists(st.integers(min_value=0, max_value=50), max_size=300))
def test_memory_is_bounded_and_no_new_id_is_taken_for_a_duplicate(ids: list[int]) -> None:
    session = watching()
    delivered = [fid for fid in ids
                 if session.deliver(Message("t", b"", 1, forward_id=fid), 1, False, [], NOW) is Delivery.QUEUED]
    assert sorted(delivered) == sorted(set(ids)), "each id once, within the memory"
    assert session.recent_forwards is not None and len(session.recent_forwards) <= FORWARD_MEMORY_IDS


def test_a_dropped_copy_is_not_remembered() -> None:
    """A copy the session could not take (its offline queue full) does not make a later copy a duplicate."""
    session = Session("c", protocol_level=5, max_inflight=10, max_online=10, max_offline=1, expiry_interval=None)
    session.watch_forwards(NOW + 10**6)
    assert session.deliver(Message("t", b"1", 1, forward_id=1), 1, False, [], NOW) is Delivery.QUEUED
    message = Message("t", b"2", 1, forward_id=2)
    assert session.deliver(message, 1, False, [], NOW) is Delivery.DROPPED
    session.queue.clear()
    assert session.deliver(message, 1, False, [], NOW) is Delivery.QUEUED
