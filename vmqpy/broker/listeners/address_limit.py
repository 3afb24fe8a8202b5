"""Connections per client address, node-wide (every MQTT listener together): at most
`listener.max_connections_per_address` sockets of one address, of which at most `listener.max_pending_per_address`
still before their CONNECT. One address (one host, one NAT gateway, one attacker) then cannot fill the node's
`max_connections` and lock every other address out.

The address is the client's: the socket's peer, or the source a PROXY protocol header gave (a load balancer's
own address never counts for its clients'). A socket over a limit is closed at once, nothing read or sent,
counted (`connections_refused_address`, `connections_refused_pending_address`), and the log says so at most once a
second. Pure (time is an argument); the listeners (vmqpy.broker.listeners.listeners) call `admit` when a socket's client
address is known, `Admission.connected` when its CONNECT is whole and `Admission.release` when it is gone.
"""

from __future__ import annotations

from collections import Counter

import structlog

log = structlog.get_logger("vmqpy.listener")

REFUSED_METRIC = "connections_refused_address"
REFUSED_PENDING_METRIC = "connections_refused_pending_address"
LOG_EVERY = 1.0  # seconds between two log lines of refusals


class AddressLimits:
    """The sockets of each client address: at most `maximum` (None: no limit), at most `pending` (None: no
    limit) of them before CONNECT."""

    def __init__(self, maximum: int | None, pending: int | None, metrics: Counter[str]) -> None:
        self.maximum = maximum
        self.pending = pending
        self.metrics = metrics
        self.connections: Counter[str] = Counter()  # address -> sockets (pending ones included)
        self.waiting: Counter[str] = Counter()  # address -> sockets before CONNECT
        self.unlogged = 0
        self._logged_at: float | None = None
        metrics[REFUSED_METRIC] += 0  # exported at 0 from the start
        metrics[REFUSED_PENDING_METRIC] += 0

    @property
    def unlimited(self) -> bool:
        return self.maximum is None and self.pending is None

    def admit(self, address: str, now: float) -> Admission | None:
        """A new socket of `address` (at `now`, seconds): its Admission, or None when it must be closed."""
        if self.maximum is not None and self.connections[address] >= self.maximum:
            self._refused(REFUSED_METRIC, "listener.max_connections_per_address", self.maximum, address, now)
            return None
        if self.pending is not None and self.waiting[address] >= self.pending:
            self._refused(REFUSED_PENDING_METRIC, "listener.max_pending_per_address", self.pending, address, now)
            return None
        self.connections[address] += 1
        self.waiting[address] += 1
        return Admission(self, address)

    def _refused(self, metric: str, setting: str, limit: int, address: str, now: float) -> None:
        self.metrics[metric] += 1
        self.unlogged += 1
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.warning("connections refused: one address is at its limit", setting=setting, limit=limit,
                        address=address, refused=self.unlogged)
            self.unlogged = 0
            self._logged_at = now

    def forget(self, counter: Counter[str], address: str) -> None:
        """One socket of `address` less in `counter` (`connections` or `waiting`)."""
        left = counter[address] - 1
        if left > 0:
            counter[address] = left
        else:
            del counter[address]  # no address stays in memory once its sockets are gone


class Admission:
    """One admitted socket of `address`: pending until `connected`, counted until `release` (both idempotent)."""

    __slots__ = ("address", "limits", "pending", "released")

    def __init__(self, limits: AddressLimits, address: str) -> None:
        self.limits = limits
        self.address = address
        self.pending = True
        self.released = False

    def connected(self) -> None:
        """Its CONNECT is whole: it no longer counts against max_pending_per_address."""
        if self.pending and not self.released:
            self.pending = False
            self.limits.forget(self.limits.waiting, self.address)

    def release(self) -> None:
        """The socket is gone."""
        if self.released:
            return
        self.connected()
        self.released = True
        self.limits.forget(self.limits.connections, self.address)


def address_of(peer: object) -> str | None:
    """The client address of a peer as asyncio gives it ((host, port, ...) tuples), None for anything else (a
    Unix socket)."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return None
