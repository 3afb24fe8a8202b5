"""What an operator does to one client or one retained message through `vmq-admin` (vmqpy.facade answers the
commands; the broker, vmqpy.broker.core.broker, does the work): `session disconnect [--cleanup]` and
`retain delete` and `retain delete-expired`. They act on this node's state; the facade asks every member (the
retained messages are replicated: deleting them on one node deletes them everywhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vmqpy.mqtt import reason_codes as rc
from vmqpy.sessions import records

if TYPE_CHECKING:
    from vmqpy.broker.core.broker import Broker

__all__ = ["delete_expired_retained", "delete_retained", "disconnect"]


def disconnect(broker: Broker, client_id: str, now: float, cleanup: bool) -> str | None:
    """`vmq-admin session disconnect`: close the client's connection here (5.0: DISCONNECT 0x98 Administrative
    action; its will is published as for any disconnect without DISCONNECT) and, with `cleanup`, end its
    session (subscriptions, queue, owner record). What was done, or None when the client has no session on
    this node."""
    session = broker.sessions.get(client_id)
    if session is None:
        return None
    sink = session.sink
    done = "disconnected" if sink is not None else "not connected"
    if sink is not None:
        will, delay = sink.take_over(rc.ADMINISTRATIVE_ACTION)
        broker.metrics["session_disconnected_by_operator"] += 1
        broker.close_session(session, sink, now, will, 0.0 if cleanup else delay)
    if cleanup and broker.sessions.get(client_id) is session:
        broker.release_will(client_id, now)  # the session ends now: its will is due
        broker.discard(session)
    if cleanup:
        done += ", session removed"
    return done


def delete_retained(broker: Broker, topic: str) -> bool:
    """`vmq-admin retain delete`: remove the retained message of `topic` cluster-wide (replicated like a
    retained PUBLISH with an empty payload). False when there is none."""
    if topic not in broker.retained:
        return False
    broker.metadata.delete(records.RETAIN, records.retain_key(topic))
    return True


def delete_expired_retained(broker: Broker, now: float) -> int:
    """`vmq-admin retain delete-expired`: remove, cluster-wide, the retained messages whose message expiry
    interval (MQTT 5.0) passed; they are already no longer delivered, this frees their place. How many."""
    expired = [topic for topic, message in broker.retained.items() if message.expired(now)]
    for topic in expired:
        broker.metadata.delete(records.RETAIN, records.retain_key(topic))
    return len(expired)
