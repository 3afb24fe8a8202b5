"""The delayed wills of one node's sessions: when each is due, what the session record keeps of it, and its
retries while the netsplit policy refuses to publish.

A will without delay is published when its connection is lost (`lost`). A delayed one (MQTT 5, a persistent
session) waits here until it is due, and the session record carries it meanwhile (vmqpy.broker.core.stored_will), so
that a failover or a restart finds it (`adopt`, `restore`). A client that reconnects within the delay takes
it back (`take`: published at once for a clean start, dropped otherwise); a session that ends releases it
(`release`). A due will that the policy refuses is tried again `WILL_RETRY` seconds later for as long as its
session lives here. Publishing itself (the ACL, the policy, the routing) is the broker's: `publish` answers
False when the policy refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from vmqpy.broker.core.session import Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.sessions.message import Message

__all__ = ["WILL_RETRY", "PendingWill", "PendingWills"]

WILL_RETRY = 1.0  # seconds between two tries of a due will the netsplit policy refused


@dataclass(slots=True)
class PendingWill:
    due: float
    message: Message

    def __init__(self, due: float, message: Message) -> None:
        self.due = due
        self.message = message


class SessionRecords(Protocol):
    """Where session records are written (vmqpy.broker.core.persistence.SessionStore)."""

    def save_session(self, session: Session, will: StoredWill | None = None) -> None: ...


class PendingWills:
    """The wills waiting for their time, by client id."""

    def __init__(self, sessions: dict[str, Session], records: SessionRecords, usernames: dict[str, str | None],
                 publish: Callable[[Message, float], bool]) -> None:
        self.sessions = sessions
        self.records = records
        self.usernames = usernames  # the user name each client connected with (the ACL judges its will by it)
        self.publish = publish
        self.pending: dict[str, PendingWill] = {}

    def lost(self, session: Session, will: Message, will_delay: float, now: float) -> StoredWill | None:
        """The connection of `session` ended without a normal DISCONNECT: its will is published now, or kept
        until its delay is over (cut short by the session's expiry); the kept will, for the session record."""
        if will_delay <= 0 or not session.persistent:
            self.publish(will, now)
            return None
        due = StoredWill(will, will_delay).due_at(now, session.expiry_interval)
        self.pending[session.client_id] = PendingWill(due, will)
        return StoredWill(will, will_delay, due, self.usernames.get(session.client_id))

    def restore(self, session: Session, will: StoredWill, lost_at: float) -> None:
        """A will found in a session record at start: due its delay after `lost_at`, or at its recorded time."""
        self.pending[session.client_id] = PendingWill(will.due_at(lost_at, session.expiry_interval), will.message)
        if will.username is not None:
            self.usernames.setdefault(session.client_id, will.username)

    def adopt(self, client_id: str, will: StoredWill, now: float) -> None:
        """The will kept in the record of a session recovered from the replicas of its lost owner
        (vmqpy.replicas.failover): that connection was lost with its node. A client connected here again
        cancels a delayed will (as a reconnection within the delay does); otherwise it is published when due."""
        session = self.sessions.get(client_id)
        if session is None or (session.sink is not None and will.delay > 0):
            return
        if will.username is not None:
            self.usernames.setdefault(client_id, will.username)
        due = will.due_at(now, session.expiry_interval)
        self.pending[client_id] = PendingWill(due, will.message)
        if session.sink is None:  # replicated on: a second loss keeps it (a client here has its own will)
            self.records.save_session(session, replace(will, due=due))
        if due <= now:
            del self.pending[client_id]
            self._publish_due(client_id, will.message, now)

    def take(self, client_id: str) -> PendingWill | None:
        """The client connects again: its waiting will, if any, is no longer waiting."""
        return self.pending.pop(client_id, None)

    def release(self, client_id: str, now: float) -> None:
        """The session of `client_id` ends now: its waiting will, if any, is due."""
        pending = self.pending.pop(client_id, None)
        if pending is not None:
            self.publish(pending.message, now)

    def due(self, now: float) -> None:
        """Publish the wills whose time came."""
        for client_id, pending in list(self.pending.items()):
            if pending.due <= now:
                del self.pending[client_id]
                self._publish_due(client_id, pending.message, now)

    def _publish_due(self, client_id: str, message: Message, now: float) -> None:
        """Published, and its session record no longer carries it; or, while the policy refuses to publish,
        tried again later for as long as its session lives here (when it ends, `release` makes the last try)."""
        published = self.publish(message, now)
        session = self.sessions.get(client_id)
        if session is None or not session.persistent or session.moving_to is not None:
            return
        if published:
            if session.sink is None:  # a connected client's record holds its own connection's will
                self.records.save_session(session)
        else:
            self.pending[client_id] = PendingWill(now + WILL_RETRY, message)
