"""The MQTT rules of one client connection, sans-I/O: decoded packets and `now` in, decisions out.

`ConnectionMachine` holds the state of one connection (its phase, protocol level, keep alive, will, topic
aliases in both directions, Receive Maximum in both directions, the QoS 1/2 PUBLISHes of the client not yet
acknowledged) and dispatches every packet through one table of (phase, packet type) -> handler, so "nothing
but CONNECT before CONNECT" and "a second CONNECT is a protocol error" are decided in one place. It never
touches a socket, a timer, the event loop or the clock, it does not call the broker or the cluster and it
writes no storage: it returns decisions (`Register`, `Route`, `SubscribeTo`, `UnsubscribeFrom`, `Reply`, `Send`,
`Close`, `RefuseConnect`, `RecordIncoming`) that the driver (vmqpy/broker/driver/connection.py) carries out, and the
driver reports back what the broker did (`routed`, `connected`). Every packet the client sends goes through the
table, PUBLISH and PUBACK included. The session (vmqpy/broker/core/session.py, itself sans-I/O) is handed to the
machine once the connection owns it; acknowledgements of the client's own PUBACK/PUBREC/PUBCOMP go straight to it.

The outbound rules that depend on the protocol level are the machine's too, as decisions the driver carries
out (vmqpy/broker/machine/outbound_rules.py, a part of the machine in a module of its own): the DISCONNECT of a takeover
(0x8E), of a node moving its clients away (0x9C with a Server Reference), of an expired keep alive (0x8D) and of
a protocol error (5.0 only; a 3.1.1 client's socket is just closed, a 5.0 CONNECT that was the bad packet gets
a CONNACK with the code), the refusal CONNACK (a reason string for 5.0), the redirect of
`persistent_session_placement` (3.1.1 cannot be redirected) and which deliveries wait for the disk
(`waits_for_disk`). Time is an argument there too: `next_deadline()` is the one deadline of the connection (the
CONNECT timeout, a refused login's CONNACK, a resend to a 3.1.1 client) and `handle_timer(now)` what is due then;
the driver arms one timer for it and calls back.

A protocol violation raises `RemoteProtocolError` (vmqpy.mqtt.errors) with the reason code the specification
prescribes, as the decoder does; the driver asks `protocol_error` what to send before it closes.

`negotiate` is the whole of CONNECT: the checks and every refusal code, the session expiry, the will, the keep
alive the node grants and the CONNACK properties (docs/broker.md has the table).

Authorization (vmqpy/broker/access/control.py) is decided here too: a refused login is answered after
`auth.failed_login_delay` (`RefuseConnect.delay`); a SUBSCRIBE to a filter the ACL does not let the client read
gets 0x87 (3.1.1: 0x80) at that position; a PUBLISH to a topic it may not write is not routed: 5.0 QoS 1/2 get
PUBACK/PUBREC 0x87, and 3.1.1 (which has no refusal code) gets its normal acknowledgement, so that the client does
not resend it for ever. The decisions on PUBLISH topics are cached per connection for one ACL generation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from vmqpy.broker.access.auth import PasswordCheck
from vmqpy.broker.access.control import AccessControl
from vmqpy.broker.core.ports import ServePolicy
from vmqpy.broker.core.remote_ack import RemoteAck
from vmqpy.broker.core.router import RouteResult
from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.connection_state import ConnectionState, Phase
from vmqpy.broker.machine.decisions import (
    Authenticate,
    Close,
    Decisions,
    RecordIncoming,
    RefuseConnect,
    Register,
    Reply,
    Route,
    Send,
    SubscribeTo,
    Throttle,
    Unanswered,
    UnsubscribeFrom,
    suback_codes,
)
from vmqpy.broker.machine.negotiation import (
    SESSION_EXPIRY_NEVER,
    CredentialCheck,
    Refused,
    assigned_client_id,
    negotiate,
)
from vmqpy.broker.machine.outbound_rules import RETRY_RECHECK, OutboundRules
from vmqpy.broker.machine.topic_aliases import OutboundAliases, inbound_topic
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import ProtocolViolation, RemoteProtocolError
from vmqpy.mqtt.packets import (
    NO_PROPERTIES,
    Auth,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from vmqpy.mqtt.topics import parse_shared, validate_topic_filter
from vmqpy.sessions.message import Message

__all__ = ["LOGIN_REFUSALS", "RETRY_RECHECK", "ConnectionMachine", "ConnectionState", "Phase"]

NO_PACKET_ID = 0
WRITE_CACHE_SIZE = 256  # PUBLISH topics whose ACL decision a connection remembers (all forgotten when full)
LOGIN_REFUSALS = (rc.BAD_USER_NAME_OR_PASSWORD, rc.NOT_AUTHORIZED)  # negotiate's refusals from the credentials
# the refusals of a login whose password was not checked (the driver's verdicts for `authenticated`)
UNCHECKED_LOGINS = {
    rc.SERVER_BUSY: "server busy: too many logins are being checked",
    rc.CONNECTION_RATE_EXCEEDED: "too many failed logins from this address: try again later",
}
# The decisions made for every PUBLISH, built in C (a named tuple's own constructor is a Python function).
_new_route: Callable[[tuple[Message, int, int]], Route] = partial(tuple.__new__, Route)
_new_reply: Callable[[tuple[Packet, bool, RemoteAck | None, str | None, bool]], Reply] = partial(tuple.__new__, Reply)
_simple_message = Message.simple  # the class method bound once (every PUBLISH without properties)
_PONG: Decisions = (Send(Pingresp()),)  # the answer to every PINGREQ (a packet without fields: one serves all)


# ---------------------------------------------------------------------------------------------- the machine


Handler = Callable[["ConnectionMachine", Packet, float], Decisions]


class _Certified:
    """The credential check of a CONNECT whose user is a verified client certificate's CN: nothing left to check."""

    def check(self, username: str | None, password: bytes | None) -> int | PasswordCheck | None:
        return None


