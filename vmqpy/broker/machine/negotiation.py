"""CONNECT, decided in one function: `negotiate` takes the packet, the node's configuration, the credentials check
and the netsplit policy, and answers `Refused` (with the reason code the specification prescribes) or `Accepted`
(the session expiry, the will, the keep alive granted, the flow-control and alias limits both ways, and the
CONNACK properties; docs/broker.md has the table). And the keep-alive rule of a connection, as pure functions
of the keep alive and the time the client has been silent. Sans-I/O: no socket, timer or clock.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vmqpy.broker.access.auth import PasswordCheck
from vmqpy.broker.core.ports import ServePolicy
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.packets import Connect, Properties, Publish
from vmqpy.mqtt.topics import too_deep
from vmqpy.sessions.message import Message
from vmqpy.sessions.owners import client_id_allowed

SESSION_EXPIRY_NEVER = 0xFFFFFFFF


class CredentialCheck(Protocol):
    """What the machine needs of vmqpy.broker.access.auth.Authenticator."""

    def check(self, username: str | None, password: bytes | None) -> int | PasswordCheck | None:
        """None when the credentials are accepted, else the CONNACK reason code of the refusal; or a `PasswordCheck`
        still to run (off the event loop), after which the CONNECT is negotiated again with its verdict."""
        ...


def assigned_client_id() -> str:
    """A client id for a CONNECT with an empty one: 64 random bits, unique across the cluster (every node assigns
    ids, and a client id names one session cluster-wide), 22 characters (within the 23 every server must accept)."""
    return f"vmqpy-{secrets.token_hex(8)}"


# ---------------------------------------------------------------------------------------------- CONNECT


@dataclass(slots=True)
class Accepted:
    """A CONNECT the node accepts (before registration): what the connection and the session are given."""

    client_id: str
    level: int
    clean_start: bool
    expiry: float | None  # session expiry, seconds; None: never
    requested_expiry: int  # as the CONNECT asked (-1: never); a DISCONNECT may not raise 0 to more
    keep_alive: int  # what the connection runs with (the granted one when the node lowered it)
    will: Message | None
    will_delay: float
    send_window: int  # QoS 1/2 PUBLISHes the client lets the node have unacknowledged
    max_packet_out: int  # the client's Maximum Packet Size; 0: no limit
    aliases_out: int  # topic aliases the node may use towards the client
    connack: Properties  # CONNACK properties (besides session present and the reason code)
    username: str | None = None  # as the CONNECT gave it (what `vmq-admin session show` lists as user)

    def __init__(
            self, client_id: str, level: int, clean_start: bool, expiry: float | None, requested_expiry: int,
            keep_alive: int, will: Message | None, will_delay: float, send_window: int, max_packet_out: int,
            aliases_out: int, connack: Properties, username: str | None = None
    ) -> None:
        self.client_id = client_id
        self.level = level
        self.clean_start = clean_start
        self.expiry = expiry
        self.requested_expiry = requested_expiry
        self.keep_alive = keep_alive
        self.will = will
        self.will_delay = will_delay
        self.send_window = send_window
        self.max_packet_out = max_packet_out
        self.aliases_out = aliases_out
        self.connack = connack
        self.username = username


@dataclass(frozen=True, slots=True)
class Refused:
    reason_code: int  # the 5.0 code; the driver maps it to 3.1.1's CONNACK codes
    why: str


def negotiate(connect: Connect, config: Config, auth: CredentialCheck, policy: ServePolicy, now: float,
              new_client_id: Callable[[], str] = assigned_client_id) -> Accepted | Refused | PasswordCheck:
    """Decide a CONNECT: refused with the code the specification prescribes, or accepted with its terms; or the
    password check `auth` asks to run first (then decided again with an `auth` that gives its verdict)."""
    level = connect.protocol_level
    props = connect.properties
    client_id = connect.client_id
    assigned = None
    if not client_id:
        if level < 5 and not connect.clean_start:
            return Refused(rc.CLIENT_IDENTIFIER_NOT_VALID, "empty client id with cleansession=0")
        client_id = assigned = new_client_id()
    if len(client_id) > config.max_client_id_size:
        return Refused(rc.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
    if connect.will is not None and ("+" in connect.will.topic or "#" in connect.will.topic):
        return Refused(rc.TOPIC_NAME_INVALID, "the will topic contains a wildcard")
    if connect.will is not None and too_deep(connect.will.topic, config.topic_max_depth):
        return Refused(rc.TOPIC_NAME_INVALID, f"the will topic is deeper than topic_max_depth = "
                                              f"{config.topic_max_depth} levels")
    if props.authentication_method is not None:
        return Refused(rc.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
    refusal = auth.check(connect.username, connect.password)
    if isinstance(refusal, PasswordCheck):
        return refusal
    if refusal is not None:
        return Refused(refusal, "authentication failed")
    if assigned is None and not client_id_allowed(config.session_client_id_prefix, client_id, connect.username):
        return Refused(rc.CLIENT_IDENTIFIER_NOT_VALID, "the client id is not one of this user's")
    if not policy.may("register"):
        return Refused(rc.SERVER_UNAVAILABLE, policy.reason())
    expiry: float | None
    requested = 0
    if level == 5:
        raw = props.session_expiry_interval or 0
        expiry = None if raw == SESSION_EXPIRY_NEVER else float(raw)
        requested = -1 if expiry is None else raw
    else:
        expiry = 0.0 if connect.clean_start else config.persistent_client_expiration
    will = None
    will_delay = 0.0
    if connect.will is not None:
        w = connect.will
        will = Message.from_publish(Publish(w.topic, w.payload, w.qos, w.retain, properties=w.properties),
                                    client_id, now)
        will_delay = float(w.properties.will_delay_interval or 0) if level == 5 else 0.0
    keep_alive = connect.keep_alive
    server_keep_alive = None
    limit = config.max_keepalive
    if limit and (keep_alive == 0 or keep_alive > limit) and level == 5:
        keep_alive = server_keep_alive = limit
    connack = Properties()
    send_window = 65535
    max_packet_out = 0
    aliases_out = 0
    if level == 5:
        connack.assigned_client_identifier = assigned
        connack.topic_alias_maximum = config.topic_alias_max_client or None
        connack.receive_maximum = config.receive_max_broker or config.max_inflight_messages
        connack.server_keep_alive = server_keep_alive
        if config.max_message_size:
            connack.maximum_packet_size = config.max_message_size
        send_window = min(props.receive_maximum or 65535, config.receive_max_client)
        max_packet_out = props.maximum_packet_size or 0
        aliases_out = min(props.topic_alias_maximum or 0, config.topic_alias_max_broker)
    return Accepted(client_id, level, connect.clean_start, expiry, requested, keep_alive, will, will_delay,
                    send_window, max_packet_out, aliases_out, connack, connect.username)


# ---------------------------------------------------------------------------------------------- keep alive

KEEPALIVE_GRACE = 1.5  # keep alive intervals a client may be silent (3.1.1 [MQTT-3.1.2-24], 5.0 [MQTT-3.1.2-22])
KEEPALIVE_MIN_RECHECK = 0.05  # seconds: the timer is never re-armed sooner (no busy loop at the limit)


def keepalive_expired(keep_alive: int, last_received: float, now: float) -> bool:
    """Whether a client with keep alive `keep_alive` (seconds; 0: none), last heard from at `last_received`, is gone
    at `now`. Compared as `now >= last_received + limit`: the idle time `now - last_received` can round to just below
    the limit at the limit's very instant (1014.93 + 15.0 - 1014.93 < 15.0), which put the close off by a check."""
    return keep_alive > 0 and now >= last_received + keep_alive * KEEPALIVE_GRACE


def keepalive_check_after(keep_alive: int, idle: float) -> float | None:
    """Seconds until the keep alive of a client silent for `idle` seconds is checked again; None: never."""
    if keep_alive <= 0:
        return None
    return max(KEEPALIVE_MIN_RECHECK, keep_alive * KEEPALIVE_GRACE - idle)
