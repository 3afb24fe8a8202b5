"""The will kept in a persistent session's record (vmqpy.broker.core.stored_will), on one real Broker with `now` passed
in: the record carries the connection's will while it is connected, the pending will with its due time after a
loss, nothing after a normal DISCONNECT or once the delayed will is published; a record of the old three-field
form still loads; `StoredWill` packs and unpacks losslessly (a property) and says when it is due (a table);
`Broker.adopt_will` (what a failover does with the record of a lost owner) publishes, defers or drops it as the
session here says; and `recovered_will` picks the will of the right copy."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.fakes import Auth_, MemoryMetadata, Policy, RecordingSink
from tests.unit.broker.wills import CLOSED_AT, CONNECTED_AT, WILL_TOPIC, Client, will_watcher, wills
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SESSIONS, SessionStore, stored_session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.broker.core.wills import WILL_RETRY
from vmqpy.broker.machine.negotiation import Accepted, negotiate
from vmqpy.mqtt.packets import Connect, Properties, SubOptions, Subscription, Will
from vmqpy.replicas.copies import Copy
from vmqpy.replicas.failover import recovered_will
from vmqpy.sessions.message import Message, decode_record, encode_record

Node = tuple[Broker, MemoryMetadata]
WILL = Message(WILL_TOPIC, b"gone", 1, publisher="c1")


def connect(broker: Broker, now: float, *, expiry: int = 60, will_delay: int = 0, clean_start: bool = False,
            username: str | None = None) -> Client:
    """c1 connects with a will on WILL_TOPIC, passed to the broker as the connection's driver passes it."""
    packet = Connect("c1", protocol_level=5, clean_start=clean_start,
                     will=Will(WILL_TOPIC, b"gone", 1, properties=Properties(will_delay_interval=will_delay or None)),
                     properties=Properties(session_expiry_interval=expiry))
    terms = negotiate(packet, broker.config, Auth_(), Policy(), now)
    assert isinstance(terms, Accepted)
    sink = RecordingSink()
    session, _ = broker.open_session(terms.client_id, terms.level, terms.clean_start, terms.expiry, sink, now,
                                     username=username, will=terms.will, will_delay=terms.will_delay)
    broker.attach(session, sink, terms.send_window, terms.max_packet_out, now)
    return Client(session, sink, terms)


def kept_will(broker: Broker, client_id: str = "c1") -> StoredWill | None:
    broker.store.storage.barrier().result(10)  # the writes are batched: on disk first
    rows = dict(broker.store.storage.load(SESSIONS))
    return stored_session(client_id, decode_record(rows[client_id.encode()])).will


def test_the_record_keeps_the_will_while_connected_and_drops_it_at_a_normal_disconnect(node_b: Node) -> None:
    broker, _ = node_b
    client = connect(broker, CONNECTED_AT, will_delay=5, username="alice")
    kept = kept_will(broker)
    assert kept is not None and (kept.message.topic, kept.message.payload, kept.delay, kept.due) == (
        WILL_TOPIC, b"gone", 5.0, None)
    assert kept.username == "alice"
    broker.close_session(client.session, client.sink, CLOSED_AT, None, client.terms.will_delay)
    assert kept_will(broker) is None


def test_a_lost_connection_leaves_its_pending_will_in_the_record_until_it_is_published(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=5)
    broker.close_session(client.session, client.sink, CLOSED_AT, client.terms.will, client.terms.will_delay)
    kept = kept_will(broker)
    assert kept is not None and kept.due == CLOSED_AT + 5
    broker.tick(CLOSED_AT + 5)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None


def test_a_will_published_at_the_loss_is_not_kept(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, will_delay=0)
    broker.close_session(client.session, client.sink, CLOSED_AT, client.terms.will, client.terms.will_delay)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None


def test_a_record_of_the_three_field_form_loads_without_a_will() -> None:
    stored = stored_session("old", decode_record(encode_record([5, 60.0, 12.5])))
    assert (stored.protocol_level, stored.expiry_interval, stored.disconnected_at, stored.will) == (5, 60.0, 12.5, None)


messages = st.builds(Message, st.text(min_size=1, max_size=20), st.binary(max_size=50), st.integers(0, 2),
                     st.booleans(), st.text(max_size=10),
                     st.none() | st.floats(0, 1e10, allow_nan=False), st.none() | st.integers(0, 1))


@given(messages, st.floats(0, 1e6, allow_nan=False), st.none() | st.floats(0, 1e10, allow_nan=False),
       st.none() | st.text(max_size=10))
