"""The will of a persistent session as its session record keeps it, so that it outlives the node that holds it.

The session record (vmqpy.broker.core.persistence) is written at each CONNECT, at each loss of the connection and when a
delayed will is published, and it is replicated with the session's queue (vmqpy.replicas, issue 18). It carries:
* while the client is connected, its will and will delay (`due` None): if the node dies, the connection was
  lost without a DISCONNECT, and the node that recovers the session publishes the will (`StoredWill.due_at`);
* after the connection was lost, a delayed will not yet published, with the time it is due;
* nothing once the will is published or discarded (a normal DISCONNECT, a reconnect within the delay).
The user name rides along: the ACL judges a will by its client's user name, and the recovering node never saw
the client connect. Pure: records in, records out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vmqpy.sessions.message import Message


@dataclass(frozen=True, slots=True)
class StoredWill:
    message: Message
    delay: float  # the will delay interval, seconds from the loss of the connection
    due: float | None = None  # wall-clock seconds when a pending will is due; None while the client is connected
    username: str | None = None

    def pack(self) -> list[object]:
        return [self.message.pack(), self.delay, self.due, self.username]

    @classmethod
    def unpack(cls, data: Any) -> StoredWill:
        message, delay, due, username = data
        return cls(Message.unpack(message), float(delay), None if due is None else float(due),
                   None if username is None else str(username))

    def due_at(self, lost_at: float, expiry: float | None) -> float:
        """When the will is published if the connection is taken as lost at `lost_at`: a pending will keeps its
        time; otherwise the delay counts from the loss, cut short by the session's expiry, as for a live loss."""
        if self.due is not None:
            return self.due
        delay = self.delay if expiry is None else min(self.delay, expiry)
        return lost_at + max(delay, 0.0)
