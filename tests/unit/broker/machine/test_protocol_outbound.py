"""The outbound rules of the connection machine (vmqpy/broker/machine/protocol.py) that depend on the protocol level: a
table per rule, one row per (level, situation) -> the decisions, reason codes included. The driver only carries
them out (vmqpy/broker/driver/connection.py: `Send` writes, `Close` writes the DISCONNECT its reason code makes, then
closes). Also the machine's one deadline (`next_deadline`, `handle_timer`): the CONNECT timeout and a refused
login's CONNACK."""

from __future__ import annotations

import pytest

from tests.unit.broker.fakes import Auth_, Policy
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.decisions import Close, RefuseConnect, Register, Send
from vmqpy.broker.machine.protocol import ConnectionMachine, Phase
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Connack, Connect, Properties

NOW = 1_000.0
CONFIG = Config(connect_timeout=10.0, failed_login_delay=2.0)


def fresh(refusal: int | None = None) -> ConnectionMachine:
    """A machine before CONNECT."""
    return ConnectionMachine(CONFIG, Auth_(refusal), Policy(), new_client_id=lambda: "assigned-1")


def registering(level: int) -> ConnectionMachine:
    """A machine whose CONNECT of protocol `level` is accepted and registers."""
    m = fresh()
    [decision] = m.receive(Connect("c1", protocol_level=level), NOW)
    assert isinstance(decision, Register)
    return m


def connected(level: int) -> ConnectionMachine:
    """A machine past CONNECT, its session attached."""
    m = registering(level)
    m.connected(Session("c1", protocol_level=level, expiry_interval=0.0, max_inflight=20, max_online=100,
                        max_offline=100))
    return m


def with_reference(why: str, reference: str) -> Properties:
    props = Properties(reason_string=why)
    props.server_reference = reference
    return props


# ---------------------------------------------------------------------------------------------- takeover


@pytest.mark.parametrize(("level", "reason_code", "expected"), [
    (5, rc.SESSION_TAKEN_OVER, Close(rc.SESSION_TAKEN_OVER, "session taken over")),
    (4, rc.SESSION_TAKEN_OVER, Close(None, "session taken over")),
    (3, rc.SESSION_TAKEN_OVER, Close(None, "session taken over")),
    (5, rc.QUOTA_EXCEEDED,
     Close(rc.QUOTA_EXCEEDED, "disconnected: it held its publishers back for queue.max_stall (queue.overflow)")),
    (4, rc.QUOTA_EXCEEDED,
     Close(None, "disconnected: it held its publishers back for queue.max_stall (queue.overflow)")),
    (5, rc.ADMINISTRATIVE_ACTION, Close(rc.ADMINISTRATIVE_ACTION, "disconnected by an operator")),
    (4, rc.ADMINISTRATIVE_ACTION, Close(None, "disconnected by an operator")),
])
def test_taken_over(level: int, reason_code: int, expected: Close) -> None:
    assert connected(level).taken_over(reason_code) == expected


# ---------------------------------------------------------------------------------------------- moving away

LEAVES = "disconnecting: this node leaves the cluster"


@pytest.mark.parametrize(("level", "connect", "reference", "expected"), [
    (5, True, "b.example:1883",
     Close(rc.USE_ANOTHER_SERVER, LEAVES, normal=True, server_reference="b.example:1883")),
    (5, True, None, Close(rc.USE_ANOTHER_SERVER, LEAVES, normal=True)),
    (4, True, "b.example:1883", Close(None, LEAVES, normal=True)),  # 3.1.1 cannot be told where to go
    (5, False, "b.example:1883", Close(None, LEAVES, normal=True)),  # not connected yet: no DISCONNECT
])
def test_moved_away(level: int, connect: bool, reference: str | None, expected: Close) -> None:
    m = connected(level) if connect else registering(level)
    assert m.moved_away(reference) == expected


# ---------------------------------------------------------------------------------------------- redirect

WHY = "assigned to b"


@pytest.mark.parametrize(("level", "expected"), [
    (5, (Send(Connack(False, rc.USE_ANOTHER_SERVER, with_reference(WHY, "b:1883"))), Close(None, WHY))),
    (4, ()),  # 3.1.1 cannot be redirected: served here
    (3, ()),
])
def test_redirect(level: int, expected: tuple[object, ...]) -> None:
    m = registering(level)
    assert m.redirect("b:1883", WHY) == expected
    assert (m.state.phase is Phase.CLOSED) == bool(expected)


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("level", "reason_code", "connack"), [
    (5, rc.NOT_AUTHORIZED, Connack(False, rc.NOT_AUTHORIZED, Properties(reason_string="no"))),
    (5, rc.SERVER_UNAVAILABLE, Connack(False, rc.SERVER_UNAVAILABLE, Properties(reason_string="no"))),
    (4, rc.NOT_AUTHORIZED, Connack(False, rc.V311_NOT_AUTHORIZED)),  # no reason string before 5.0
    (4, rc.SERVER_BUSY, Connack(False, rc.V311_SERVER_UNAVAILABLE)),
    (4, rc.BAD_USER_NAME_OR_PASSWORD, Connack(False, rc.V311_BAD_USERNAME_OR_PASSWORD)),
    (3, rc.CLIENT_IDENTIFIER_NOT_VALID, Connack(False, rc.V311_IDENTIFIER_REJECTED)),
])
def test_refusal(level: int, reason_code: int, connack: Connack) -> None:
    m = registering(level)
    assert m.refusal(reason_code, "no") == (Send(connack), Close(None, "no"))
    assert m.state.phase is Phase.CLOSED


