"""The plain records a session (vmqpy.broker.core.session) is made of and answers with: a message on its way to the
client (`Outgoing`, in its `OutState`), a subscription (`SubEntry`) and what became of a delivery (`Delivery`).
The broker's sessions, their persistence and handover, the cluster's registration and the queue replicas read and
write them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions.message import Message

__all__ = ["Delivery", "OutState", "Outgoing", "SubEntry"]


class OutState(IntEnum):
    QUEUED = 0  # waiting for the window
    PUBLISHED = 1  # PUBLISH sent, waiting for PUBACK (QoS 1) or PUBREC (QoS 2)
    RELEASED = 2  # PUBREL sent, waiting for PUBCOMP


@dataclass(slots=True)
class Outgoing:
    """One message on its way to this session's client."""

    seq: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: list[int] = field(default_factory=list)
    packet_id: int | None = None
    state: OutState = OutState.QUEUED

    def __init__(
            self, seq: int, message: Message, qos: int, retain: bool, subscription_ids: list[int] | None = None,
            packet_id: int | None = None, state: OutState = OutState.QUEUED
    ) -> None:
        self.seq = seq
        self.message = message
        self.qos = qos
        self.retain = retain
        self.subscription_ids = [] if subscription_ids is None else subscription_ids
        self.packet_id = packet_id
        self.state = state


@dataclass(slots=True)
class SubEntry:
    """One subscription of this session. `match_filter` is the filter without a `$share/group/` prefix."""

    topic_filter: str
    match_filter: str
    options: SubOptions
    subscription_id: int | None = None
    group: str | None = None

    def __init__(
            self, topic_filter: str, match_filter: str, options: SubOptions, subscription_id: int | None = None,
            group: str | None = None
    ) -> None:
        self.topic_filter = topic_filter
        self.match_filter = match_filter
        self.options = options
        self.subscription_id = subscription_id
        self.group = group


class Delivery(IntEnum):
    SENT = 0
    QUEUED = 1
    DROPPED = 2
    DUPLICATE = 3  # a forward this session already got (`watch_forwards`)
