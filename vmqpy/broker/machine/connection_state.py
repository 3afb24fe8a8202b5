"""The state of one client connection that its machine (vmqpy.broker.machine.protocol.ConnectionMachine) holds: its
phase
and one dataclass of plain data (protocol level, keep alive, will, topic aliases both ways, Receive Maximum both
ways, the client's QoS 1/2 PUBLISHes not yet acknowledged). The driver's writer reads the level and the outgoing
topic aliases from it (vmqpy.broker.driver.writer)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import Enum

from vmqpy.broker.core.session import Session
from vmqpy.broker.machine.topic_aliases import OutboundAliases
from vmqpy.sessions.message import Message

__all__ = ["ConnectionState", "Phase"]


class Phase(Enum):
    CONNECTING = "connecting"  # nothing but CONNECT is allowed
    AUTHENTICATING = "authenticating"  # its password is checked; the driver reads nothing until `authenticated`
    REGISTERING = "registering"  # CONNECT accepted; the driver reads nothing until `connected`
    CONNECTED = "connected"
    CLOSED = "closed"
    __hash__ = object.__hash__  # in C, by identity (Enum's is a Python call; `_enter` looks phases up per connect)


@dataclass(slots=True)
class ConnectionState:
    phase: Phase = Phase.CONNECTING
    level: int = 4
    client_id: str = ""
    keep_alive: int = 0
    requested_expiry: int = 0
    will: Message | None = None
    will_delay: float = 0.0
    receive_maximum: int = 65535  # QoS 1/2 PUBLISHes the client may have unacknowledged (announced)
    unacked_qos1: int = 0  # the client's QoS 1 PUBLISHes on this connection not yet acknowledged
    # its QoS 2 PUBLISHes on this connection before their PUBCOMP (Receive Maximum counts per connection, MQTT 5.0
    # 4.9: ids awaiting PUBREL from an earlier connection do not count): a shared empty frozenset until the first
    unreleased_qos2: AbstractSet[int] = frozenset()
    aliases_in: dict[int, str] | None = None  # the client's topic aliases: 5.0 only (made by _connect)
    aliases_in_maximum: int = 0
    aliases_out: OutboundAliases | None = None
    session: Session | None = None
    username: str | None = None  # the authenticated user name: the one the ACL judges
    publishes_refused: int = 0  # PUBLISHes the ACL refused on this connection (the first one is logged)

    def __init__(
            self, phase: Phase = Phase.CONNECTING, level: int = 4, client_id: str = "", keep_alive: int = 0,
            requested_expiry: int = 0, will: Message | None = None, will_delay: float = 0.0,
            receive_maximum: int = 65535, unacked_qos1: int = 0, unreleased_qos2: AbstractSet[int] = frozenset(),
            aliases_in: dict[int, str] | None = None, aliases_in_maximum: int = 0,
            aliases_out: OutboundAliases | None = None, session: Session | None = None, username: str | None = None,
            publishes_refused: int = 0
    ) -> None:
        self.phase = phase
        self.level = level
        self.client_id = client_id
        self.keep_alive = keep_alive
        self.requested_expiry = requested_expiry
        self.will = will
        self.will_delay = will_delay
        self.receive_maximum = receive_maximum
        self.unacked_qos1 = unacked_qos1
        self.unreleased_qos2 = unreleased_qos2
        self.aliases_in = aliases_in
        self.aliases_in_maximum = aliases_in_maximum
        self.aliases_out = aliases_out
        self.session = session
        self.username = username
        self.publishes_refused = publishes_refused
