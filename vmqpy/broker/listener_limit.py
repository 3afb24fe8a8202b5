"""`max_connections` of one MQTT listener: how many connections it holds, and the refusal of one more.

A listener at its limit still accepts the TCP connection (the kernel already did) and closes it at once,
before reading anything: the client sees its connection closed. Each refusal is counted in the broker's metrics
(`connections_refused_max`); the log gets at most one line a second per listener, with how many were refused.
`ConnectionLimit` is pure (time is an argument); `RefusedConnection` is the asyncio protocol of a refused one.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import structlog

log = structlog.get_logger("vmqpy.listener")

REFUSED_METRIC = "connections_refused_max"
LOG_EVERY = 1.0  # seconds between two log lines of refusals of one listener


class ConnectionLimit:
    """The connections of listener `name`: at most `maximum` at once (None: no limit)."""

    def __init__(self, name: str, maximum: int | None, metrics: Counter[str]) -> None:
        self.name = name
        self.maximum = maximum
        self.metrics = metrics
        self.live = 0
        self.unlogged = 0  # refusals not yet in the log
        self._logged_at: float | None = None

    def admit(self, now: float) -> bool:
        """Whether a new connection (at `now`, seconds) may stay; True counts it as live until `release`."""
        if self.maximum is None or self.live < self.maximum:
            self.live += 1
            return True
        self.metrics[REFUSED_METRIC] += 1
        self.unlogged += 1
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.warning("connections refused: the listener is at max_connections", listener=self.name,
                        max_connections=self.maximum, refused=self.unlogged)
            self.unlogged = 0
            self._logged_at = now
        return False

    def release(self) -> None:
        """A connection admitted earlier is gone."""
        self.live = max(0, self.live - 1)


class RefusedConnection(asyncio.Protocol):
    """A connection over its listener's limit: closed as soon as it is made, nothing read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
