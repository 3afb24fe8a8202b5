"""The CONNECT half of the connection driver (vmqpy.broker.driver.connection): a CONNECT with a password to check has it
checked in the node's login pool (reading nothing from the client meanwhile; refused at once, without a check,
when its address is over the failed-login limit or the pool is full); an accepted CONNECT registers the client
id with its leader (reading nothing from the client meanwhile), opens or resumes the session, answers CONNACK
and arms the keepalive timer; a refused one is counted, logged and answered, a refused login after
`auth.failed_login_delay`.

Functions of the driver's `MQTTConnection`, kept apart from its per-packet path; they run on its event loop and
use the connection's public interface (its machine, writer, read gate and timer). What is sent to the client
(CONNACK refusals and redirects, the DISCONNECT of a takeover or of a node moving its clients away) is the
connection machine's decision (vmqpy.broker.machine.protocol), carried out by the connection.
"""

from __future__ import annotations

import asyncio
import logging
from time import time as wall_clock  # a name of its own: compiled, `time.time()` escapes the simulation's clock
from typing import TYPE_CHECKING, Any

from vmqpy import logconfig
from vmqpy.broker.driver import keepalive
from vmqpy.broker.machine.decisions import Authenticate, RefuseConnect
from vmqpy.broker.machine.negotiation import Accepted, keepalive_check_after
from vmqpy.client_metrics import connack_label, observe_connect_latency
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Connack
from vmqpy.sessions.handover import RegistrationRefused, Ticket

if TYPE_CHECKING:
    from vmqpy.broker.core.ports import Placement, Registrar
    from vmqpy.broker.core.session import Session
    from vmqpy.broker.driver.connection import MQTTConnection
    from vmqpy.sessions.message import Message
    from vmqpy.sessions.remote import RemoteWait

__all__ = [
    "authenticate", "bound_logger", "close_connect", "complete_connect", "disconnected", "finish_connect",
    "foreign_user", "move_away", "open_connect", "redirected", "refuse", "refuse_login", "register",
    "send_refusal", "start_registration", "take_over",
]

# CONNACK accepting a 3.1/3.1.1 CONNECT, by session present (3.1 has no such flag: always False there); the bytes
# `encode(Connack(present, 0), 4)` makes (tests/unit/broker/driver/test_connect_flow_fast.py).
CONNACK_ACCEPTED_311 = {False: b"\x20\x02\x00\x00", True: b"\x20\x02\x01\x00"}
ALIAS_PROPERTY_BYTES = 4  # Topic Alias: identifier byte and two value bytes, and one more byte of property length


def start_registration(conn: MQTTConnection, accepted: Accepted) -> None:
    conn.client_id = accepted.client_id
    conn.username = accepted.username
    conn.forget_log()  # its log lines name the client id from now on (bound again at the next one)
    conn.keep_alive = accepted.keep_alive
    sweeper = conn.broker.sweeper
    if sweeper.pending(accepted.client_id):
        # An ended session of this client id still has subscriptions the node is removing a slice a turn
        # (vmqpy.broker.core.sweeper): the new session waits for them to be gone, so that it never gets their messages.
        conn.registering = True
        _hold(conn)
        sweeper.when_clear(accepted.client_id, lambda: _swept(conn, accepted))
        return
    if conn.broker.foreign_owner(accepted.client_id, accepted.username) and not foreign_user(conn, accepted):
        return
    if conn.broker.placement is not None and redirected(conn, accepted, conn.broker.placement):
        return
    registrar = conn.broker.registrar
    if registrar is None:
        complete_connect(conn, accepted, None)
        return
    # Registration goes through the client id's leader and may wait for another node: nothing more is
    # read from this client until it is done (the CONNECT timer stops; registration has its own bounds).
    conn.registering = True
    _hold(conn)
    conn.loop.create_task(register(conn, registrar, accepted))


def _swept(conn: MQTTConnection, accepted: Accepted) -> None:
    """The subscriptions a CONNECT waited for are gone: its registration goes on."""
    conn.registering = False
    if conn.closing:
        return
    start_registration(conn, accepted)
    if conn.closing or conn.registering:
        return  # refused, or registering with the client id's leader (which resumes reading when done)
    conn.gate.release()
    conn.process()  # what the client sent while it waited


def foreign_user(conn: MQTTConnection, accepted: Accepted) -> bool:
    """The client id's session belongs to another user (vmqpy.sessions.owners): under `session.foreign_user =
    refuse` the CONNECT is refused as not authorized (False; a live connection of the owner stays); else it goes
    on with a clean start, so that the old session (and a live connection of it) ends and nothing of it reaches
    this client (True)."""
    if conn.broker.config.session_foreign_user == "refuse":
        refuse_foreign(conn)
        return False
    if not accepted.clean_start:
        accepted.clean_start = True
        conn.broker.metrics["session_foreign_user_cleaned"] += 1
        conn.log.info("the client id's session belongs to another user: it ends, this client starts clean",
                      user=accepted.username)
    return True


