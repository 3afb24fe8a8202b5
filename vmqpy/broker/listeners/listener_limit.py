"""`max_connections` of one MQTT listener: how many connections it holds, and the refusal of one more.

A listener at its limit still accepts the TCP connection (the kernel already did) and closes it at once,
before reading anything: the client sees its connection closed. Each refusal is counted in the broker's metrics
(`connections_refused_max`); the log gets at most one line a second per listener, with how many were refused.
`ConnectionLimit` is pure (time is an argument); `RefusedConnection` is the asyncio protocol of a refused one.

Every listener's limit also takes its place in the node-wide one (`shared`): the MQTT sockets the node's
descriptors allow (vmqpy.descriptors.mqtt_socket_budget), whatever each listener's own `max_connections`, so the
admin API and `/health` always find a descriptor. Its refusals count as `connections_refused_descriptors`.
`AddressGate` admits a socket by its client address (vmqpy.broker.listeners.address_limit) before the listener's
protocol
gets it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import cast

import structlog

from vmqpy.broker.listeners.address_limit import AddressLimits, Admission, address_of

log = structlog.get_logger("vmqpy.listener")

REFUSED_METRIC = "connections_refused_max"
DESCRIPTORS_REFUSED_METRIC = "connections_refused_descriptors"
LOG_EVERY = 1.0  # seconds between two log lines of refusals of one listener


class ConnectionLimit:
    """The connections of listener `name`: at most `maximum` at once (None: no limit)."""

    def __init__(self, name: str, maximum: int | None, metrics: Counter[str],
                 shared: ConnectionLimit | None = None, metric: str = REFUSED_METRIC) -> None:
        self.name = name
        self.maximum = maximum
        self.metrics = metrics
        self.shared = shared  # the node-wide limit this one's connections count in too
        self.metric = metric
        metrics[metric] += 0  # exported at 0 from the start
        self.live = 0
        self.unlogged = 0  # refusals not yet in the log
        self._logged_at: float | None = None

    def admit(self, now: float) -> bool:
        """Whether a new connection (at `now`, seconds) may stay; True counts it as live until `release`."""
        if self.maximum is None or self.live < self.maximum:
            shared = self.shared
            if shared is not None:
                if shared.shared is None and (shared.maximum is None or shared.live < shared.maximum):
                    shared.live += 1  # `shared.admit(now)`'s own admission, without a call per connection
                elif not shared.admit(now):
                    return False
            self.live += 1
            return True
        self.metrics[self.metric] += 1
        self.unlogged += 1
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            if self.shared is None and self.metric == DESCRIPTORS_REFUSED_METRIC:
                log.warning("connections refused: the MQTT listeners hold every descriptor the node gives them "
                            "(the open files limit less the admin API's and the node's reserve)",
                            max_sockets=self.maximum, refused=self.unlogged)
            else:
                log.warning("connections refused: the listener is at max_connections", listener=self.name,
                            max_connections=self.maximum, refused=self.unlogged)
            self.unlogged = 0
            self._logged_at = now
        return False

    def release(self) -> None:
        """A connection admitted earlier is gone."""
        if self.live > 0:
            self.live -= 1
        if self.shared is not None:
            self.shared.release()


class RefusedConnection(asyncio.Protocol):
    """A connection over its listener's limit: closed as soon as it is made, nothing read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class AddressGate(asyncio.Protocol):
    """A new socket admitted by its client address (the socket's peer): over a per-address limit it is closed at
    once (nothing read) and `refused` runs; else `admitted(admission)` makes the protocol that gets the socket
    (admission None: a peer without an address, not counted)."""

    __slots__ = ("admitted", "limits", "refused")

    def __init__(self, limits: AddressLimits, admitted: Callable[[Admission | None], asyncio.Protocol],
                 refused: Callable[[], None]) -> None:
        self.limits = limits
        self.admitted = admitted
        self.refused = refused

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        address = address_of(transport.get_extra_info("peername"))
        admission = None
        if address is not None:
            admission = self.limits.admit(address, asyncio.get_running_loop().time())
            if admission is None:
                self.refused()
                cast(asyncio.Transport, transport).abort()  # (uvloop's are no subclasses of asyncio's)
                return
        protocol = self.admitted(admission)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