# ---------------------------------------------------------------------------------------------- protocol errors


@pytest.mark.parametrize(("level", "connect", "connect_level", "expected"), [
    (5, True, 5, (Close(rc.PROTOCOL_ERROR, "protocol error"),)),  # DISCONNECT with the code
    (4, True, 4, (Close(None, "protocol error"),)),  # 3.1.1: the socket is closed
    (3, True, 3, (Close(None, "protocol error"),)),
    (4, False, 5, (Send(Connack(False, rc.PROTOCOL_ERROR)), Close(None, "protocol error"))),  # a bad 5.0 CONNECT
    (4, False, 4, (Close(None, "protocol error"),)),  # a bad 3.1.1 CONNECT
    (4, False, None, (Close(None, "protocol error"),)),  # not even its level was read
])
def test_protocol_error(level: int, connect: bool, connect_level: int | None, expected: tuple[object, ...]) -> None:
    m = connected(level) if connect else fresh()
    assert m.protocol_error(rc.PROTOCOL_ERROR, connect_level) == expected
    assert m.state.phase is Phase.CLOSED


def test_a_bad_5_connack_is_encoded_at_5() -> None:
    """The CONNACK of a bad 5.0 CONNECT is written in 5.0's layout: the machine takes the level its header named."""
    m = fresh()
    m.protocol_error(rc.MALFORMED_PACKET, 5)
    assert m.state.level == 5


def test_an_unsupported_protocol_level_gets_connack_1_in_the_311_layout() -> None:
    m = fresh()
    assert m.unsupported_protocol() == (Send(Connack(False, rc.V311_UNACCEPTABLE_PROTOCOL_VERSION)),
                                        Close(None, "unsupported protocol"))
    assert m.state.level == 4


# ---------------------------------------------------------------------------------------------- keep alive


@pytest.mark.parametrize(("level", "expected"), [
    (5, Close(rc.KEEP_ALIVE_TIMEOUT, "keepalive expired")),
    (4, Close(None, "keepalive expired")),
    (3, Close(None, "keepalive expired")),
])
def test_keepalive_expired(level: int, expected: Close) -> None:
    assert connected(level).keepalive_expired() == expected


# ---------------------------------------------------------------------------------------------- the QoS 2 hold


@pytest.mark.parametrize(("qos", "persistent", "waits"), [
    (2, True, True),  # its packet id on disk first: exactly once across a failover
    (2, False, False),
    (1, True, False),
    (0, True, False),
])
def test_waits_for_disk(qos: int, persistent: bool, waits: bool) -> None:
    assert ConnectionMachine.waits_for_disk(qos, persistent) is waits


# ---------------------------------------------------------------------------------------------- the deadline


def test_the_connect_timeout_is_the_deadline_until_connect() -> None:
    m = fresh()
    m.opened(NOW, waited=False)
    assert m.next_deadline() == NOW + 10.0
    assert m.handle_timer(NOW + 9.9) == ()
    assert m.handle_timer(NOW + 10.0) == (Close(None, "no CONNECT in time"),)
    assert m.state.phase is Phase.CLOSED and m.next_deadline() is None


def test_a_connect_a_prelude_waited_for_has_no_deadline() -> None:
    m = fresh()
    m.opened(NOW, waited=True)
    assert m.next_deadline() is None


def test_a_registering_or_connected_311_machine_without_resends_has_no_deadline() -> None:
    m = fresh()
    m.opened(NOW, waited=False)
    m.receive(Connect("c1", protocol_level=4), NOW + 1)
    assert m.next_deadline() is None  # the registration has bounds of its own
    assert m.handle_timer(NOW + 100) == ()


@pytest.mark.parametrize(("level", "connack"), [
    (5, Connack(False, rc.BAD_USER_NAME_OR_PASSWORD,
                Properties(reason_string="not authorized: anonymous clients are not allowed"))),
    (4, Connack(False, rc.V311_BAD_USERNAME_OR_PASSWORD)),
])
def test_a_refused_login_is_answered_at_the_deadline_after_the_delay(level: int, connack: Connack) -> None:
    m = fresh(refusal=rc.BAD_USER_NAME_OR_PASSWORD)
    m.opened(NOW, waited=False)
    [refused] = m.receive(Connect("c1", protocol_level=level), NOW + 1)
    assert isinstance(refused, RefuseConnect) and refused.failed_login and refused.delay == 2.0
    assert m.next_deadline() == NOW + 3.0  # failed_login_delay after the CONNECT, not the CONNECT timeout
    assert m.handle_timer(NOW + 2.9) == ()
    why = "not authorized: anonymous clients are not allowed"
    assert m.handle_timer(NOW + 3.0) == (Send(connack), Close(None, why))
    assert m.next_deadline() is None and m.handle_timer(NOW + 10) == ()