def refuse_foreign(conn: MQTTConnection) -> None:
    """Refuse a CONNECT as not authorized: its client id's session is another user's."""
    conn.broker.metrics["session_foreign_user_refused"] += 1
    refuse(conn, rc.NOT_AUTHORIZED, "the client id's session belongs to another user")


def _hold(conn: MQTTConnection, now: float | None = None) -> None:
    """Read nothing more from the client for now; its timer is armed for what the machine has due now (no CONNECT
    timeout: a refusal or the registration that follows has bounds of its own)."""
    conn.gate.hold()
    conn.arm_timer(wall_clock() if now is None else now)


def redirected(conn: MQTTConnection, accepted: Accepted, placement: Placement) -> bool:
    """`persistent_session_placement = assigned`: a CONNECT that belongs on another node is answered with
    CONNACK 0x9C (Use another server) and a Server Reference naming it, when the client speaks 5.0 (True); a
    3.1.1 client cannot be told, and is served here (counted)."""
    persistent = accepted.expiry is None or accepted.expiry > 0
    redirect = placement(accepted.client_id, persistent, conn.listener_kind)
    if redirect is None:
        return False
    metrics = conn.broker.metrics
    decisions = conn.machine.redirect(redirect.reference, redirect.why)
    if not decisions:
        metrics["placement_not_redirected"] += 1
        conn.log.info("served away from its assigned server: a 3.1.1 client cannot be redirected", why=redirect.why)
        return False
    metrics["placement_redirected"] += 1
    metrics[f"mqtt_connack_{connack_label(rc.USE_ANOTHER_SERVER)}_sent"] += 1
    conn.log.info("redirected", server_reference=redirect.reference, reason=redirect.why, node=conn.broker.node)
    for decision in decisions:
        conn.carry_out(decision)
    return True


async def register(conn: MQTTConnection, registrar: Registrar, accepted: Accepted) -> None:
    try:
        ticket = await registrar.register(accepted.client_id, accepted.clean_start, accepted.username)
    except RegistrationRefused as exc:
        conn.registering = False
        if not conn.closing:
            refuse(conn, rc.SERVER_UNAVAILABLE, str(exc))
        return
    except Exception:
        conn.registering = False
        conn.log.exception("registration failed")
        if not conn.closing:
            refuse(conn, rc.UNSPECIFIED_ERROR, "registration failed")
        return
    if ticket.foreign:
        # The previous owner node holds the session for another user and refused (session.foreign_user =
        # refuse): this node had not yet learnt who owns it (its replica had no owner record).
        registrar.connected(ticket, None)
        conn.registering = False
        if not conn.closing:
            refuse_foreign(conn)
        return
    try:
        # A session handed over with its subscriptions (a takeover): its CONNACK says "session present", so it
        # leaves once the reachable members route to this node (subscription.acknowledge = cluster, bounded by
        # subscription.acknowledge_timeout; docs/cluster.md, "A SUBACK the cluster honours").
        # The client id's registration stays locked meanwhile (the leader's lease, 10 s, outlasts the wait), so
        # that no other CONNECT of it takes the session before this one is attached.
        confirm = conn.broker.route_confirmation() if ticket.image is not None else None
        now = wall_clock()
        session, present = open_connect(conn, accepted, ticket, now, confirm)
        routes = conn.broker.routes_applied(confirm)
        if routes is not None and not conn.closing:
            await _done(conn.loop, routes)
            now = wall_clock()
        close_connect(conn, accepted, ticket, session, present, now)
    except Exception:
        conn.log.exception("internal error completing a connect")
        registrar.connected(ticket, None)
        conn.protocol_error(rc.UNSPECIFIED_ERROR)
        return
    finally:
        conn.registering = False
    if conn.closing:
        return
    conn.gate.release()
    conn.process()  # what the client sent while it was registering


def complete_connect(conn: MQTTConnection, accepted: Accepted, ticket: Ticket | None) -> None:
    now = wall_clock()
    session, present = open_connect(conn, accepted, ticket, now)
    close_connect(conn, accepted, ticket, session, present, now)


def open_connect(conn: MQTTConnection, accepted: Accepted, ticket: Ticket | None, now: float, confirm: Any = None
                 ) -> tuple[Session, bool]:
    """Open the session of an accepted CONNECT. `confirm`: what the routes of an adopted image join
    (Broker.open_session)."""
    return conn.broker.open_session(accepted.client_id, accepted.level, accepted.clean_start, accepted.expiry, conn,
                                    now, None if ticket is None else ticket.image, accepted.username,
                                    will=conn.will, will_delay=conn.will_delay, confirm=confirm)


