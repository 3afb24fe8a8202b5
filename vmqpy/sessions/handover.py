"""The state of a session that moves between nodes, as plain msgpack-friendly values.

A session's subscriptions are in the replicated store, but its in-flight messages (with their packet ids),
its queue and its incoming QoS 2 state are only on the node that owns it. When the client id moves (a
takeover on another node, a heal that resolves a duplicate, a node that leaves), the old owner sends an
image of that state, then its messages in batches that the new owner acknowledges once they are on its disk.
The same message record serves the node's own persistence (vmqpy.broker.core.persistence). The broker builds images
from its sessions (`SessionImage.of` reads what `ImageSource` names) and the cluster carries them
(vmqpy.cluster.registration); neither layer's objects are needed to read one.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from vmqpy.mqtt.packets import SubOptions
from vmqpy.mqtt.topics import parse_shared
from vmqpy.sessions.message import Message
from vmqpy.sessions.names import Entry, pack_entries, unpack_entries
from vmqpy.sessions.parts import Outgoing, OutState, SubEntry


class ImageSource(Protocol):
    """What an image is made of: the parts of a session (vmqpy.broker.core.session.Session) that move with it."""

    @property
    def client_id(self) -> str: ...

    @property
    def protocol_level(self) -> int: ...

    @property
    def expiry_interval(self) -> float | None: ...

    @property
    def awaiting_release(self) -> AbstractSet[int]: ...

    @property
    def subscriptions(self) -> Mapping[str, SubEntry]: ...


def outgoing_record(out: Outgoing) -> list[Any]:
    """A message on its way to a client, without its sequence number."""
    return [out.message.pack(), out.qos, out.retain, out.subscription_ids, out.packet_id, int(out.state)]


def outgoing_from_record(seq: int, record: Any) -> Outgoing:
    packed, qos, retain, sub_ids, packet_id, state = record
    return Outgoing(seq, Message.unpack(packed), int(qos), bool(retain), [int(i) for i in sub_ids],
                    None if packet_id is None else int(packet_id), OutState(int(state)))


def pack_messages(outs: list[Outgoing]) -> list[Any]:
    return [[out.seq, outgoing_record(out)] for out in outs]


def unpack_messages(data: Any) -> list[Outgoing]:
    return [outgoing_from_record(int(seq), record) for seq, record in data]


def subscription_record(entry: SubEntry) -> list[Any]:
    opts = entry.options
    return [entry.topic_filter, opts.qos, opts.no_local, opts.retain_as_published, opts.retain_handling,
            entry.subscription_id]


def subscription_from_record(record: Any) -> SubEntry:
    topic_filter, qos, no_local, rap, handling, sub_id = record
    group, match_filter = parse_shared(str(topic_filter))
    options = SubOptions(int(qos), bool(no_local), bool(rap), int(handling))
    return SubEntry(str(topic_filter), match_filter, options, None if sub_id is None else int(sub_id), group)


@dataclass(slots=True)
class SessionImage:
    """What the new owner needs to resume a session; `present` is False when the old owner had none."""

    client_id: str
    present: bool
    protocol_level: int = 4
    expiry_interval: float | None = None
    awaiting_release: list[int] = field(default_factory=list)
    subscriptions: list[SubEntry] = field(default_factory=list)
    # the names of the messages the sending node recovered from an old owner's copies (vmqpy.broker.core.lineage)
    lineage: list[Entry] = field(default_factory=list)
    source: str | None = None  # the node that sent this image (set by the receiver; not in the frame)
    # the session is another user's and stays where it is (session.foreign_user = refuse; not in the image's
    # fields: the mig_begin frame says it)
    foreign: bool = False
    # the session is on its way to another node (a leave -k drains its owner): not absent, not here either; the
    # new owner refuses the CONNECT for now (the mig_begin frame says it, as for `foreign`)
    moving: bool = False

    def __init__(
            self, client_id: str, present: bool, protocol_level: int = 4, expiry_interval: float | None = None,
            awaiting_release: list[int] | None = None, subscriptions: list[SubEntry] | None = None,
            lineage: list[Entry] | None = None, source: str | None = None, foreign: bool = False, moving: bool = False
    ) -> None:
        self.client_id = client_id
        self.present = present
        self.protocol_level = protocol_level
        self.expiry_interval = expiry_interval
        self.awaiting_release = [] if awaiting_release is None else awaiting_release
        self.subscriptions = [] if subscriptions is None else subscriptions
        self.lineage = [] if lineage is None else lineage
        self.source = source
        self.foreign = foreign
        self.moving = moving

    @classmethod
    def of(cls, session: ImageSource) -> SessionImage:
        return cls(session.client_id, True, session.protocol_level, session.expiry_interval,
                   sorted(session.awaiting_release), list(session.subscriptions.values()))

    @classmethod
    def absent(cls, client_id: str) -> SessionImage:
        return cls(client_id, False)

    def pack(self) -> list[Any]:
        packed = [self.client_id, self.present, self.protocol_level, self.expiry_interval, self.awaiting_release,
                  [subscription_record(e) for e in self.subscriptions]]
        if self.lineage:  # only then: a node of an earlier version reads the six fields
            packed.append(pack_entries(self.lineage))
        return packed

    @classmethod
    def unpack(cls, data: Any, source: str | None = None) -> SessionImage:
        client_id, present, level, expiry, awaiting, subs, *rest = data
        if len(rest) > 1:
            raise ValueError("session image: too many fields")
        return cls(str(client_id), bool(present), int(level), None if expiry is None else float(expiry),
                   [int(p) for p in awaiting], [subscription_from_record(s) for s in subs],
                   unpack_entries(rest[0]) if rest else [], source)


class RegistrationRefused(Exception):
    """A CONNECT cannot be registered now (its leader is unreachable, or too many of its id wait)."""


@dataclass(slots=True)
class Ticket:
    """A registration in progress: the client id's lock is held (at its leader, or none when registering
    without one was allowed) and `image` is the session the previous owner handed over, if any."""

    client_id: str
    request: int
    leader: str | None
    image: SessionImage | None = None
    stash: list[Outgoing] = field(default_factory=list)  # handed-over messages that came before the CONNACK
    source: str | None = None  # the node that handed the session over
    foreign: bool = False  # it refused: the session is another user's (session.foreign_user = refuse there)
    moving: bool = False  # the old owner was handing the session to another node: the CONNECT is refused for now
    asked_at: float | None = None  # monotonic time the handover was asked of `source` (handover_duration)

    def __init__(
            self, client_id: str, request: int, leader: str | None, image: SessionImage | None = None,
            stash: list[Outgoing] | None = None, source: str | None = None, foreign: bool = False,
            moving: bool = False, asked_at: float | None = None
    ) -> None:
        self.client_id = client_id
        self.request = request
        self.leader = leader
        self.image = image
        self.stash = [] if stash is None else stash
        self.source = source
        self.foreign = foreign
        self.moving = moving
        self.asked_at = asked_at


__all__ = [
    "ImageSource",
    "RegistrationRefused",
    "SessionImage",
    "Ticket",
    "outgoing_from_record",
    "outgoing_record",
    "pack_messages",
    "subscription_from_record",
    "subscription_record",
    "unpack_messages",
]
