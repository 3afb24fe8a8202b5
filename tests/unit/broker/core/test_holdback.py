"""Holding publishes back across nodes (vmqpy.broker.core.holdback), with a recording forwarder in place of the
cluster: congestion signalled to a feeding node and lifted once its subscribers drained, publishers waiting for
a congested node, and late forwards passed on to a moved subscription's new node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from vmqpy.broker.core.holdback import Backpressure, MovedRoutes
from vmqpy.broker.core.session import Session
from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions import records
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry


class RecordingForwarder:
    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.forwards: list[tuple[str, Any, Callable[[], None] | None, Callable[[str], None] | None]] = []
        self.signals: list[tuple[str, bool]] = []
        self.held: list[tuple[str, int]] = []
        self.released: list[tuple[str, int]] = []

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool:
        self.forwards.append((node, record, on_ack, on_fail))
        return self.accept

    def signal_congestion(self, node: str, congested: bool) -> None:
        self.signals.append((node, congested))

    def hold(self, peer: str, seq: int) -> Callable[[], None]:
        self.held.append((peer, seq))
        return lambda: self.released.append((peer, seq))


def session(client_id: str) -> Session:
    return Session(client_id, protocol_level=5, expiry_interval=None, max_inflight=10, max_online=100,
                   max_offline=100)


def entry(topic_filter: str) -> SubEntry:
    return SubEntry(topic_filter, topic_filter, SubOptions(1), None, None)


# ---------------------------------------------------------------------------------------------- Backpressure

def test_a_feeding_node_is_held_back_until_every_congested_subscriber_drained() -> None:
    forwarder = RecordingForwarder()
    metrics: Counter[str] = Counter()
    backpressure = Backpressure(lambda: forwarder, metrics)
    a, b = session("a"), session("b")
    backpressure.hold_back("n2", [a])
    backpressure.hold_back("n2", [b])
    assert forwarder.signals == [("n2", True)]
    assert metrics["congestion_signalled"] == 1
    a.release_waiters()
    assert forwarder.signals == [("n2", True)]
    b.release_waiters()
    assert forwarder.signals == [("n2", True), ("n2", False)]


def test_the_lift_is_not_signalled_once_the_forwarder_is_gone() -> None:
    forwarders: list[RecordingForwarder] = [RecordingForwarder()]
    backpressure = Backpressure(lambda: forwarders[0] if forwarders else None, Counter())
    a = session("a")
    first = forwarders[0]
    backpressure.hold_back("n2", [a])
    forwarders.clear()
    a.release_waiters()
    assert first.signals == [("n2", True)]


def test_publishers_wait_for_a_congested_node_until_it_recovers_or_goes_away() -> None:
    backpressure = Backpressure(lambda: None, Counter())
    called: list[str] = []
    backpressure.wait_for_node("n2", lambda: called.append("at once"))
    backpressure.on_peer_congestion("n2", True)
    backpressure.on_peer_congestion("n3", True)
    backpressure.wait_for_node("n2", lambda: called.append("n2 recovered"))
    backpressure.wait_for_node("n3", lambda: called.append("n3 gone"))
    assert called == ["at once"]
    assert set(backpressure.congested_nodes) == {"n2", "n3"}
    backpressure.on_peer_congestion("n2", False)
    backpressure.on_peer_reachability("n3", False)
    assert called == ["at once", "n2 recovered", "n3 gone"]
    assert backpressure.congested_nodes == {}


# ---------------------------------------------------------------------------------------------- MovedRoutes

def moved_routes(
    forwarder: RecordingForwarder, sessions: dict[str, Session] | None = None
) -> tuple[MovedRoutes, Counter[str]]:
    metrics: Counter[str] = Counter()
    routes = MovedRoutes(sessions or {}, lambda: forwarder, metrics)
    return routes, metrics


def test_a_late_forward_goes_on_to_the_new_node_naming_the_moved_subscribers() -> None:
    forwarder = RecordingForwarder()
    routes, metrics = moved_routes(forwarder)
    routes.moved("c1", entry("t/#"), "n3")
    routes.moved("c2", entry("t/+"), "n3")
    routes.moved("c3", entry("other"), "n3")
    routes.pass_on(Message("t/x", b"p", 0), "n1", 0, None)
    [(node, record, on_ack, _on_fail)] = forwarder.forwards
    _message, _groups, clients = records.parse_forward(record)
    assert (node, clients, on_ack) == ("n3", {"c1", "c2"}, None)
    assert metrics["forwards_passed_on"] == 1


def test_a_forward_is_passed_on_though_the_senders_last_report_held_the_new_route() -> None:
    """The sender may have routed it before it learned the new route: a forward it buffered while the link was
    down reaches here after a report that holds the route (a QoS 1 message was lost this way when a node killed
    with kill -9 came back, tests/integration/test_haproxy_failover.py). The new node delivers it once
    (Session.watch_forwards)."""
    forwarder = RecordingForwarder()
    routes, metrics = moved_routes(forwarder, {})
    routes.moved("c2", entry("t/#"), "n3")
    routes.pass_on(Message("t/x", b"p", 1), "n1", 7, None)
    [(node, record, _on_ack, _on_fail)] = forwarder.forwards
    assert (node, records.parse_forward(record)[2]) == ("n3", {"c2"})
    assert metrics["forwards_passed_on"] == 1


def test_nothing_is_passed_on_that_the_sender_routes_itself() -> None:
    forwarder = RecordingForwarder()
    routes, _metrics = moved_routes(forwarder, {"c1": session("c1")})
    routes.moved("c1", entry("t/#"), "n3")  # back here since
    routes.moved("c5", entry("t/#"), "n3")
    routes.removed("c5", "t/#")
    routes.pass_on(Message("t/x", b"p", 0), "n1", 0, None)
    routes.pass_on(Message("t/x", b"p", 0), "n2", 0, {"c9"})  # for other clients only
    assert forwarder.forwards == []


def test_a_qos1_forward_is_acknowledged_to_its_sender_once_the_new_node_has_it() -> None:
    forwarder = RecordingForwarder()
    routes, _metrics = moved_routes(forwarder)
    routes.moved("c1", entry("t/#"), "n3")
    routes.pass_on(Message("t/x", b"p", 1), "n1", 7, None)
    [(_node, _record, on_ack, _on_fail)] = forwarder.forwards
    assert forwarder.held == [("n1", 7)] and forwarder.released == []
    assert on_ack is not None
    on_ack()
    assert forwarder.released == [("n1", 7)]


def test_a_forward_that_cannot_be_buffered_is_counted_lost_and_releases_the_sender() -> None:
    forwarder = RecordingForwarder(accept=False)
    routes, metrics = moved_routes(forwarder)
    routes.moved("c1", entry("t/#"), "n3")
    routes.pass_on(Message("t/x", b"p", 1), "n1", 7, None)
    assert forwarder.released == [("n1", 7)]
    assert metrics["forwards_passed_on_lost"] == 1


def test_a_forward_is_passed_on_while_the_moved_session_is_still_here_handing_over() -> None:
    """The new route reaches this node before the handover finished: the session is still here (moving, its
    last messages not yet acknowledged by the new node) but no longer routed here, so a late forward must go on
    to the new node (an acknowledged QoS 1 message was lost in this window, tests/integration/test_late_forwards.py)."""
    forwarder = RecordingForwarder()
    moving = session("c1")
    moving.moving_to = "n3"
    routes, metrics = moved_routes(forwarder, {"c1": moving})
    routes.moved("c1", entry("t/#"), "n3")
    routes.pass_on(Message("t/x", b"p", 1), "n1", 7, None)
    [(node, record, _on_ack, _on_fail)] = forwarder.forwards
    assert (node, records.parse_forward(record)[2]) == ("n3", {"c1"})
    assert forwarder.held == [("n1", 7)]
    assert metrics["forwards_passed_on"] == 1


def test_a_forward_for_a_subscriber_that_moved_to_its_sender_goes_back_to_the_sender() -> None:
    """n3 forwarded a message here for c4 while this node was down (buffered); c4 registered on n3 meanwhile and
    this node, back, handed its session over to n3 before the buffered forward arrived: nothing here routes
    to c4 any more, and n3 will not deliver it by itself (it routed it here). It must go back to n3 (an
    acknowledged QoS 1 message was lost in this window: tests/integration/test_haproxy_failover.py)."""
    forwarder = RecordingForwarder()
    routes, metrics = moved_routes(forwarder)
    routes.moved("c4", entry("t/#"), "n3")
    routes.pass_on(Message("t/x", b"p", 1), "n3", 7, None)
    [(node, record, _on_ack, _on_fail)] = forwarder.forwards
    assert (node, records.parse_forward(record)[2]) == ("n3", {"c4"})
    assert forwarder.held == [("n3", 7)]
    assert metrics["forwards_passed_on"] == 1