def close_connect(conn: MQTTConnection, accepted: Accepted, ticket: Ticket | None, session: Session, present: bool,
                  now: float) -> None:
    """Tell the registrar the CONNECT is done (its lock is released), then CONNACK and attach; or, when the client
    went away meanwhile, leave its session offline."""
    if ticket is not None and conn.broker.registrar is not None:
        conn.broker.registrar.connected(ticket, conn.broker.node)
    if conn.closing:  # the client went away while it was registering: its session stays, offline
        conn.broker.attach(session, conn, 65535, 0, now)
        conn.broker.close_session(session, conn, now, conn.will, conn.will_delay)
        return
    finish_connect(conn, accepted, session, present, now)


async def _done(loop: asyncio.AbstractEventLoop, wait: RemoteWait) -> None:
    """Until `wait` is done (a route confirmation: it never fails, and ends at its deadline at the latest)."""
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    wait.add_done_callback(wake)
    await future


def finish_connect(conn: MQTTConnection, accepted: Accepted, session: Session, present: bool, now: float) -> None:
    """The CONNACK of an opened session, and the connection attached to it."""
    conn.session = session
    conn.machine.connected(session)
    conn.cancel_timer()  # a CONNECT timeout's (none once connected: resends arm it again)
    conn.connect_completed()  # the largest packet is max_message_size from now on, no longer a CONNECT's
    conn.retries = conn.machine.resends
    if accepted.level < 5 and not conn.traces:  # a 3.1/3.1.1 CONNACK that accepts is one of two constants
        conn.writer.data(CONNACK_ACCEPTED_311[present and accepted.level > 3])
    else:
        conn.write_packet(Connack(present, rc.SUCCESS, accepted.connack))
    metrics = conn.broker.metrics
    metrics["mqtt_connack_success_sent"] += 1
    observe_connect_latency(metrics, conn.connect_took(conn.loop.time()))
    conn.announced = True
    # else the line's fields and the connection's bound logger are not made (log.connections = off, or above info)
    if logconfig.connection_lines():
        conn.log.info("client connected", user=accepted.username, protocol=accepted.level,
                      clean_start=accepted.clean_start, session_present=present, node=conn.broker.node)
    if logconfig.enabled(logging.DEBUG):
        conn.log.debug("connection granted", keep_alive=accepted.keep_alive, send_window=accepted.send_window,
                       max_packet_out=accepted.max_packet_out)
    max_packet = accepted.max_packet_out
    if max_packet and conn.machine.state.aliases_out is not None:
        # The first PUBLISH of a topic to this client carries the topic and its alias (the session measures
        # packets without it): keep room for the property and a longer property length.
        max_packet = max(1, max_packet - ALIAS_PROPERTY_BYTES)
    conn.broker.attach(session, conn, accepted.send_window, max_packet, now)
    first_check = keepalive_check_after(conn.keep_alive, 0.0)
    if first_check is not None:
        now = conn.last_received = conn.loop.time()
        keepalive.of_loop(conn.loop).schedule(conn, conn.loop, now + first_check)


def socket_peer(transport: asyncio.BaseTransport | None) -> tuple[str, int] | None:
    """The (host, port) of the client at the other end of `transport`'s socket; None when it is gone. Read when it is
    asked for (a log line, `vmq-admin session show`, a trace), not kept: kept, it cost every idle connection a tuple,
    a port and uvloop's socket object (about 120 bytes)."""
    if transport is None:
        return None
    try:
        peer = transport.get_extra_info("peername")
    except (OSError, AttributeError):  # a transport whose socket is gone
        return None
    return (str(peer[0]), int(peer[1])) if peer else None


def bound_logger(conn: MQTTConnection, logger: Any) -> Any:
    """`logger` bound to `conn`'s peer, listener and (once its CONNECT is accepted) client id: made at the first line
    a connection logs (MQTTConnection.log), not at every connect, since most log nothing at the default levels."""
    peer = conn.peer
    fields = {"peer": f"{peer[0]}:{peer[1]}" if peer else "?", "listener": conn.listener}
    if conn.client_id:
        fields["client_id"] = conn.client_id
    return logger.bind(**fields)


def disconnected(conn: MQTTConnection, exc: Exception | None) -> None:
    """The socket is gone: the session goes offline or ends (with the will unless the client disconnected)."""
    session = conn.session
    conn.session = None
    if session is not None:
        will = None if conn.normal_close else conn.will
        conn.broker.close_session(session, conn, wall_clock(), will, conn.will_delay)
    if conn.announced and logconfig.connection_lines():
        conn.log.info("client disconnected", user=conn.username, protocol=conn.level, normal=conn.normal_close,
                      reason=None if exc is None else str(exc) or type(exc).__name__, node=conn.broker.node)


