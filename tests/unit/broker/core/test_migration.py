"""Sessions moving between nodes, through the broker's port to the cluster layer (vmqpy.cluster.ports):
giving a session up to a newer connect elsewhere, handing its messages over, and recreating the sessions of a
dead node on the members that own them next. One real Broker (node b) over an in-memory metadata store."""

from __future__ import annotations

from typing import Any

from tests.unit.broker.fakes import MemoryMetadata, TakenOverSink
from tests.unit.broker.sessions import entry
from vmqpy.broker.core.broker import Broker
from vmqpy.cluster.ports import BrokerPort
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions import records
from vmqpy.sessions.message import Message


def test_a_persistent_session_is_handed_over_message_by_message(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, metadata = node_b
    port: BrokerPort = broker.migration
    sink = TakenOverSink()
    session, _present = broker.open_session("c1", 5, False, None, sink, 100.0)
    broker.attach(session, sink, 10, 0, 100.0)
    broker.subscribe(session, [Subscription("t/#", SubOptions(1))], None)
    broker.close_session(session, sink, 101.0, None, 0)
    assert not session.online
    for i in range(3):
        broker.publish(Message(f"t/{i}", b"p", 1), 102.0)
    assert port.moving_image("c1") is None

    image = port.hand_over("c1", False, "c", 103.0)
    assert image.present and [e.topic_filter for e in image.subscriptions] == ["t/#"]
    assert port.moving_image("c1") == image
    outs = port.pending_for_handover("c1", 0)
    assert outs is not None and [o.message.topic for o in outs] == ["t/0", "t/1", "t/2"]
    port.handed_over("c1", outs[1].seq)
    assert [o.message.topic for o in port.pending_for_handover("c1", 0) or []] == ["t/2"]
    assert not port.finish_handover("c1")  # it still holds a message and a subscription routes here

    # The new owner's subscription record arrives: nothing routes here any more.
    key = records.subscription_key("c1", "t/#")
    metadata.put(records.SUBSCRIPTION, key, records.subscription_value(metadata.hlc_now(), "c", entry("t/#")))
    port.handed_over("c1", outs[2].seq)
    assert port.finish_handover("c1")
    assert port.local_sessions() == [] and port.pending_for_handover("c1", 0) is None


def test_a_newer_owner_record_elsewhere_moves_a_persistent_session_there(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, metadata = node_b
    moving: list[tuple[str, str]] = []
    broker.on_moving = lambda client_id, target: moving.append((client_id, target))
    sink = TakenOverSink()
    session, _present = broker.open_session("c1", 5, False, None, sink, 100.0)
    broker.attach(session, sink, 10, 0, 100.0)
    metadata.put(records.SESSION, records.session_key("c1"),
                 records.session_value(metadata.hlc_now(), "a", False, None))
    assert sink.taken_over and not session.online
    assert session.moving_to == "a"
    assert moving == [("c1", "a")]
    assert broker.migration.owner_of("c1") == "a"
    record = metadata.get(records.SESSION, records.session_key("c1"))
    assert record is not None
    assert broker.migration.owner_stamp("c1") == record[0]


def test_the_persistent_sessions_of_a_dead_node_are_recreated_on_their_next_owners(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, metadata = node_b
    # "fresh": a 5.0 clean start with a session expiry, persistent all the same; "clean": 3.1.1 clean session
    for client_id, owner, clean, expiry in [("p1", "a", False, None), ("p2", "a", False, None),
                                            ("clean", "a", True, 0.0), ("fresh", "a", True, 3600.0),
                                            ("q", "c", False, None)]:
        metadata.put(records.SESSION, records.session_key(client_id),
                     records.session_value(metadata.hlc_now(), owner, clean, expiry))
    subscription = records.subscription_value(metadata.hlc_now(), "a", entry("x/#"))
    metadata.put(records.SUBSCRIPTION, records.subscription_key("p1", "x/#"), subscription)

    assert broker.migration.reassign_sessions("a", lambda client_id: "b" if client_id == "p1" else "c") == 3

    owners = {str(key[1]): (records.session_owner(v), records.session_origin(v))
              for key, v in metadata.fold(records.SESSION)}
    # p1 is recreated here at once, and b writes its own owner record (without an origin)
    assert owners == {"p1": ("b", None), "p2": ("c", "a"), "clean": ("a", None), "fresh": ("c", "a"),
                      "q": ("c", None)}
    [recreated] = broker.migration.local_sessions()  # b owns p1: recreated here from the store, with its subscription
    assert recreated.client_id == "p1" and list(recreated.subscriptions) == ["x/#"]
    assert broker.metrics["sessions_recreated"] == 1


class AcceptingForwarder:
    """The cluster's forwarding port: takes every forward."""

    def forward(self, node: str, record: Any, size: int, on_ack: Any = None, on_fail: Any = None) -> bool:
        return True


def test_a_copy_passed_back_by_the_old_node_is_not_delivered_twice(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """A subscriber that moved here watches for duplicate forwards. A message published here is named (its
    forward id) before it is delivered here, so the copy the subscriber's old node passes back here (it cannot
    tell whether this node routed it to the subscriber itself: vmqpy.broker.core.holdback.MovedRoutes.pass_on) is
    not delivered a second time."""
    broker, _metadata = node_b
    broker.forwarder = AcceptingForwarder()  # type: ignore[assignment]
    sink = TakenOverSink()
    session, _present = broker.open_session("c1", 5, False, None, sink, 100.0)
    broker.attach(session, sink, 10, 0, 100.0)
    broker.subscribe(session, [Subscription("t/#", SubOptions(1))], None)
    session.watch_forwards(200.0)  # as adopting a handed-over session does
    message = Message("t/1", b"p", 1)
    broker.publish(message, 101.0)
    assert message.forward_id is not None
    record, _size = records.forward_record(message, [], ["c1"])
    broker.deliver_forwarded(record, 101.5, "a", 0)
    assert [p.payload for p in sink.publishes()] == [b"p"]


def test_a_session_on_its_way_to_another_node_is_not_handed_over_as_absent(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    """A `leave -k` drains node b: the session moves to "a". A resuming CONNECT registering on "c" meanwhile was
    answered `absent` and opened a new session there, while the moving one landed on "a" later (the simulation's
    churn seed 3, docs/testing.md): the answer now says `moving`, and the registration refuses the CONNECT for now.
    A clean start needs nothing of the old session: absent, as before."""
    broker, _metadata = node_b
    port: BrokerPort = broker.migration
    sink = TakenOverSink()
    session, _present = broker.open_session("c1", 5, False, None, sink, 100.0)
    broker.attach(session, sink, 10, 0, 100.0)
    broker.close_session(session, sink, 101.0, None, 0)
    assert port.move_session("c1", "a") and session.moving_to == "a"
    resumed = port.hand_over("c1", False, "c", 102.0)
    assert not resumed.present and resumed.moving and not resumed.foreign
    clean = port.hand_over("c1", True, "c", 102.0)
    assert not clean.present and not clean.moving
    assert session.moving_to == "a", "the move under way goes on"
