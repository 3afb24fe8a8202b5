"""Sockets accepted on the cluster port that have not finished their handshake ("pending links"): at most
`cluster.max_pending_links` of them node-wide and `cluster.max_pending_links_per_address` of one client address.

Anyone who reaches the cluster port can open a socket; until it proves the cookie (and, with cluster TLS, its
certificate) it may hold its descriptor for `cluster.handshake_timeout`. Without a bound, a stranger opening
thousands of sockets in that window takes the descriptors the node keeps for its links, files and admin API. A
socket over either limit is accepted and closed at once, nothing read or sent, counted (`pending_refused`,
`pending_refused_address` in `ClusterNetwork.stats()`), and the log says so at most once every `LOG_EVERY`
seconds. At the node-wide limit, a socket of an address that holds fewer places than the address holding the
most takes the oldest place of that one (whose socket is closed, counted in `pending_refused`): strangers on
many addresses cannot keep a member that dials from an address of its own out. A socket stops being pending
when its link is established or when it is closed (a refused handshake lingers until the peer closes, and stays
counted until then). The node-wide limit is part of the node's descriptor budget (vmqpy.descriptors). Our own
dials are not counted: they are ours.

`PendingLinks` is pure (time is an argument); `PendingGate` is the asyncio protocol that admits a new socket
before the listener's own protocol gets it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Final, cast

import structlog

from vmqpy.cluster.link_counters import LinkCounters

__all__ = ["LOG_EVERY", "PendingGate", "PendingLink", "PendingLinks"]

log = structlog.get_logger("vmqpy.cluster")

LOG_EVERY: Final = 1.0  # seconds between two log lines of refusals


class PendingLinks:
    """The pending links of one node: at most `maximum` together and `per_address` of one client address."""

    def __init__(self, own_name: str, maximum: int, per_address: int, counters: LinkCounters) -> None:
        self.own_name = own_name
        self.maximum = maximum
        self.per_address = per_address
        self.counters = counters
        self.live = 0
        self.by_address: Counter[str] = Counter()
        self.places: dict[str, dict[PendingLink, None]] = {}  # address -> its places, oldest first
        self.unlogged = 0  # refusals not yet in the log
        self._logged_at: float | None = None

    def admit(self, address: str | None, now: float) -> PendingLink | None:
        """A new socket of `address` (None: not an IP peer, counted node-wide only) at `now` (seconds): its
        PendingLink, or None when it must be closed."""
        if address is not None and self.by_address[address] >= self.per_address:
            self.counters.pending_refused_address += 1
            self._refused("cluster.max_pending_links_per_address", self.per_address, address, now)
            return None
        if self.live >= self.maximum and not self._evict_for(address):
            self.counters.pending_refused += 1
            self._refused("cluster.max_pending_links", self.maximum, address, now)
            return None
        self.live += 1
        place = PendingLink(self, address)
        if address is not None:
            self.by_address[address] += 1
            self.places.setdefault(address, {})[place] = None
        return place

    def _evict_for(self, address: str | None) -> bool:
        """At the node-wide limit: close the oldest place of the address holding the most, if `address` holds
        fewer than it (an address-less socket never evicts); whether a place was freed."""
        if address is None or not self.by_address:
            return False
        heaviest, held = self.by_address.most_common(1)[0]
        if self.by_address[address] >= held:
            return False
        oldest = next(iter(self.places[heaviest]))
        self.counters.pending_refused += 1
        oldest.evict()
        return True

    def _refused(self, setting: str, limit: int, address: str | None, now: float) -> None:
        self.unlogged += 1
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.bind(node=self.own_name).warning(
                "cluster connections refused: too many have not finished their handshake", setting=setting,
                limit=limit, address=address, refused=self.unlogged)
            self.unlogged = 0
            self._logged_at = now

    def _release(self, place: PendingLink) -> None:
        self.live = max(0, self.live - 1)
        address = place.address
        if address is not None:
            left = self.by_address[address] - 1
            if left > 0:
                self.by_address[address] = left
                self.places[address].pop(place, None)
            else:
                del self.by_address[address]  # no address stays in memory once its sockets are gone
                self.places.pop(address, None)


class PendingLink:
    """One admitted socket, pending until `release` (idempotent): its link is established, or it is closed.
    `close` (set by the gate) closes its socket when another address takes its place (`evict`)."""

    __slots__ = ("address", "close", "links", "released")

    def __init__(self, links: PendingLinks, address: str | None) -> None:
        self.links = links
        self.address = address
        self.released = False
        self.close: Callable[[], None] | None = None

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.links._release(self)

    def evict(self) -> None:
        """Its place goes to another address: released now, its socket closed."""
        self.release()
        if self.close is not None:
            close, self.close = self.close, None
            close()


class PendingGate(asyncio.Protocol):
    """A new socket of the cluster listener admitted by `links`: over a limit it is aborted at once (nothing read,
    nothing sent); else `admitted(pending)` makes the protocol that gets the socket, which releases `pending`."""

    __slots__ = ("admitted", "links")

    def __init__(self, links: PendingLinks, admitted: Callable[[PendingLink], asyncio.Protocol]) -> None:
        self.links = links
        self.admitted = admitted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer and isinstance(peer[0], str) else None
        pending = self.links.admit(address, asyncio.get_running_loop().time())
        stream = cast(asyncio.Transport, transport)  # (uvloop's are no subclasses of asyncio's)
        if pending is None:
            stream.abort()
            return
        pending.close = stream.abort
        protocol = self.admitted(pending)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