def take_over(conn: MQTTConnection, reason_code: int) -> tuple[Message | None, float]:
    """A newer connect of the client id (or an operator) ends this connection (5.0: DISCONNECT `reason_code`, the
    machine's `taken_over`); its will and delay are handed to the caller, which decides whether the will is
    due."""
    will, delay = conn.will, conn.will_delay
    conn.machine.state.will = None
    close = conn.machine.taken_over(reason_code)
    conn.log.info(close.why)
    conn.session = None
    conn.end(close)
    return will, delay


def move_away(conn: MQTTConnection, reference: str | None) -> None:
    """The node leaves the cluster: the machine's `moved_away` (5.0: DISCONNECT 0x9C, Use another server, naming
    `reference`); no will is published (the client is expected to reconnect elsewhere)."""
    close = conn.machine.moved_away(reference)
    conn.log.info(close.why, server_reference=reference)
    conn.end(close)


def authenticate(conn: MQTTConnection, decision: Authenticate) -> None:
    """Check the CONNECT's password in the login pool, reading nothing from the client meanwhile; refused at once
    (no check) when the client's address (a PROXY header's, else the socket's) is over the failed-login limit
    (Connection rate exceeded) or the pool is full (Server busy). Without a pool (a broker the node did not wire)
    the check runs here."""
    access = conn.broker.access
    metrics = conn.broker.metrics
    if access.login_throttled(_host(conn), conn.loop.time()):
        _authenticated(conn, decision, rc.CONNECTION_RATE_EXCEEDED)
        return
    pool = conn.broker.logins
    if pool is None:
        metrics["login_password_checks"] += 1
        _authenticated(conn, decision, None if decision.check.run() else rc.BAD_USER_NAME_OR_PASSWORD)
        return
    conn.registering = True  # read nothing until the verdict (the flag `process` stops at)
    _hold(conn)
    if not pool.submit(decision.check, conn.loop, lambda accepted: _checked(conn, decision, accepted)):
        conn.registering = False
        metrics["login_busy"] += 1
        _authenticated(conn, decision, rc.SERVER_BUSY)
        return
    metrics["login_password_checks"] += 1


def _checked(conn: MQTTConnection, decision: Authenticate, accepted: bool) -> None:
    """The login pool's verdict, on the event loop."""
    conn.registering = False
    if conn.closing:
        return
    _authenticated(conn, decision, None if accepted else rc.BAD_USER_NAME_OR_PASSWORD)
    if not (conn.closing or conn.registering or conn.refusing) and conn.transport is not None:
        conn.gate.release()
        conn.process()  # what the client sent meanwhile


def _authenticated(conn: MQTTConnection, decision: Authenticate, refusal: int | None) -> None:
    now = wall_clock()
    try:
        decisions = conn.machine.authenticated(decision.connect, refusal, now)
    except Exception:
        conn.log.exception("internal error completing a connect")
        conn.protocol_error(rc.UNSPECIFIED_ERROR)
        return
    for follow in decisions:
        conn.carry_out(follow)


def _host(conn: MQTTConnection) -> str:
    return conn.peer[0] if conn.peer is not None else "?"


def refuse_login(conn: MQTTConnection, decision: RefuseConnect) -> None:
    """Refused credentials: counted for the peer's address (towards its failed-login limit), and the CONNACK leaves
    after `decision.delay` seconds (the machine's deadline, `handle_timer`), reading nothing meanwhile (the event
    loop and the other clients go on)."""
    failures = conn.broker.access.login_failed(_host(conn), conn.loop.time())
    code = decision.reason_code
    refused = "not_authorized" if code == rc.NOT_AUTHORIZED else "bad_credentials"
    conn.broker.metrics[f"mqtt_connack_{refused}_sent"] += 1
    conn.log.info("refused connect", reason=decision.why, reason_code=hex(code), failed_logins=failures,
                  hint=decision.hint)
    conn.refusing = True
    _hold(conn)


def send_refusal(conn: MQTTConnection, reason_code: int, why: str) -> None:
    """CONNACK with the refusal (the machine's `refusal`: 5.0 clients are told why), then close."""
    if conn.closing:
        return
    for decision in conn.machine.refusal(reason_code, why):
        conn.carry_out(decision)


def refuse(conn: MQTTConnection, reason_code: int, why: str) -> None:
    conn.broker.metrics[f"mqtt_connack_{connack_label(reason_code)}_sent"] += 1
    conn.log.info("refused connect", reason=why, reason_code=hex(reason_code), user=conn.machine.state.username,
                  client_id=conn.client_id or conn.asked_client_id, node=conn.broker.node)
    send_refusal(conn, reason_code, why)
