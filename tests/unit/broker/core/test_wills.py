"""Wills on one real Broker with `now` passed in: when the will of a connection that ended without a normal
DISCONNECT is published (at once, after its 5.0 will delay, when its session ends first), and when it is not
(a reconnect within the delay, a normal DISCONNECT). The timing that tests/integration/test_will.py can only
bound from below on the wall clock is checked here to the millisecond.

A connection's terms come from `negotiate` as the driver gets them; a watcher subscribed to the will topic
through the broker records what is published."""

from __future__ import annotations

import pytest

from tests.unit.broker.fakes import Auth_, MemoryMetadata, Policy, RecordingSink
from tests.unit.broker.wills import CLOSED_AT, CONNECTED_AT, WILL_TOPIC, Client, will_watcher, wills
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.machine.negotiation import Accepted, negotiate
from vmqpy.mqtt.packets import Connect, Properties, Will


def connect(broker: Broker, now: float, *, level: int = 5, clean_start: bool = False, expiry: int = 60,
            will_delay: int = 0) -> Client:
    """Client c1 connects with a will on WILL_TOPIC (5.0: with this session expiry and will delay)."""
    will_props = Properties(will_delay_interval=will_delay or None) if level == 5 else Properties()
    props = Properties(session_expiry_interval=expiry) if level == 5 else Properties()
    packet = Connect("c1", protocol_level=level, clean_start=clean_start,
                     will=Will(WILL_TOPIC, b"gone", 1, properties=will_props), properties=props)
    terms = negotiate(packet, broker.config, Auth_(), Policy(), now)
    assert isinstance(terms, Accepted)
    sink = RecordingSink()
    session, _present = broker.open_session(terms.client_id, terms.level, terms.clean_start, terms.expiry, sink,
                                            now)
    broker.attach(session, sink, terms.send_window, terms.max_packet_out, now)
    return Client(session, sink, terms)


def connection_lost(broker: Broker, client: Client, now: float) -> None:
    """The connection ended without a normal DISCONNECT: its will goes to the broker."""
    broker.close_session(client.session, client.sink, now, client.terms.will, client.terms.will_delay)


def disconnected(broker: Broker, client: Client, now: float) -> None:
    """The client sent a normal DISCONNECT: the driver passes no will."""
    broker.close_session(client.session, client.sink, now, None, client.terms.will_delay)


Node = tuple[Broker, MemoryMetadata]


@pytest.mark.parametrize(("level", "expiry"), [(5, 60), (5, 0), (4, 60)], ids=["v5", "v5-clean", "v311"])
def test_a_will_without_delay_is_published_at_close(node_b: Node, level: int, expiry: int) -> None:
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, level=level, expiry=expiry)
    assert wills(watcher) == []
    connection_lost(broker, client, CLOSED_AT)
    assert wills(watcher) == [b"gone"]


def test_311_has_no_will_delay(node_b: Node) -> None:
    """3.1.1 has no will properties: its will is published at close, the session kept (cleansession=0)."""
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, level=4)
    assert client.terms.will_delay == 0.0 and client.session.persistent
    connection_lost(broker, client, CLOSED_AT)
    assert wills(watcher) == [b"gone"]
    broker.tick(CLOSED_AT + 3600.0)
    assert wills(watcher) == [b"gone"]  # not again
    assert broker.sessions["c1"] is client.session


def test_a_delayed_will_is_published_when_its_delay_is_over(node_b: Node) -> None:
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=2)
    connection_lost(broker, client, CLOSED_AT)
    assert wills(watcher) == []
    broker.tick(CLOSED_AT + 1.999)
    assert wills(watcher) == []
    broker.tick(CLOSED_AT + 2.0)
    assert wills(watcher) == [b"gone"]
    broker.tick(CLOSED_AT + 61.0)  # the session ends: the will is not published again
    assert wills(watcher) == [b"gone"]
    assert "c1" not in broker.sessions


def test_the_will_delay_is_capped_by_the_session_expiry(node_b: Node) -> None:
    """Will delay 30 s, session expiry 1 s: the will is published when the session ends."""
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=1, will_delay=30)
    connection_lost(broker, client, CLOSED_AT)
    broker.tick(CLOSED_AT + 0.999)
    assert wills(watcher) == [] and broker.sessions["c1"] is client.session
    broker.tick(CLOSED_AT + 1.0)
    assert wills(watcher) == [b"gone"]
    assert "c1" not in broker.sessions
    broker.tick(CLOSED_AT + 30.0)
    assert wills(watcher) == [b"gone"]


def test_a_delayed_will_of_a_session_that_ends_at_close_is_published_at_close(node_b: Node) -> None:
    """Session expiry 0 (a clean session) caps any will delay to nothing."""
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=0, will_delay=2)
    connection_lost(broker, client, CLOSED_AT)
    assert wills(watcher) == [b"gone"]
    assert "c1" not in broker.sessions
    broker.tick(CLOSED_AT + 2.0)
    assert wills(watcher) == [b"gone"]


def test_a_reconnect_within_the_delay_resuming_the_session_cancels_the_will(node_b: Node) -> None:
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=2)
    connection_lost(broker, client, CLOSED_AT)
    again = connect(broker, CLOSED_AT + 1.999, clean_start=False, expiry=60)
    assert again.session is client.session
    broker.tick(CLOSED_AT + 2.0)
    broker.tick(CLOSED_AT + 3600.0)
    assert wills(watcher) == []


def test_a_reconnect_within_the_delay_with_clean_start_publishes_the_will_at_once(node_b: Node) -> None:
    """Clean start ends the old session, and a will is due when its session ends."""
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=2)
    connection_lost(broker, client, CLOSED_AT)
    again = connect(broker, CLOSED_AT + 1.0, clean_start=True, expiry=60)
    assert wills(watcher) == [b"gone"]
    assert again.session is not client.session
    broker.tick(CLOSED_AT + 2.0)
    assert wills(watcher) == [b"gone"]  # not again when the delay would have been over


@pytest.mark.parametrize("will_delay", [0, 2])
def test_a_normal_disconnect_publishes_no_will(node_b: Node, will_delay: int) -> None:
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=will_delay)
    disconnected(broker, client, CLOSED_AT)
    broker.tick(CLOSED_AT + will_delay)
    broker.tick(CLOSED_AT + 60.0)  # the session ends
    assert "c1" not in broker.sessions
    assert wills(watcher) == []


@pytest.mark.parametrize(("clean_start", "published"), [(False, []), (True, [b"gone"])], ids=["resume", "clean"])
def test_a_connect_on_another_node_within_the_delay_is_a_reconnect(
        node_b: Node, clean_start: bool, published: list[bytes]) -> None:
    """The client id registers on node c while its will waits here: resuming the session there cancels the
    will, a clean start there ends the session and publishes it here at once."""
    broker, _metadata = node_b
    watcher = will_watcher(broker)
    client = connect(broker, CONNECTED_AT, expiry=60, will_delay=2)
    connection_lost(broker, client, CLOSED_AT)
    broker.migration.hand_over("c1", clean_start, "c", CLOSED_AT + 1.0)
    assert wills(watcher) == published
    broker.tick(CLOSED_AT + 2.0)
    broker.tick(CLOSED_AT + 3600.0)
    assert wills(watcher) == published
