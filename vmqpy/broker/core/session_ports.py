"""What a session (vmqpy.broker.core.session) is given: the `Sink` of its live connection, to which it hands packets,
and the `Journal` in which it records what must survive a crash (the SQLite persistence of persistent sessions,
vmqpy.broker.core.persistence; `NullJournal` for clean ones). vmqpy.broker.core.session re-exports the three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from vmqpy.mqtt.packets import Packet
from vmqpy.mqtt.reason_codes import SESSION_TAKEN_OVER
from vmqpy.sessions.message import Message

if TYPE_CHECKING:
    from vmqpy.broker.core.session import Session
    from vmqpy.sessions.parts import Outgoing

__all__ = ["Journal", "NullJournal", "Sink"]


class Sink(Protocol):
    """The live connection of a session, as the session sees it."""

    def write_packet(self, packet: Packet) -> None: ...

    def write_publish(
        self, message: Message, qos: int, retain: bool, packet_id: int | None, subscription_ids: list[int],
        now: float, dup: bool = False,
    ) -> None:
        """Write `message` as a PUBLISH (the sink may reuse an encoded frame shared by many subscribers)."""
        ...

    def can_write(self) -> bool: ...

    def take_over(self, reason_code: int = SESSION_TAKEN_OVER) -> tuple[Message | None, float]:
        """Close the connection for a newer one of the same client id (5.0: DISCONNECT with `reason_code`,
        0x8E; 0x98 Administrative action for `vmq-admin session disconnect`).

        Returns the connection's will and will delay, which the broker then owns."""
        ...


class Journal(Protocol):
    """Where a persistent session records what must survive a crash."""

    def save_message(self, session: Session, out: Outgoing) -> None: ...

    def delete_message(self, session: Session, out: Outgoing) -> None: ...

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None: ...


class NullJournal:
    """The journal of a clean session: nothing survives."""

    def save_message(self, session: Session, out: Outgoing) -> None:
        pass

    def delete_message(self, session: Session, out: Outgoing) -> None:
        pass

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None:
        pass
