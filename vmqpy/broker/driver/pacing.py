"""The read gate of a client connection (vmqpy.broker.driver.connection): `ReadGate` owns whether its socket is read.

Reading stops while anything holds it and resumes when nothing does:
- a CONNECT being decided off the socket (its password checked, its client id registered, a refusal's delay):
  `hold`/`release`;
- backpressure: a publisher whose subscribers (or a peer node) are congested is not read until they drained
  (`block`: one count per congested party, `unblock` as each drained), and the same count for a SUBSCRIBE of
  many filters added a slice a turn (vmqpy.broker.driver.subscribe_slices) and for a client whose packets wait in the
  bulk lane (vmqpy.broker.core.turn_budget);
- `max_message_rate`: a PUBLISH over the client's rate stops the reading until the rate allows the next one
  (`hold_rate`, until a time the connection's one timer is armed for; vmqpy/broker/driver/rate_limit.py); the client
  is slowed down, nothing is dropped.

`paused` is what the socket was last told; the keep-alive check counts a client whose reading is paused as
active (its silence is not its own doing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from vmqpy.broker.core.router import RouteResult

__all__ = ["ReadGate"]


class DrainWaiter(Protocol):
    """What the gate uses of a congested session: a call back once it drained."""

    def wait_for_drain(self, callback: Callable[[], None]) -> None: ...


class ReadGate:
    """Whether one connection's socket is read, from every reason to hold it."""

    __slots__ = ("blocked_on", "held", "paused", "rate_until", "transport")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None  # None: nothing to pause (not yet open, or closed)
        self.paused = False
        self.held = False  # a CONNECT is decided meanwhile (login, registration, refusal)
        self.blocked_on = 0  # congested parties, slices of a SUBSCRIBE, a turn in the bulk lane
        self.rate_until = 0.0  # over max_message_rate: nothing read before this time (0.0: not held)

    def update(self) -> None:
        """Tell the socket whether it is read now."""
        transport = self.transport
        if transport is None:
            return
        paused = self.held or self.blocked_on > 0 or self.rate_until > 0.0
        if paused != self.paused:
            self.paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def hold(self) -> None:
        """Read nothing until `release` (a CONNECT is decided meanwhile)."""
        self.held = True
        self.update()

    def release(self) -> None:
        self.held = False
        self.update()

    def block(self, result: RouteResult, wait_for_node: Callable[[str, Callable[[], None]], None]) -> None:
        """Backpressure: read nothing until every congested subscriber of `result` (and every congested node,
        `wait_for_node`) drained."""
        if self.transport is None:
            return
        congested: Sequence[DrainWaiter] = result.congested  # what the gate uses of a congested session
        for session in congested:
            self.blocked_on += 1
            session.wait_for_drain(self.unblock)
        for node in result.congested_nodes:
            self.blocked_on += 1
            wait_for_node(node, self.unblock)
        self.update()

    def add_block(self) -> None:
        """One more reason to read nothing (a turn in the bulk lane, a sliced SUBSCRIBE), until `unblock`."""
        self.blocked_on += 1
        self.update()

    def unblock(self) -> None:
        self.blocked_on -= 1
        if self.blocked_on <= 0:
            self.blocked_on = 0
            self.update()

    def hold_rate(self, until: float) -> None:
        """`max_message_rate`: read nothing before `until` (the connection's timer calls `release_rate`)."""
        self.rate_until = until
        self.update()

    def release_rate(self) -> None:
        self.rate_until = 0.0
        self.update()

    def close(self) -> None:
        """The connection closed: the socket is paused or resumed no more (a lingering close drains it)."""
        self.transport = None
