"""What the node-link network keeps per peer name: dial address, outgoing buffer, the link in use, dial state."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from vmqpy.cluster.outbox import PeerOutbox

if TYPE_CHECKING:
    from vmqpy.cluster.connection import LinkConnection

__all__ = ["Peer"]


class Peer:
    """One peer of the network (added to be dialed, or known because it linked to us)."""

    __slots__ = (
        "active",
        "address",
        "attempts",
        "dial_task",
        "dialing",
        "incarnation",
        "intent",
        "name",
        "outbox",
        "reconnect",
        "removed",
        "was_up",
    )

    def __init__(self, name: str, address: tuple[str, int] | None, outgoing_buffer: int) -> None:
        self.name = name
        self.address = address  # set by add_peer: we dial it
        self.outbox = PeerOutbox(outgoing_buffer)
        self.active: LinkConnection | None = None  # the established link in use
        self.dialing: LinkConnection | None = None  # our outgoing connection while it shakes hands
        self.dial_task: asyncio.Task[None] | None = None  # our TCP connect in progress
        self.reconnect: asyncio.TimerHandle | None = None
        self.attempts = 0  # dial attempts since the last established link
        self.incarnation: int | None = None
        self.intent: str | None = None  # stated in the HELLO of our dials (handshake.JOIN while joining)
        self.removed = False
        self.was_up = False

    @property
    def writable(self) -> bool:
        """A link to the peer is up and its socket takes bytes."""
        conn = self.active
        return conn is not None and not conn.paused
