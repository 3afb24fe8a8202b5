"""The decisions of the connection machine (vmqpy.broker.machine.protocol): what the driver
(vmqpy.broker.driver.connection)
is to do about a packet. The machine returns them; it never does anything itself.

`Send` and `Reply` write a packet (a `Reply` may wait for the storage barrier and for other nodes'
acknowledgements); `Close` ends the connection, with the DISCONNECT its `reason_code` (and Server Reference)
makes for a 5.0 client first; `RefuseConnect` answers a CONNECT that is refused (after a delay for a refused
login); `Authenticate` runs a password check off the event loop; `Register` starts the registration of an
accepted CONNECT; `Route` publishes a message; `RecordIncoming` writes the state of a client's QoS 2 packet id
to the session's journal (the machine never writes storage itself); `SubscribeTo`, `UnsubscribeFrom` change
subscriptions; `Unanswered` is a packet left without an answer (logged); `Throttle` stops reading the client
until congested subscribers drained.

The ones made for every PUBLISH (`Route`, `Reply`, `RecordIncoming`) are named tuples: no attribute dictionary,
and the machine builds the most frequent ones with `tuple.__new__`, without a Python frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from vmqpy.broker.access.auth import PasswordCheck
from vmqpy.broker.core.remote_ack import RemoteAck
from vmqpy.broker.core.router import RouteResult
from vmqpy.broker.machine.negotiation import Accepted
from vmqpy.mqtt.packets import Connect, Packet, Subscribe, Unsubscribe
from vmqpy.sessions.message import Message

__all__ = [
    "Authenticate",
    "Close",
    "Decision",
    "Decisions",
    "RecordIncoming",
    "RefuseConnect",
    "Register",
    "Reply",
    "Route",
    "Send",
    "SubscribeTo",
    "Throttle",
    "Unanswered",
    "UnsubscribeFrom",
    "suback_codes",
]


@dataclass(slots=True)
class Send:
    """Write this packet now."""

    packet: Packet

    def __init__(self, packet: Packet) -> None:
        self.packet = packet


class Reply(NamedTuple):
    """Write this acknowledgement in order after the ones before it, once the disk writes queued so far are
    committed (`durable`) and the other nodes a publish went to have it (`remote`). `note`: a line for the log.
    (A named tuple, not a dataclass: one is made for every QoS 1/2 PUBLISH, and it is built in C.)"""

    packet: Packet
    durable: bool = False
    remote: RemoteAck | None = None
    note: str | None = None
    warn: bool = False  # the note is a warning


@dataclass(slots=True)
class Close:
    """Close the connection; first a DISCONNECT with `reason_code` (None: no DISCONNECT; the machine gives one to
    a 5.0 client only) and, when set, `server_reference` (Use another server). `why` is for the log.
    `normal`: no will is published (the client ended it with DISCONNECT, or the node moves it away).
    `by_client`: the client's DISCONNECT ended it (with or without its will): it sends nothing more and gets
    nothing more, so its socket is closed without lingering (vmqpy.broker.driver.linger, which is for a client that may
    still be writing when the node has the last word)."""

    reason_code: int | None
    why: str
    normal: bool = False
    by_client: bool = False
    server_reference: str | None = None

    def __init__(
            self, reason_code: int | None, why: str, normal: bool = False, by_client: bool = False,
            server_reference: str | None = None
    ) -> None:
        self.reason_code = reason_code
        self.why = why
        self.normal = normal
        self.by_client = by_client
        self.server_reference = server_reference


@dataclass(slots=True)
class RefuseConnect:
    """Answer the CONNECT with a refusal (CONNACK `reason_code` in the client's protocol level) and close.
    `failed_login`: the credentials were refused; the CONNACK then leaves after `delay` seconds, reading nothing
    more meanwhile. `hint`: for the log only (how an operator would let such a client in)."""

    reason_code: int
    why: str
    delay: float = 0.0
    failed_login: bool = False
    hint: str | None = None

    def __init__(
            self, reason_code: int, why: str, delay: float = 0.0, failed_login: bool = False, hint: str | None = None
    ) -> None:
        self.reason_code = reason_code
        self.why = why
        self.delay = delay
        self.failed_login = failed_login
        self.hint = hint


@dataclass(slots=True)
class Authenticate:
    """Run the CONNECT's password check off the event loop (the node's login pool), reading nothing meanwhile, then
    call `authenticated` with its verdict. `connect` is the CONNECT, decided again then."""

    connect: Connect
    check: PasswordCheck

    def __init__(self, connect: Connect, check: PasswordCheck) -> None:
        self.connect = connect
        self.check = check


@dataclass(slots=True)
class Register:
    """Register the accepted CONNECT with the cluster, open the session, then call `connected`."""

    accepted: Accepted

    def __init__(self, accepted: Accepted) -> None:
        self.accepted = accepted


class Route(NamedTuple):
    """Publish `message` through the broker, then call `routed` with what it did."""

    message: Message
    qos: int
    packet_id: int


class RecordIncoming(NamedTuple):
    """Write to the session's journal that the client's QoS 2 `packet_id` awaits its PUBREL (`awaiting`) or was
    released; before the `Reply` that follows it, which waits for that write to be durable."""

    packet_id: int
    awaiting: bool


@dataclass(slots=True)
class SubscribeTo:
    """Add the subscriptions through the broker; SUBACK once durable, then the retained messages. `refused`:
    the positions of filters not to add, with their reason code (`suback_codes` puts them in the SUBACK)."""

    packet: Subscribe
    refused: dict[int, int] = field(default_factory=dict)

    def __init__(self, packet: Subscribe, refused: dict[int, int] | None = None) -> None:
        self.packet = packet
        self.refused = {} if refused is None else refused


@dataclass(slots=True)
class UnsubscribeFrom:
    """Remove the subscriptions through the broker; UNSUBACK once durable."""

    packet: Unsubscribe

    def __init__(self, packet: Unsubscribe) -> None:
        self.packet = packet


@dataclass(slots=True)
class Unanswered:
    """The client's PUBLISH is neither routed nor acknowledged (3.1.1 has no refusal code): the client resends
    QoS 1/2 on its next connection. `why` is for the log."""

    why: str
    warn: bool = False

    def __init__(self, why: str, warn: bool = False) -> None:
        self.why = why
        self.warn = warn


@dataclass(slots=True)
class Throttle:
    """Stop reading this client until the congested subscribers (here and on other nodes) drained."""

    result: RouteResult

    def __init__(self, result: RouteResult) -> None:
        self.result = result


Decision = (Send | Reply | Close | RefuseConnect | Authenticate | Register | Route | RecordIncoming | SubscribeTo
            | UnsubscribeFrom | Unanswered | Throttle)
Decisions = tuple[Decision, ...]


def suback_codes(count: int, refused: Mapping[int, int], granted: list[int]) -> list[int]:
    """The reason codes of the SUBACK of `count` filters: the `refused` ones at their positions, the others those
    the broker `granted`, in order."""
    rest = iter(granted)
    return [refused[index] if index in refused else next(rest) for index in range(count)]
