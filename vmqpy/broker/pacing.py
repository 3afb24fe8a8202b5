"""The pace of a client connection (vmqpy.broker.connection): when its socket is read and when what it left
unacknowledged is sent again.

- Backpressure: a publisher whose subscribers (or a peer node) are congested is not read until they drained.
- `max_message_rate`: a PUBLISH over the client's rate stops the reading until the rate allows the next one
  (vmqpy/broker/rate_limit.py); the client is slowed down, nothing is dropped.
- Resends to 3.1.1 clients (`retry_interval`): a timer for the oldest PUBLISH or PUBREL due, decided by the
  protocol machine.

Functions of the driver's `MQTTConnection`; they run on its event loop.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from vmqpy.broker.rate_limit import TokenBucket
from vmqpy.broker.router import RouteResult

if TYPE_CHECKING:
    from vmqpy.broker.connection import MQTTConnection

__all__ = ["arm_retry", "block", "on_retry", "release_rate", "set_reading", "spend_rate", "unblock"]


def block(conn: MQTTConnection, result: RouteResult) -> None:
    """Backpressure: stop reading this publisher until the congested subscribers drained."""
    transport = conn.transport
    if transport is None or conn.closing:
        return
    for session in result.congested:
        conn._blocked_on += 1
        session.wait_for_drain(partial(unblock, conn))
    for node in result.congested_nodes:
        conn._blocked_on += 1
        conn.broker.wait_for_node(node, partial(unblock, conn))
    set_reading(conn)


def unblock(conn: MQTTConnection) -> None:
    conn._blocked_on -= 1
    if conn._blocked_on <= 0:
        conn._blocked_on = 0
        set_reading(conn)


def spend_rate(conn: MQTTConnection, rate: TokenBucket) -> None:
    """`max_message_rate`: a PUBLISH over the client's rate stops the reading of its socket, and of what was
    read already, until the rate allows the next one (the client is slowed down, nothing is dropped)."""
    wait = rate.take(conn.loop.time())
    if wait > 0.0 and not conn._rate_held:
        conn._rate_held = True
        set_reading(conn)
        conn.loop.call_later(wait, release_rate, conn)


def release_rate(conn: MQTTConnection) -> None:
    conn._rate_held = False
    if conn.closing:
        return
    set_reading(conn)
    conn._process()  # the packets read before the hold


def set_reading(conn: MQTTConnection) -> None:
    """Read the socket unless congested subscribers (`_blocked_on`) or the publish rate (`_rate_held`) hold
    it."""
    transport = conn.transport
    if transport is None or conn.closing:
        return
    paused = conn._blocked_on > 0 or conn._rate_held
    if paused != conn._reading_paused:
        conn._reading_paused = paused
        if paused:
            transport.pause_reading()
        else:
            transport.resume_reading()


def arm_retry(conn: MQTTConnection) -> None:
    """Come back when the oldest PUBLISH or PUBREL the client has not acknowledged is due for a resend."""
    deadline = conn.machine.retry_deadline()
    if deadline is not None and not conn.closing:
        conn._retry_timer = conn.loop.call_later(max(0.0, deadline - time.time()), on_retry, conn)


def on_retry(conn: MQTTConnection) -> None:
    conn._retry_timer = None
    if conn.closing or conn.session is None:
        return
    deadline = conn.machine.handle_retry(time.time())
    if deadline is not None:
        conn._retry_timer = conn.loop.call_later(max(0.0, deadline - time.time()), on_retry, conn)

