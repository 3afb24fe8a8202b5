"""Three of VerneMQ's options, sans-I/O: `max_subscriptions_per_client` and `retry_interval` on the connection
machine (with a session and a recording sink), `upgrade_outgoing_qos` on the router and the broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.broker.fakes import Auth_, MemoryMetadata, Policy, RecordingSink
from tests.unit.broker.sessions import entry, online
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.core.router import Router, outgoing_qos
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.decisions import Register, Reply, SubscribeTo, suback_codes
from vmqpy.broker.machine.protocol import RETRY_RECHECK, ConnectionMachine
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import (
    Connect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
)
from vmqpy.sessions.message import Message
from vmqpy.storage import Storage

T0 = 1_000.0


def connected(config: Config, level: int, held: tuple[str, ...] = ()) -> tuple[ConnectionMachine, RecordingSink]:
    """A machine past CONNECT of protocol `level`, its session attached to a recording sink and holding
    subscriptions to `held`."""
    m = ConnectionMachine(config, Auth_(), Policy())
    [decision] = m.receive(Connect("c1", protocol_level=level), T0)
    assert isinstance(decision, Register)
    session = Session("c1", protocol_level=level, expiry_interval=0.0, max_inflight=20, max_online=100,
                      max_offline=100)
    for topic_filter in held:
        session.subscriptions[topic_filter] = entry(topic_filter)
    sink = RecordingSink()
    m.connected(session)
    session.attach(sink, 65535, 0, T0)
    return m, sink


def subscribe(*filters: str) -> Subscribe:
    return Subscribe(7, [Subscription(f) for f in filters])


# ---------------------------------------------------------------------------------------------- max_subscriptions


@pytest.mark.parametrize(("limit", "held", "filters", "refused"), [
    (0, ("a", "b", "c"), ("d", "e"), {}),  # 0: no limit
    (2, (), ("a", "b", "c"), {2: rc.QUOTA_EXCEEDED}),
    (2, ("a",), ("a", "b", "c"), {2: rc.QUOTA_EXCEEDED}),  # a re-subscribe does not count twice
    (2, ("a", "b"), ("b", "a"), {}),  # replacing held subscriptions is always allowed
    (2, ("a",), ("b", "b", "c"), {2: rc.QUOTA_EXCEEDED}),  # a filter named twice counts once
    (2, (), ("a/#/b", "x", "y"), {}),  # an invalid filter (refused by the broker) takes no room
    (3, ("$share/g/t",), ("$share/g/t", "$share/h/t", "t", "u"), {3: rc.QUOTA_EXCEEDED}),
])
def test_filters_beyond_the_limit_are_refused_with_quota_exceeded(
    limit: int, held: tuple[str, ...], filters: tuple[str, ...], refused: dict[int, int]
) -> None:
    m, _sink = connected(Config(max_subscriptions_per_client=limit), 5, held)
    packet = subscribe(*filters)
    assert list(m.receive(packet, T0)) == [SubscribeTo(packet, refused)]


def test_311_gets_the_failure_code() -> None:
    m, _sink = connected(Config(max_subscriptions_per_client=1), 4, ("a",))
    packet = subscribe("a", "b")
    assert list(m.receive(packet, T0)) == [SubscribeTo(packet, {1: rc.V311_SUBACK_FAILURE})]


@pytest.mark.parametrize(("level", "code"), [(5, rc.QUOTA_EXCEEDED), (4, rc.V311_SUBACK_FAILURE)])
def test_a_subscribe_refused_whole_is_answered_at_once(level: int, code: int) -> None:
    m, _sink = connected(Config(max_subscriptions_per_client=2), level, ("a", "b"))
    assert list(m.receive(subscribe("c", "d"), T0)) == [Reply(Suback(7, [code, code]))]


@pytest.mark.parametrize(("count", "refused", "granted", "codes"), [
    (3, {}, [0, 1, 2], [0, 1, 2]),
    (3, {1: 0x97}, [0, 2], [0, 0x97, 2]),
    (3, {0: 0x80, 2: 0x80}, [1], [0x80, 1, 0x80]),
    (2, {0: 0x97, 1: 0x97}, [], [0x97, 0x97]),
])
def test_suback_codes_put_the_refusals_in_place(
    count: int, refused: dict[int, int], granted: list[int], codes: list[int]
) -> None:
    assert suback_codes(count, refused, granted) == codes


# ---------------------------------------------------------------------------------------------- retry_interval


def deliver(m: ConnectionMachine, qos: int, now: float) -> int:
    session = m.state.session
    assert session is not None
    session.deliver(Message("t", b"x", qos), qos, False, [], now)
    return max(session.inflight)


def resent(sink: RecordingSink, before: int) -> list[Packet]:
    return sink.packets[before:]


def test_311_resends_an_unacknowledged_publish_with_dup_every_interval() -> None:
    m, sink = connected(Config(retry_interval=20.0), 4)
    assert m.retry_deadline() is None
    packet_id = deliver(m, 1, T0)
    assert m.retry_deadline() == T0 + 20
    before = len(sink.packets)
    assert m.handle_retry(T0 + 19) == T0 + 20
    assert resent(sink, before) == []
    assert m.handle_retry(T0 + 20) == T0 + 40
    [again] = resent(sink, before)
    assert isinstance(again, Publish) and (again.packet_id, again.dup, again.qos) == (packet_id, True, 1)
    m.receive(Puback(packet_id), T0 + 21)
    assert m.retry_deadline() is None
    assert m.handle_retry(T0 + 100) is None


def test_311_resends_the_pubrel_of_an_unfinished_qos2_flow() -> None:
    m, sink = connected(Config(retry_interval=20.0), 4)
    packet_id = deliver(m, 2, T0)
    assert list(m.receive(Pubrec(packet_id), T0 + 5)) == [Reply(Pubrel(packet_id))]  # a clean session: at once
    assert m.retry_deadline() == T0 + 25  # counted from the PUBREL
    before = len(sink.packets)
    m.handle_retry(T0 + 25)
    assert resent(sink, before) == [Pubrel(packet_id)]
    m.receive(Pubcomp(packet_id), T0 + 26)
    assert m.retry_deadline() is None


def test_each_message_has_its_own_deadline() -> None:
    m, sink = connected(Config(retry_interval=10.0), 4)
    first = deliver(m, 1, T0)
    second = deliver(m, 1, T0 + 4)
    before = len(sink.packets)
    assert m.handle_retry(T0 + 10) == T0 + 14
    assert [p.packet_id for p in resent(sink, before) if isinstance(p, Publish)] == [first]
    assert m.handle_retry(T0 + 14) == T0 + 20
    assert [p.packet_id for p in resent(sink, before) if isinstance(p, Publish)] == [first, second]


@pytest.mark.parametrize(("level", "interval"), [(5, 20.0), (4, 0.0), (3, 0.0)])
def test_no_resend_for_50_clients_nor_with_retry_interval_0(level: int, interval: float) -> None:
    m, sink = connected(Config(retry_interval=interval), level)
    deliver(m, 1, T0)
    before = len(sink.packets)
    assert m.retry_deadline() is None
    assert m.handle_retry(T0 + 1000) is None
    assert resent(sink, before) == []


def test_mqtt_31_resends_too() -> None:
    m, _sink = connected(Config(retry_interval=20.0), 3)
    deliver(m, 1, T0)
    assert m.retry_deadline() == T0 + 20


def test_a_connection_that_cannot_take_more_is_looked_at_again_later() -> None:
    m, sink = connected(Config(retry_interval=20.0), 4)
    deliver(m, 1, T0)
    sink.writable = False
    before = len(sink.packets)
    assert m.handle_retry(T0 + 30) == T0 + 30 + RETRY_RECHECK
    assert resent(sink, before) == []
    sink.writable = True
    m.handle_retry(T0 + 31)
    assert len(resent(sink, before)) == 1


def test_no_resend_once_the_connection_is_closed() -> None:
    m, _sink = connected(Config(retry_interval=20.0), 4)
    deliver(m, 1, T0)
    m.closed()
    assert m.retry_deadline() is None


def test_a_new_connection_starts_the_count_from_its_own_resends() -> None:
    m, _first = connected(Config(retry_interval=20.0), 4)
    deliver(m, 1, T0)
    session = m.state.session
    assert session is not None
    session.detach(T0 + 5)
    assert session.next_resend(20.0) is None
    second = RecordingSink()
    session.attach(second, 65535, 0, T0 + 50)  # resends what is in flight, with DUP
    assert [p.dup for p in second.publishes()] == [True]
    assert session.next_resend(20.0) == T0 + 70


# ---------------------------------------------------------------------------------------------- upgrade_outgoing_qos


@pytest.mark.parametrize(("message_qos", "subscription_qos", "upgrade", "qos"), [
    (0, 1, False, 0), (0, 1, True, 1), (1, 2, True, 2), (0, 2, True, 2),
    (2, 1, False, 1), (2, 1, True, 1),  # never above the subscription's
    (2, 0, True, 0),
])
def test_outgoing_qos(message_qos: int, subscription_qos: int, upgrade: bool, qos: int) -> None:
    assert outgoing_qos(message_qos, subscription_qos, upgrade) == qos


@pytest.mark.parametrize(("upgrade", "qos", "with_id"), [(False, 0, False), (True, 2, True)])
def test_the_router_upgrades_only_when_asked(upgrade: bool, qos: int, with_id: bool) -> None:
    sessions: dict[str, Session] = {}
    sink = online(sessions, "c")
    router = Router(sessions)
    router.upgrade_qos = upgrade
    router.add("c", entry("a/#", qos=2))
    router.add("c", entry("a/+", qos=1))  # two matching subscriptions: the slow path
    router.route(Message("a/b", b"x", 0), T0)
    (publish,) = sink.publishes()
    assert publish.qos == qos and (publish.packet_id is not None) == with_id


@pytest.fixture
def upgrading_broker(tmp_path: Path) -> Iterator[Broker]:
    storage = Storage(tmp_path / "b.db")
    storage.open()
    try:
        yield Broker(Config(nodename="b", upgrade_outgoing_qos=True), SessionStore(storage), MemoryMetadata())
    finally:
        storage.close()


def test_the_broker_upgrades_live_and_retained_messages(upgrading_broker: Broker) -> None:
    broker = upgrading_broker
    broker.publish(Message("r/1", b"kept", 0, retain=True), T0)
    sink = RecordingSink()
    session, _present = broker.open_session("c1", 4, True, 0.0, sink, T0)
    broker.attach(session, sink, 65535, 0, T0)
    codes, added = broker.subscribe(session, [Subscription("r/1", entry("r/1", qos=1).options)], None)
    broker.deliver_retained(session, added, T0)
    broker.publish(Message("r/1", b"live", 0), T0)
    assert codes == [1]
    assert [(p.payload, p.qos) for p in sink.publishes()] == [(b"kept", 1), (b"live", 1)]