_CERTIFIED = _Certified()


@dataclass(frozen=True, slots=True)
class _Checked:
    """The credential check of a CONNECT whose password check ran (`ConnectionMachine.authenticated`): its verdict."""

    refusal: int | None

    def check(self, username: str | None, password: bytes | None) -> int | PasswordCheck | None:
        return self.refusal


class ConnectionMachine(OutboundRules):
    __slots__ = ("_generation", "_may_write", "access", "auth", "config", "connected_now", "identity", "metrics",
                 "new_client_id", "policy", "row", "state")  # one per connection: no attribute dictionary
    def __init__(self, config: Config, auth: CredentialCheck, policy: ServePolicy,
                 new_client_id: Callable[[], str] = assigned_client_id, access: AccessControl | None = None) -> None:
        self.config = config
        self.auth = auth
        self.policy = policy
        self.new_client_id = new_client_id
        self.access = access  # the ACL in force; None: every topic is allowed
        # the node's counters (the broker's, which the access rules share); packets of a kind received here
        self.metrics: Counter[str] = access.metrics if access is not None else Counter()
        self._may_write: dict[str, bool] | None = None  # topic -> the ACL's decision (ACL `_generation`); lazily
        self._generation = -1
        # The CN of the verified TLS certificate on a use_identity_as_username listener: the user (its credential)
        self.identity: str | None = None
        self.state = ConnectionState()
        # the dispatch row of the current phase (looked up once per phase; the driver calls its handlers without
        # `receive`'s frame, and `receive` for a packet not in it), and whether the phase is CONNECTED
        self.row = _BY_PHASE[Phase.CONNECTING]
        self.connected_now = False
        # the deadline of the phase: CONNECTING, the CONNECT's (`opened`); CLOSED, a refused login's CONNACK
        self._due: float | None = None
        self._refusal: RefuseConnect | None = None  # a refused login, answered at `_due` (auth.failed_login_delay)
        self._recheck_at = 0.0  # resends are looked at no sooner than this again (`handle_timer`)

    def _enter(self, phase: Phase) -> None:
        self.state.phase = phase
        self.row = _BY_PHASE[phase]
        self.connected_now = phase is Phase.CONNECTED

    @property
    def level(self) -> int:
        return self.state.level

    def receive(self, packet: Packet, now: float) -> Decisions:
        """The decisions for one packet from the client; raises RemoteProtocolError for a violation."""
        state = self.state
        handler = self.row.get(type(packet))
        if handler is None:
            raise ProtocolViolation(_refusal_text(state.phase, packet))
        return handler(self, packet, now)

    # ------------------------------------------------------------------------------------------ CONNECT

    def _connect(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Connect)
        self.state.level = packet.protocol_level
        auth: CredentialCheck = self.auth
        if self.identity is not None:  # the certificate's CN is the user; any password is dropped
            # (not `dataclasses.replace`: compiled, a packet's `type` constant counts as a field, and the packet's
            # __init__ takes none: tests/unit/test_native_inits.py)
            packet = Connect(packet.client_id, packet.protocol_level, packet.protocol_name, packet.clean_start,
                             packet.keep_alive, packet.will, self.identity, None, packet.properties)
            auth = _CERTIFIED
        return self._negotiate(packet, auth, now)

    def authenticated(self, packet: Connect, refusal: int | None, now: float) -> Decisions:
        """The password check of `Authenticate` ran: None, accepted; else the reason code to refuse with (0x86 for
        wrong credentials; the driver's own when it could not run the check, Server busy or Connection rate
        exceeded). The CONNECT is decided again with that verdict."""
        if self.state.phase is not Phase.AUTHENTICATING:
            raise ValueError(f"authenticated() in phase {self.state.phase.value}")
        return self._negotiate(packet, _Checked(refusal), now)

    def _negotiate(self, packet: Connect, auth: CredentialCheck, now: float) -> Decisions:
        state = self.state
        answer = negotiate(packet, self.config, auth, self.policy, now, self.new_client_id)
        if isinstance(answer, PasswordCheck):
            self._enter(Phase.AUTHENTICATING)
            return (Authenticate(packet, answer),)
        if isinstance(answer, Refused):
            self._enter(Phase.CLOSED)
            if answer.reason_code in LOGIN_REFUSALS:
                refusal = self._refusal = _login_refusal(answer.reason_code, packet.username is None, self.config)
                self._due = now + refusal.delay  # its CONNACK, from `handle_timer`
                return (refusal,)
            return (RefuseConnect(answer.reason_code, UNCHECKED_LOGINS.get(answer.reason_code, answer.why)),)
        self._enter(Phase.REGISTERING)
        state.client_id = answer.client_id
        state.keep_alive = answer.keep_alive
        state.requested_expiry = answer.requested_expiry
        state.will = answer.will
        state.will_delay = answer.will_delay
        state.username = answer.username
        if state.level == 5:
            state.receive_maximum = self.config.receive_max_broker or self.config.max_inflight_messages
            state.aliases_in = {}
            state.aliases_in_maximum = self.config.topic_alias_max_client
            if answer.aliases_out:
                state.aliases_out = OutboundAliases(answer.aliases_out)
        return (Register(answer),)

    def connected(self, session: Session) -> None:
        """The connection owns `session` now (the CONNACK is written)."""
        self.state.session = session
        self._enter(Phase.CONNECTED)

    def closed(self) -> None:
        self._enter(Phase.CLOSED)
        self.state.session = None

    # ------------------------------------------------------------------------------------------ PUBLISH

    def _publish(self, packet: Packet, now: float) -> Decisions:
        """A client's PUBLISH after CONNECT: the message to route (`Route`: the driver then calls `routed`), or
        the decisions that answer it instead."""
        assert type(packet) is Publish
        state = self.state
        session = state.session
        assert session is not None
        alias = packet.properties.topic_alias
        if alias is not None:
            assert state.aliases_in is not None  # a 5.0 client's (only 5.0 has properties)
            packet.topic = inbound_topic(state.aliases_in, state.aliases_in_maximum, packet.topic, alias)
        topic = packet.topic
        max_depth = self.config.topic_max_depth
        if max_depth > 0 and topic.count("/") >= max_depth:  # too_deep, inline. 5.0: DISCONNECT 0x90; 3.1.1: closed
            raise RemoteProtocolError(f"PUBLISH topic deeper than topic_max_depth = {max_depth} levels",
                                      rc.TOPIC_NAME_INVALID)
        qos = packet.qos
        packet_id = packet.packet_id or NO_PACKET_ID
        if qos == 2 and packet_id in session.awaiting_release:  # a resend: routed already, not again; answered
            return (Reply(Pubrec(packet_id), session.persistent),)  # once the first PUBREC's state is durable
        if not self.policy.may("publish"):
            if qos and state.level == 5:
                refusal = Puback(packet_id, rc.IMPLEMENTATION_SPECIFIC_ERROR) if qos == 1 else \
                    Pubrec(packet_id, rc.IMPLEMENTATION_SPECIFIC_ERROR)
                return (Reply(refusal, note="publish refused: the cluster is not ready"),)
            return (Unanswered("publish refused: the cluster is not ready"),)
        access = self.access
        if access is not None and access.acl is not None and not self._may_publish(topic):
            return self._publish_refused(qos, packet_id)
        if qos and state.unacked_qos1 + len(state.unreleased_qos2) >= state.receive_maximum:
            raise RemoteProtocolError("more unacknowledged QoS 1/2 PUBLISHes than Receive Maximum",
                                      rc.RECEIVE_MAXIMUM_EXCEEDED)
        if packet.properties is NO_PROPERTIES:  # the decoder's for a PUBLISH without any: from_publish's own case
            message = _simple_message(topic, packet.payload, qos, packet.retain, state.client_id)
        else:
            message = Message.from_publish(packet, state.client_id, now)
        return (_new_route((message, qos, packet_id)),)

    def publish(self, packet: Publish, now: float) -> Message | Decisions:
        """The message a PUBLISH after CONNECT routes, or the decisions that answer it instead: `receive`'s `Route`
        unwrapped (a reading aid for tests; the driver goes through `receive`)."""
        decisions = self._publish(packet, now)
        if len(decisions) == 1 and type(decisions[0]) is Route:
            return decisions[0].message
        return decisions

    def _may_publish(self, topic: str) -> bool:
        """The ACL's decision on a PUBLISH to `topic`, remembered until the ACL changes."""
        access = self.access
        assert access is not None
        cache = self._may_write = self._may_write or {}  # made at the first PUBLISH the ACL judges
        if self._generation != access.generation:
            cache.clear()
            self._generation = access.generation
        allowed = cache.get(topic)
        if allowed is None:
            if len(cache) >= WRITE_CACHE_SIZE:
                cache.clear()
            allowed = cache[topic] = access.may_publish(self.state.client_id, self.state.username, topic)
        return allowed

    def _publish_refused(self, qos: int, packet_id: int) -> Decisions:
        """A PUBLISH the ACL forbids: not routed; 5.0 QoS 1/2 refused with 0x87, anything else acknowledged as
        usual (3.1.1 has no refusal code, and a client that gets no acknowledgement resends for ever). Counted;
        logged for the first one of the connection only (a client could send thousands a second)."""
        state = self.state
        assert self.access is not None
        self.access.metrics["mqtt_publish_auth_error"] += 1
        state.publishes_refused += 1
        note = None
        if state.publishes_refused == 1:
            note = "publish not authorized by the ACL: not delivered (later refusals are only counted)"
        if qos == 0:
            return () if note is None else (Unanswered(note),)
        if state.level == 5:
            code = rc.NOT_AUTHORIZED
            return (Reply(Puback(packet_id, code) if qos == 1 else Pubrec(packet_id, code), note=note),)
        if qos == 1:
            state.unacked_qos1 += 1  # its PUBACK ends it (reply_sent)
            return (Reply(Puback(packet_id), note=note),)
        return (Reply(Pubrec(packet_id), note=note),)  # the PUBREL that follows gets its PUBCOMP (3.1.1: 0)

    def routed(self, qos: int, packet_id: int, result: RouteResult) -> Decisions:
        """What to answer a client's PUBLISH (`qos`, `packet_id`) once the broker routed it."""
        state = self.state
        throttle: Decisions = (Throttle(result),) if result.congested or result.congested_nodes else ()
        if qos == 0:
            return throttle
        if result.retain_refused and state.level == 5:  # 3.1.1 has no refusal code: acknowledged as usual, dropped
            refusal = Puback(packet_id, rc.QUOTA_EXCEEDED) if qos == 1 else Pubrec(packet_id, rc.QUOTA_EXCEEDED)
            return (Reply(refusal),)
        if result.refused:
            # A forward to another node could not even be buffered: never acknowledge what may be lost.
            if state.level == 5:
                refusal = Puback(packet_id, rc.QUOTA_EXCEEDED) if qos == 1 else Pubrec(packet_id, rc.QUOTA_EXCEEDED)
                return (Reply(refusal, note="publish refused: cluster buffer full", warn=True),)
            return (Unanswered("publish refused: cluster buffer full", warn=True),)
        if qos == 1:
            state.unacked_qos1 += 1
            reply = _new_reply((Puback(packet_id, 0, NO_PROPERTIES), result.durable, result.remote_ack, None, False))
            return (reply, *throttle) if throttle else (reply,)
        session = state.session
        assert session is not None
        session.await_release((packet_id,))
        if not isinstance(state.unreleased_qos2, set):
            state.unreleased_qos2 = set()
        state.unreleased_qos2.add(packet_id)
        return (RecordIncoming(packet_id, True),
                Reply(Pubrec(packet_id), result.durable or session.persistent, result.remote_ack), *throttle)

    def reply_sent(self, packet: Packet) -> None:
        """An acknowledgement left: a PUBACK ends one of the client's QoS 1 PUBLISHes in flight."""
        if type(packet) is Puback and packet.reason_code < 0x80:
            self.state.unacked_qos1 -= 1

    # ------------------------------------------------------------------------------------------ the rest

    def _puback(self, packet: Packet, now: float) -> Decisions:
        session = self.state.session
        assert type(packet) is Puback and session is not None  # (every QoS 1 delivery's: no isinstance call)
        session.on_puback(packet.packet_id, now)
        return ()

    def _pubrec(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Pubrec) and self.state.session is not None
        session = self.state.session
        answer = session.on_pubrec(packet.packet_id, packet.reason_code, now)
        # PUBREL once "PUBREC received" is durable: a failover before it would send the PUBLISH again
        return () if answer is None else (Reply(answer, session.persistent),)

    def _pubcomp(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Pubcomp) and self.state.session is not None
        self.state.session.on_pubcomp(packet.packet_id, now)
        return ()

    def _pubrel(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Pubrel) and self.state.session is not None
        session = self.state.session
        packet_id = packet.packet_id
        if isinstance(self.state.unreleased_qos2, set):
            self.state.unreleased_qos2.discard(packet_id)
        if session.release(packet_id):  # PUBCOMP once the release is durable (the id may be reused then)
            return (RecordIncoming(packet_id, False), Reply(Pubcomp(packet_id), session.persistent))
        return (Reply(Pubcomp(packet_id, rc.PACKET_IDENTIFIER_NOT_FOUND if self.state.level == 5 else 0)),)

    def _subscribe(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Subscribe)
        if not self.policy.may("subscribe"):
            failure = rc.IMPLEMENTATION_SPECIFIC_ERROR if self.state.level == 5 else rc.V311_SUBACK_FAILURE
            return (Reply(Suback(packet.packet_id, [failure] * len(packet.subscriptions))),)
        refused = self._not_authorized(packet)
        refused.update(self._over_quota(packet, refused))
        if len(refused) == len(packet.subscriptions):
            return (Reply(Suback(packet.packet_id, suback_codes(len(refused), refused, []))),)
        return (SubscribeTo(packet, refused),)

    def _not_authorized(self, packet: Subscribe) -> dict[int, int]:
        """The positions of the valid filters of `packet` the ACL does not let the client read, with their reason
        code (5.0: Not authorized; 3.1.1: failure). Invalid ones are left to the broker's 0x8F. A client without a
        user name may not read `$SYS` unless `systree_allow_anonymous` is on (the ACL, when one is in force, must
        allow it too)."""
        access = self.access if self.access is not None and self.access.acl is not None else None
        state = self.state
        no_system = state.username is None and not self.config.systree_allow_anonymous
        if access is None and not no_system:
            return {}
        code = rc.NOT_AUTHORIZED if state.level == 5 else rc.V311_SUBACK_FAILURE
        refused: dict[int, int] = {}
        for index, subscription in enumerate(packet.subscriptions):
            topic_filter = subscription.topic_filter
            if not _valid_filter(topic_filter):
                continue
            if (no_system and _system_filter(topic_filter)) or \
                    (access is not None and not access.may_subscribe(state.client_id, state.username, topic_filter)):
                refused[index] = code
                self.metrics["mqtt_subscribe_auth_error"] += 1
        return refused

    def _over_quota(self, packet: Subscribe, skip: Mapping[int, int] | None = None) -> dict[int, int]:
        """The positions of the filters of `packet` that would take the client past
        `max_subscriptions_per_client`, with their reason code (5.0: Quota exceeded; 3.1.1: failure). A filter
        the client holds already, or names twice, counts once; an invalid one (refused anyway) not at all, nor
        one at a position in `skip` (refused already)."""
        limit = self.config.max_subscriptions_per_client
        session = self.state.session
        if not limit or session is None:
            return {}
        held = set(session.subscriptions)
        code = rc.QUOTA_EXCEEDED if self.state.level == 5 else rc.V311_SUBACK_FAILURE
        refused: dict[int, int] = {}
        for index, subscription in enumerate(packet.subscriptions):
            topic_filter = subscription.topic_filter
            if skip and index in skip:
                continue
            if topic_filter in held:
                continue
            if len(held) >= limit:
                refused[index] = code
            elif _valid_filter(topic_filter):
                held.add(topic_filter)
        return refused

    def _unsubscribe(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Unsubscribe)
        if not self.policy.may("unsubscribe"):
            if self.state.level == 5:
                codes = [rc.IMPLEMENTATION_SPECIFIC_ERROR] * len(packet.topic_filters)
                return (Reply(Unsuback(packet.packet_id, codes)),)
            return ()  # 3.1.1: no UNSUBACK, the client retries
        return (UnsubscribeFrom(packet),)

    def _pingreq(self, packet: Packet, now: float) -> Decisions:
        return _PONG

    def _disconnect(self, packet: Packet, now: float) -> Decisions:
        assert isinstance(packet, Disconnect) and self.state.session is not None
        new_expiry = packet.properties.session_expiry_interval
        if new_expiry is not None:
            if self.state.requested_expiry == 0 and new_expiry != 0:
                raise ProtocolViolation("session expiry set on DISCONNECT after 0 on CONNECT")
            self.state.session.expiry_interval = None if new_expiry == SESSION_EXPIRY_NEVER else float(new_expiry)
        self._enter(Phase.CLOSED)
        return (Close(None, "client disconnected", normal=packet.reason_code != rc.DISCONNECT_WITH_WILL,
                      by_client=True),)

    def _auth(self, packet: Packet, now: float) -> Decisions:
        raise ProtocolViolation("AUTH without an authentication method")

    def _second_connect(self, packet: Packet, now: float) -> Decisions:
        raise ProtocolViolation("second CONNECT")