def test_a_stored_will_packs_and_unpacks_losslessly(message: Message, delay: float, due: float | None,
                                                    username: str | None) -> None:
    will = StoredWill(message, delay, due, username)
    assert StoredWill.unpack(decode_record(encode_record(will.pack()))) == will


@pytest.mark.parametrize(("delay", "due", "expiry", "lost_at", "expected"), [
    (0.0, None, None, 10.0, 10.0),  # no delay: due at the loss
    (5.0, None, None, 10.0, 15.0),
    (5.0, None, 2.0, 10.0, 12.0),  # the session ends first
    (5.0, None, 0.0, 10.0, 10.0),
    (5.0, 99.0, None, 10.0, 99.0),  # already pending: its own time
    (5.0, 3.0, 1.0, 10.0, 3.0),
])
def test_when_a_stored_will_is_due(delay: float, due: float | None, expiry: float | None, lost_at: float,
                                   expected: float) -> None:
    assert StoredWill(WILL, delay, due).due_at(lost_at, expiry) == expected


def offline_c1(broker: Broker) -> None:
    client = connect(broker, CONNECTED_AT, expiry=600)
    broker.close_session(client.session, client.sink, CONNECTED_AT + 1, None, 0.0)


def test_a_recovered_will_due_now_is_published(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    offline_c1(broker)
    broker.adopt_will("c1", StoredWill(WILL, 0.0), CLOSED_AT)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None


def test_a_recovered_delayed_will_waits_and_is_kept_in_the_record_meanwhile(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    offline_c1(broker)
    broker.adopt_will("c1", StoredWill(WILL, 30.0), CLOSED_AT)
    assert wills(watcher) == []
    kept = kept_will(broker)
    assert kept is not None and kept.due == CLOSED_AT + 30  # replicated on: a second loss still publishes it
    broker.tick(CLOSED_AT + 30)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None


def test_a_recovered_pending_will_already_due_is_published_at_once(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    offline_c1(broker)
    broker.adopt_will("c1", StoredWill(WILL, 30.0, due=CLOSED_AT - 1), CLOSED_AT)
    assert wills(watcher) == [b"gone"]


def test_a_client_connected_here_again_cancels_a_recovered_delayed_will(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    connect(broker, CLOSED_AT, expiry=600)
    broker.adopt_will("c1", StoredWill(WILL, 30.0), CLOSED_AT)
    broker.tick(CLOSED_AT + 60)
    assert wills(watcher) == []


def test_a_recovered_will_without_delay_is_published_even_if_the_client_is_back(node_b: Node) -> None:
    """Its connection was lost with the old owner: the will was due then, whatever happened after."""
    broker, _ = node_b
    watcher = will_watcher(broker)
    connect(broker, CLOSED_AT, expiry=600)
    broker.adopt_will("c1", StoredWill(WILL, 0.0), CLOSED_AT)
    assert wills(watcher) == [b"gone"]


def test_a_will_of_a_session_not_here_is_not_published(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    broker.adopt_will("c1", StoredWill(WILL, 0.0), CLOSED_AT)
    assert wills(watcher) == []


class Switch:
    """A netsplit policy an operator of the test turns: publishing refused while `serving` is False."""

    def __init__(self) -> None:
        self.serving = True
        self.refused = 0

    def may(self, operation: str) -> bool:
        self.refused += not self.serving
        return self.serving

    def reason(self) -> str:
        return "switched off"


def test_a_due_will_the_policy_refuses_is_tried_again_until_it_is_published(node_b: Node) -> None:
    """A delayed will due while the node may not publish (a netsplit) waits, tried every WILL_RETRY seconds,
    and is published once, when the node serves again; its record keeps it meanwhile."""
    broker, _ = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=600, will_delay=5)
    broker.close_session(client.session, client.sink, CLOSED_AT, client.terms.will, client.terms.will_delay)
    switch = Switch()
    broker.policy = switch
    switch.serving = False
    for step in range(4):
        broker.tick(CLOSED_AT + 5 + step * WILL_RETRY)
    assert wills(watcher) == [] and switch.refused == 4 and kept_will(broker) is not None
    switch.serving = True
    broker.tick(CLOSED_AT + 5 + 4 * WILL_RETRY)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None
    broker.tick(CLOSED_AT + 100)
    assert wills(watcher) == [b"gone"]


def test_a_recovered_will_refused_by_the_policy_waits_for_the_node_to_serve(node_b: Node) -> None:
    broker, _ = node_b
    watcher = will_watcher(broker)
    offline_c1(broker)
    switch = Switch()
    broker.policy = switch
    switch.serving = False
    broker.adopt_will("c1", StoredWill(WILL, 0.0), CLOSED_AT)
    assert wills(watcher) == [] and kept_will(broker) is not None
    switch.serving = True
    broker.tick(CLOSED_AT + WILL_RETRY)
    assert wills(watcher) == [b"gone"] and kept_will(broker) is None


def test_a_recovered_will_published_while_the_client_is_back_leaves_its_connections_will_in_the_record(
        node_b: Node) -> None:
    broker, _ = node_b
    connect(broker, CLOSED_AT, expiry=600, will_delay=3)
    broker.adopt_will("c1", StoredWill(Message("will/old", b"old", 1), 0.0), CLOSED_AT)
    kept = kept_will(broker)
    assert kept is not None and (kept.message.topic, kept.delay, kept.due) == (WILL_TOPIC, 3.0, None)


def restarted(broker: Broker, metadata: MemoryMetadata, now: float) -> Broker:
    """The node stops without a word (its storage and metadata stay) and a new Broker loads them."""
    broker.store.storage.barrier().result(10)
    again = Broker(broker.config, SessionStore(broker.store.storage), metadata)
    again.load(now)
    return again


def persistent_watcher(broker: Broker) -> None:
    """A persistent session "watcher" subscribed to WILL_TOPIC at QoS 1, offline: it outlives a restart."""
    sink = RecordingSink()
    session, _present = broker.open_session("watcher", 5, True, 600.0, sink, CONNECTED_AT)
    broker.attach(session, sink, 65535, 0, CONNECTED_AT)
    broker.subscribe(session, [Subscription(WILL_TOPIC, SubOptions(1))], None)
    broker.close_session(session, sink, CONNECTED_AT, None, 0.0)


def queued_wills(broker: Broker) -> list[bytes]:
    return [o.message.payload for o in broker.sessions["watcher"].queue if o.message.topic == WILL_TOPIC]


def test_a_will_kept_while_connected_is_due_again_after_a_crash_and_restart(node_b: Node) -> None:
    """The node crashed with c1 connected: its connection was lost without a DISCONNECT, so the restarted node
    publishes the will after its delay, counted from the load (its watcher is a persistent session: offline
    after the restart, the will is queued for it)."""
    broker, metadata = node_b
    persistent_watcher(broker)
    connect(broker, CONNECTED_AT, expiry=600, will_delay=5)
    again = restarted(broker, metadata, CLOSED_AT)
    again.tick(CLOSED_AT + 4.9)
    assert queued_wills(again) == []
    again.tick(CLOSED_AT + 5)
    assert queued_wills(again) == [b"gone"]
    again.tick(CLOSED_AT + 10)
    assert queued_wills(again) == [b"gone"]  # once


def test_a_pending_will_keeps_its_time_across_a_restart(node_b: Node) -> None:
    broker, metadata = node_b
    persistent_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=600, will_delay=30)
    broker.close_session(client.session, client.sink, CLOSED_AT, client.terms.will, client.terms.will_delay)
    again = restarted(broker, metadata, CLOSED_AT + 10)
    again.tick(CLOSED_AT + 29)
    assert queued_wills(again) == []
    again.tick(CLOSED_AT + 30)
    assert queued_wills(again) == [b"gone"]


def test_no_will_after_a_restart_when_the_client_had_said_goodbye(node_b: Node) -> None:
    broker, metadata = node_b
    persistent_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=600, will_delay=0)
    broker.close_session(client.session, client.sink, CLOSED_AT, None, client.terms.will_delay)
    again = restarted(broker, metadata, CLOSED_AT + 1)
    again.tick(CLOSED_AT + 100)
    assert queued_wills(again) == []


def record(will: StoredWill | None, disconnected_at: float | None = None) -> bytes:
    fields: list[object] = [5, 600.0, disconnected_at]
    if will is not None:
        fields.append(will.pack())
    return encode_record(fields)


def test_the_recovered_will_comes_from_the_copy_of_a_connected_client_first_then_the_latest_due() -> None:
    connected = StoredWill(Message("t/a", b"a", 1), 0.0)
    early, late = StoredWill(Message("t/b", b"b", 1), 5.0, 10.0), StoredWill(Message("t/c", b"c", 1), 5.0, 20.0)
    assert recovered_will("c1", {"a": Copy(record(early, 5.0)), "b": Copy(record(late, 15.0))}) == late
    assert recovered_will("c1", {"a": Copy(record(late, 15.0)), "b": Copy(record(connected))}) == connected
    assert recovered_will("c1", {"a": Copy(record(None)), "b": Copy(None)}) is None
    assert recovered_will("c1", {"a": Copy(b"\xc1 not msgpack"), "b": Copy(record(early))}) == early
