"""The per-connection MQTT machine (vmqpy/broker/machine/protocol.py): concrete packets in, decisions out.

Tables for the phase rules (every packet type before CONNECT, after it, a second CONNECT), for `negotiate`
(every refusal code, the CONNACK properties, the terms the connection runs with), for PUBLISH and its
acknowledgements in both QoS, inbound Receive Maximum (0x93) and inbound topic aliases; hypothesis properties
for outbound topic aliases (a client that applies them reads every topic back, never more aliases than allowed)
and for inbound flow control (the machine refuses exactly the PUBLISH that exceeds the Receive Maximum).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.broker.fakes import Auth_, Policy
from vmqpy.broker.core.router import RouteResult
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.decisions import (
    Close,
    RecordIncoming,
    RefuseConnect,
    Register,
    Reply,
    Route,
    Send,
    SubscribeTo,
    Unanswered,
    UnsubscribeFrom,
)
from vmqpy.broker.machine.negotiation import Accepted, Refused, keepalive_check_after, keepalive_expired, negotiate
from vmqpy.broker.machine.protocol import ConnectionMachine, Phase
from vmqpy.broker.machine.topic_aliases import OutboundAliases
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import ProtocolViolation, RemoteProtocolError
from vmqpy.mqtt.packets import (
    Auth,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from vmqpy.sessions.message import Message

NOW = 1_000.0
CONFIG = Config(max_inflight_messages=4)


def machine(config: Config = CONFIG, policy: Policy | None = None, level: int = 5, **props: Any) -> ConnectionMachine:
    """A machine past CONNECT (session attached)."""
    m = ConnectionMachine(config, Auth_(), policy or Policy(), new_client_id=lambda: "assigned-1")
    [decision] = m.receive(Connect("c1", protocol_level=level, properties=Properties(**props)), NOW)
    assert isinstance(decision, Register)
    m.connected(Session("c1", protocol_level=level, expiry_interval=0.0, max_inflight=20, max_online=100,
                        max_offline=100))
    return m


EVERY_CLIENT_PACKET = [
    Publish("t", b"x"), Puback(1), Pubrec(1), Pubrel(1), Pubcomp(1), Subscribe(1, [Subscription("t")]),
    Unsubscribe(1, ["t"]), Pingreq(), Disconnect(), Auth(),
]


# ---------------------------------------------------------------------------------------------- phases


@pytest.mark.parametrize("packet", EVERY_CLIENT_PACKET, ids=lambda p: type(p).__name__)
def test_nothing_but_connect_before_connect(packet: Any) -> None:
    m = ConnectionMachine(CONFIG, Auth_(), Policy())
    with pytest.raises(ProtocolViolation, match="before CONNECT"):
        m.receive(packet, NOW)


@pytest.mark.parametrize("packet", [*EVERY_CLIENT_PACKET, Connect("again")], ids=lambda p: type(p).__name__)
def test_nothing_is_read_while_registering(packet: Any) -> None:
    m = ConnectionMachine(CONFIG, Auth_(), Policy())
    m.receive(Connect("c1"), NOW)
    assert m.state.phase is Phase.REGISTERING
    with pytest.raises(ProtocolViolation):
        m.receive(packet, NOW)


def test_a_second_connect_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolViolation, match="second CONNECT"):
        machine().receive(Connect("c1", protocol_level=5), NOW)


def test_auth_is_refused_without_an_authentication_method() -> None:
    with pytest.raises(ProtocolViolation, match="AUTH"):
        machine().receive(Auth(), NOW)


@pytest.mark.parametrize(("packet", "expected"), [
    (Pingreq(), [Send(Pingresp())]),
    (Subscribe(7, [Subscription("a/#")]), [SubscribeTo(Subscribe(7, [Subscription("a/#")]))]),
    (Unsubscribe(8, ["a/#"]), [UnsubscribeFrom(Unsubscribe(8, ["a/#"]))]),
    (Disconnect(), [Close(None, "client disconnected", normal=True, by_client=True)]),
    (Disconnect(rc.DISCONNECT_WITH_WILL), [Close(None, "client disconnected", normal=False, by_client=True)]),
    (Pubrel(9), [Reply(Pubcomp(9, rc.PACKET_IDENTIFIER_NOT_FOUND))]),
    (Puback(3), []),  # unknown ids are ignored
    (Pubcomp(3), []),
], ids=lambda v: type(v).__name__ if not isinstance(v, list) else "")
def test_decisions_after_connect(packet: Any, expected: list[Any]) -> None:
    assert list(machine().receive(packet, NOW)) == expected


def test_pubrel_of_an_unknown_id_is_answered_0_on_311() -> None:
    assert list(machine(level=4).receive(Pubrel(9), NOW)) == [Reply(Pubcomp(9, 0))]


def test_netsplit_refusals_per_operation() -> None:
    m = machine(policy=Policy("publish", "subscribe", "unsubscribe"))
    assert list(m.receive(Publish("t", b"x", 1, packet_id=1), NOW)) == [
        Reply(Puback(1, rc.IMPLEMENTATION_SPECIFIC_ERROR), note="publish refused: the cluster is not ready")]
    assert list(m.receive(Publish("t", b"x", 2, packet_id=2), NOW)) == [
        Reply(Pubrec(2, rc.IMPLEMENTATION_SPECIFIC_ERROR), note="publish refused: the cluster is not ready")]
    assert list(m.receive(Publish("t", b"x", 0), NOW)) == [Unanswered("publish refused: the cluster is not ready")]
    assert list(m.receive(Subscribe(3, [Subscription("a"), Subscription("b")]), NOW)) == [
        Reply(Suback(3, [rc.IMPLEMENTATION_SPECIFIC_ERROR] * 2))]
    assert list(m.receive(Unsubscribe(4, ["a"]), NOW)) == [Reply(Unsuback(4, [rc.IMPLEMENTATION_SPECIFIC_ERROR]))]
    old = machine(level=4, policy=Policy("publish", "subscribe", "unsubscribe"))
    assert list(old.receive(Unsubscribe(4, ["a"]), NOW)) == []  # 3.1.1 has no refusal: the client retries
    assert list(old.receive(Subscribe(3, [Subscription("a")]), NOW)) == [Reply(Suback(3, [rc.V311_SUBACK_FAILURE]))]


def test_session_expiry_on_disconnect() -> None:
    m = machine(session_expiry_interval=60)
    m.receive(Disconnect(properties=Properties(session_expiry_interval=0xFFFFFFFF)), NOW)
    assert m.state.session is not None and m.state.session.expiry_interval is None
    with pytest.raises(ProtocolViolation, match="after 0"):
        machine().receive(Disconnect(properties=Properties(session_expiry_interval=5)), NOW)


# ---------------------------------------------------------------------------------------------- negotiate


@pytest.mark.parametrize(("connect", "auth", "policy", "code"), [
    (Connect("", protocol_level=4, clean_start=False), None, (), rc.CLIENT_IDENTIFIER_NOT_VALID),
    (Connect("x" * 30), None, (), rc.CLIENT_IDENTIFIER_NOT_VALID),
    (Connect("c", protocol_level=5, properties=Properties(authentication_method="SCRAM")), None, (),
     rc.BAD_AUTHENTICATION_METHOD),
    (Connect("c"), rc.BAD_USER_NAME_OR_PASSWORD, (), rc.BAD_USER_NAME_OR_PASSWORD),
    (Connect("c"), rc.NOT_AUTHORIZED, (), rc.NOT_AUTHORIZED),
    (Connect("c"), None, ("register",), rc.SERVER_UNAVAILABLE),
    (Connect("c", protocol_level=5, will=Will("w/+/x", b"")), None, (), rc.TOPIC_NAME_INVALID),
    (Connect("c", protocol_level=4, will=Will("w/#", b"")), None, (), rc.TOPIC_NAME_INVALID),
])
def test_every_refusal(connect: Connect, auth: int | None, policy: tuple[str, ...], code: int) -> None:
    config = replace(CONFIG, max_client_id_size=23)
    answer = negotiate(connect, config, Auth_(auth), Policy(*policy), NOW)
    assert isinstance(answer, Refused) and answer.reason_code == code
    m = ConnectionMachine(config, Auth_(auth), Policy(*policy))
    [decision] = m.receive(connect, NOW)
    assert isinstance(decision, RefuseConnect) and decision.reason_code == code
    assert m.state.phase is Phase.CLOSED


def test_accepted_terms_and_connack_properties_v5() -> None:
    config = replace(CONFIG, max_keepalive=30, max_message_size=1000, receive_max_broker=10,
                     topic_alias_max_client=5, topic_alias_max_broker=8, receive_max_client=50)
    will = Will("w/t", b"bye", 1, properties=Properties(will_delay_interval=7))
    connect = Connect("", protocol_level=5, keep_alive=0, will=will, properties=Properties(
        session_expiry_interval=0xFFFFFFFF, receive_maximum=100, topic_alias_maximum=3, maximum_packet_size=512))
    answer = negotiate(connect, config, Auth_(), Policy(), NOW, new_client_id=lambda: "assigned-1")
    assert isinstance(answer, Accepted)
    assert (answer.client_id, answer.expiry, answer.requested_expiry, answer.keep_alive) == ("assigned-1", None, -1, 30)
    assert (answer.send_window, answer.max_packet_out, answer.aliases_out) == (50, 512, 3)
    assert answer.will is not None and answer.will.topic == "w/t" and answer.will_delay == 7.0
    assert answer.connack == Properties(assigned_client_identifier="assigned-1", topic_alias_maximum=5,
                                        receive_maximum=10, server_keep_alive=30, maximum_packet_size=1000)


def test_accepted_terms_v311() -> None:
    config = replace(CONFIG, persistent_client_expiration=3600.0, max_keepalive=30)
    answer = negotiate(Connect("c", protocol_level=4, clean_start=False, keep_alive=0), config, Auth_(), Policy(), NOW)
    assert isinstance(answer, Accepted)
    assert (answer.expiry, answer.keep_alive, answer.connack) == (3600.0, 0, Properties())  # 3.1.1: no properties
    assert (answer.send_window, answer.aliases_out) == (65535, 0)


def test_receive_maximum_defaults_to_max_inflight_messages() -> None:
    answer = negotiate(Connect("c", protocol_level=5), CONFIG, Auth_(), Policy(), NOW)
    assert isinstance(answer, Accepted) and answer.connack.receive_maximum == CONFIG.max_inflight_messages


# ---------------------------------------------------------------------------------------------- PUBLISH


def routed(m: ConnectionMachine, packet: Publish, **result: Any) -> list[Any]:
    [route] = m.receive(packet, NOW)
    assert isinstance(route, Route)
    return list(m.routed(route.qos, route.packet_id, RouteResult(**result)))


def test_qos1_is_acknowledged_after_routing_and_counted_until_the_puback_leaves() -> None:
    m = machine()
    [reply] = routed(m, Publish("t", b"x", 1, packet_id=5), durable=True)
    assert reply == Reply(Puback(5), durable=True)
    assert m.state.unacked_qos1 == 1
    m.reply_sent(reply.packet)
    assert m.state.unacked_qos1 == 0


def test_qos2_waits_for_pubrel_and_a_resend_is_not_routed_again() -> None:
    m = machine()
    # the machine writes no storage: the journal records of the packet id are decisions, before the answer
    assert routed(m, Publish("t", b"x", 2, packet_id=6)) == [RecordIncoming(6, True), Reply(Pubrec(6), durable=False)]
    assert list(m.receive(Publish("t", b"x", 2, dup=True, packet_id=6), NOW)) == [Reply(Pubrec(6))]
    assert list(m.receive(Pubrel(6), NOW)) == [RecordIncoming(6, False), Reply(Pubcomp(6))]
    assert m.state.session is not None and not m.state.session.awaiting_release


def test_a_refused_forward_is_never_acknowledged() -> None:
    m = machine()
    assert routed(m, Publish("t", b"x", 1, packet_id=5), refused=True) == [
        Reply(Puback(5, rc.QUOTA_EXCEEDED), note="publish refused: cluster buffer full", warn=True)]
    assert routed(machine(level=4), Publish("t", b"x", 1, packet_id=5), refused=True) == [
        Unanswered("publish refused: cluster buffer full", warn=True)]


def test_receive_maximum_exceeded_is_0x93() -> None:
    m = machine()  # announced 4 (max_inflight_messages)
    for packet_id in range(1, 3):
        routed(m, Publish("t", b"x", 1, packet_id=packet_id))
    for packet_id in range(3, 5):
        routed(m, Publish("t", b"x", 2, packet_id=packet_id))
    assert list(m.receive(Publish("t", b"x", 0), NOW))  # QoS 0 does not count
    with pytest.raises(RemoteProtocolError) as caught:
        m.receive(Publish("t", b"x", 2, packet_id=9), NOW)
    assert caught.value.reason_code == rc.RECEIVE_MAXIMUM_EXCEEDED


def test_inbound_topic_aliases() -> None:
    m = machine()
    [route] = m.receive(Publish("long/topic", b"1", properties=Properties(topic_alias=2)), NOW)
    assert isinstance(route, Route) and route.message.topic == "long/topic"
    [route] = m.receive(Publish("", b"2", properties=Properties(topic_alias=2)), NOW)
    assert isinstance(route, Route) and route.message.topic == "long/topic"
    with pytest.raises(ProtocolViolation, match="unknown topic alias"):
        m.receive(Publish("", b"3", properties=Properties(topic_alias=3)), NOW)
    for alias in (0, CONFIG.topic_alias_max_client + 1):
        with pytest.raises(RemoteProtocolError) as caught:
            m.receive(Publish("t", b"4", properties=Properties(topic_alias=alias)), NOW)
        assert caught.value.reason_code == rc.TOPIC_ALIAS_INVALID


def test_outbound_aliases_only_when_the_client_allows_them() -> None:
    assert machine().state.aliases_out is None  # the client announced no Topic Alias Maximum
    assert machine(level=4).state.aliases_out is None
    assert machine(replace(CONFIG, topic_alias_max_broker=0), topic_alias_maximum=10).state.aliases_out is None
    aliases = machine(replace(CONFIG, topic_alias_max_broker=3), topic_alias_maximum=10).state.aliases_out
    assert aliases is not None and aliases.maximum == 3


# ---------------------------------------------------------------------------------------------- properties


@given(st.integers(1, 5), st.lists(st.sampled_from([f"t/{i}" for i in range(8)]), max_size=60))
def test_a_client_applying_the_aliases_reads_every_topic(maximum: int, topics: list[str]) -> None:
    aliases = OutboundAliases(maximum)
    client: dict[int, str] = {}  # the client's side of the mapping
    for topic in topics:
        alias, known = aliases.alias_for(topic)
        assert 1 <= alias <= maximum
        if known:
            assert client[alias] == topic  # sent with an empty topic: the client resolves it
        else:
            client[alias] = topic  # sent with the topic: the client (re)maps the alias
        assert len(aliases) <= maximum


@given(st.lists(st.sampled_from(["pub1", "pub2", "ack", "rel"]), max_size=80))
def test_0x93_exactly_when_the_client_exceeds_the_receive_maximum(steps: list[str]) -> None:
    m = machine()
    limit = CONFIG.max_inflight_messages
    pubacks: list[Any] = []
    qos2: list[int] = []
    packet_id = 0
    for step in steps:
        if step in ("pub1", "pub2"):
            packet_id += 1
            outstanding = len(pubacks) + len(qos2)
            packet = Publish("t", b"x", 1 if step == "pub1" else 2, packet_id=packet_id)
            if outstanding >= limit:
                with pytest.raises(RemoteProtocolError):
                    m.receive(packet, NOW)
                return
            reply = routed(m, packet)[-1]  # a QoS 2 PUBREC after its journal record
            (pubacks if step == "pub1" else qos2).append(reply.packet if step == "pub1" else packet_id)
        elif step == "ack" and pubacks:
            m.reply_sent(pubacks.pop(0))
        elif step == "rel" and qos2:
            m.receive(Pubrel(qos2.pop(0)), NOW)


def test_a_will_is_a_message_of_the_client() -> None:
    m = ConnectionMachine(CONFIG, Auth_(), Policy())
    m.receive(Connect("c9", will=Will("w", b"x", 1, retain=True)), NOW)
    assert m.state.will is not None
    assert (m.state.will.topic, m.state.will.publisher, m.state.will.retain) == ("w", "c9", True)
    assert isinstance(m.state.will, Message)


# ---------------------------------------------------------------------------------------------- keep alive


@pytest.mark.parametrize(("keep_alive", "idle", "expired", "check_after"), [
    (1, 0.0, False, 1.5),
    (1, 1.0, False, 0.5),
    (1, 1.499, False, 0.05),  # 1 ms before the limit: re-checked no sooner than 0.05 s
    (1, 1.5, True, 0.05),  # silent for 1.5 x the keep alive: gone
    (1, 7.0, True, 0.05),
    (0, 1.499, False, None),  # keep alive 0: never
    (0, 1.5, False, None),
    (0, 1e9, False, None),
    (65535, 1.499, False, 98302.5 - 1.499),
    (65535, 1.5, False, 98301.0),
    (65535, 98302.499, False, 0.05),
    (65535, 98302.5, True, 0.05),
])
@pytest.mark.parametrize("last", [0.0, 1.853, 1014.93, 44538.719])  # last + limit - last < limit for 1.5, 15, 98302.5
def test_keepalive_expires_after_one_and_a_half_intervals(
        keep_alive: int, idle: float, expired: bool, check_after: float | None, last: float) -> None:
    assert keepalive_expired(keep_alive, last, last + idle) is expired
    assert keepalive_check_after(keep_alive, idle) == (None if check_after is None else pytest.approx(check_after))


def test_publish_unwraps_the_route_of_receive() -> None:
    """`publish` (a reading aid: the driver goes through `receive`) gives the message `receive` wraps in a Route,
    and the same answers."""
    fast, table = machine(), machine()
    packet = Publish("t/1", b"x", 1, packet_id=3, properties=Properties(topic_alias=1))
    message = fast.publish(packet, NOW)
    [route] = table.receive(Publish("t/1", b"x", 1, packet_id=3, properties=Properties(topic_alias=1)), NOW)
    assert isinstance(message, Message) and isinstance(route, Route)
    assert (message.topic, message.payload, message.qos) == (route.message.topic, route.message.payload, 1)
    refused = machine(policy=Policy("publish"))
    assert refused.publish(Publish("t", b"x", 1, packet_id=4), NOW) == (
        Reply(Puback(4, rc.IMPLEMENTATION_SPECIFIC_ERROR), note="publish refused: the cluster is not ready"),)


def test_receive_maximum_counts_this_connection_only() -> None:
    """MQTT 5.0 4.9: the quota starts afresh on each connection; QoS 2 ids still waiting for PUBREL from an
    earlier connection of the session do not count against it (they did: a client within its quota got 0x93)."""
    m = machine()  # announced 4
    session = m.state.session
    assert session is not None
    session.await_release({101, 102, 103, 104})  # left by the previous connection
    for packet_id in range(1, 5):
        routed(m, Publish("t", b"x", 2, packet_id=packet_id))
    with pytest.raises(RemoteProtocolError) as caught:
        m.receive(Publish("t", b"x", 1, packet_id=9), NOW)
    assert caught.value.reason_code == rc.RECEIVE_MAXIMUM_EXCEEDED
    assert list(m.receive(Pubrel(101), NOW)) == [RecordIncoming(101, False), Reply(Pubcomp(101))]  # an old one
    # released: no room made
    with pytest.raises(RemoteProtocolError):
        m.receive(Publish("t", b"x", 1, packet_id=10), NOW)
    m.receive(Pubrel(1), NOW)  # one of this connection's: room for one
    assert list(m.receive(Publish("t", b"x", 1, packet_id=11), NOW))


def test_a_certified_connect_logs_in_as_the_certificate() -> None:
    """A use_identity_as_username listener: the CONNECT is accepted as the certificate's CN, whatever user name
    and password it carries (in both builds: compiled, this path once failed with 'Unspecified error')."""
    m = ConnectionMachine(CONFIG, Auth_(), Policy(), new_client_id=lambda: "assigned-1")
    m.identity = "CN=client"
    [decision] = m.receive(Connect("c1", protocol_level=5, username="someone", password=b"wrong"), NOW)
    assert isinstance(decision, Register)
    assert decision.accepted.username == "CN=client" and decision.accepted.client_id == "c1"