def _login_refusal(reason_code: int, anonymous: bool, config: Config) -> RefuseConnect:
    """The refusal of a CONNECT whose credentials were refused, after `auth.failed_login_delay`."""
    if anonymous:
        return RefuseConnect(reason_code, "not authorized: anonymous clients are not allowed",
                             config.failed_login_delay, True,
                             "give the client a user name and password from password_file (vmqpy passwd), "
                             "or set allow_anonymous = on")
    return RefuseConnect(reason_code, "bad user name or password", config.failed_login_delay, True,
                         "check the user in password_file (vmqpy passwd FILE USER)")


def _system_filter(topic_filter: str) -> bool:
    """Whether the valid `topic_filter` (shared or not) matches topics of the broker's `$SYS` tree only."""
    match_filter = parse_shared(topic_filter)[1]
    return match_filter == "$SYS" or match_filter.startswith("$SYS/")


def _valid_filter(topic_filter: str) -> bool:
    """Whether the broker would add a subscription to `topic_filter` (shared or not)."""
    try:
        _group, match_filter = parse_shared(topic_filter)
    except ValueError:
        return False
    return validate_topic_filter(match_filter)


def _refusal_text(phase: Phase, packet: Packet) -> str:
    name = type(packet).__name__.upper()
    if phase is Phase.CONNECTING:
        return f"{name} before CONNECT"
    return f"unexpected {name} ({phase.value})"


_CONNECTED: dict[type, Handler] = {
    Publish: ConnectionMachine._publish, Puback: ConnectionMachine._puback, Pubrec: ConnectionMachine._pubrec,
    Pubrel: ConnectionMachine._pubrel, Pubcomp: ConnectionMachine._pubcomp,
    Subscribe: ConnectionMachine._subscribe, Unsubscribe: ConnectionMachine._unsubscribe,
    Pingreq: ConnectionMachine._pingreq, Disconnect: ConnectionMachine._disconnect,
    Auth: ConnectionMachine._auth, Connect: ConnectionMachine._second_connect,
}
_TABLE: dict[tuple[Phase, type], Handler] = {
    (Phase.CONNECTING, Connect): ConnectionMachine._connect,
    **{(Phase.CONNECTED, kind): handler for kind, handler in _CONNECTED.items()},
}
_BY_PHASE: dict[Phase, dict[type, Handler]] = {
    phase: {kind: handler for (in_phase, kind), handler in _TABLE.items() if in_phase is phase} for phase in Phase
}
