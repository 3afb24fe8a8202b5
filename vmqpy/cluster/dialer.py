"""Dialing the peers of a node: one TCP connect at a time per peer, again after a failure or a lost link, with
the back-off of backoff.py, while the peer stays added and the network runs."""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Callable

import structlog

from vmqpy.cluster.backoff import dial_delay, failure_logged
from vmqpy.cluster.connection import LinkConnection
from vmqpy.cluster.peer import Peer
from vmqpy.cluster.peer_links import PeerLinks

__all__ = ["Dialer"]

log = structlog.get_logger("vmqpy.cluster")


class Dialer:
    """Dials the peers of `links` that have an address: from `local_addr` (None: any), each connect given
    `connect_timeout` seconds, `shortest` to `longest` seconds between attempts (`seed` seeds the jitter).
    `tls`: the client context in force (asked per dial), or None for plain TCP. The peer's certificate must
    verify against the context's CA; the TLS handshake has `handshake_timeout` seconds (default: the connect
    timeout) after the connect."""

    def __init__(
        self,
        links: PeerLinks,
        *,
        shortest: float,
        longest: float,
        connect_timeout: float,
        local_addr: tuple[str, int] | None,
        seed: int | None = None,
        tls: Callable[[], ssl.SSLContext] | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self._links = links
        self._shortest = shortest
        self._longest = longest
        self._connect_timeout = connect_timeout
        self._handshake_timeout = connect_timeout if handshake_timeout is None else handshake_timeout
        self._local_addr = local_addr
        self._rng = random.Random(seed)
        self._tls = tls

    def schedule(self, peer: Peer) -> None:
        """Dial `peer` after its back-off, unless it has a link, a dial under way or no address."""
        if (
            not self._links.running
            or peer.removed
            or peer.address is None
            or peer.active is not None
            or peer.dialing is not None
            or peer.dial_task is not None
            or peer.reconnect is not None
        ):
            return
        delay = dial_delay(peer.attempts, self._shortest, self._longest, self._rng.random)
        peer.reconnect = self._links.loop.call_later(delay, self._dial, peer)

    def cancel(self, peer: Peer) -> None:
        """Stop the scheduled dial and the connect under way (a connection shaking hands is not closed)."""
        if peer.reconnect is not None:
            peer.reconnect.cancel()
            peer.reconnect = None
        if peer.dial_task is not None and not peer.dial_task.done():
            peer.dial_task.cancel()

    def _dial(self, peer: Peer) -> None:
        links = self._links
        peer.reconnect = None
        if not links.running or peer.removed or peer.address is None or peer.active is not None:
            return
        if peer.dialing is not None or peer.dial_task is not None:
            return
        peer.attempts += 1
        links.counters.dial_attempts += 1
        if peer.was_up or peer.attempts > 1:
            links.counters.reconnects += 1
        peer.dial_task = links.loop.create_task(self._connect(peer, peer.address))

    async def _connect(self, peer: Peer, address: tuple[str, int]) -> None:
        links = self._links
        limit = self._connect_timeout + (0.0 if self._tls is None else self._handshake_timeout)
        try:
            async with asyncio.timeout(limit):
                if self._tls is None:
                    await links.loop.create_connection(
                        lambda: LinkConnection(links, peer), address[0], address[1], local_addr=self._local_addr
                    )
                else:
                    await links.loop.create_connection(
                        lambda: LinkConnection(links, peer), address[0], address[1], local_addr=self._local_addr,
                        ssl=self._tls(), ssl_handshake_timeout=self._handshake_timeout,
                    )
        except Exception as exc:  # OSError, TimeoutError, ...; CancelledError is not an Exception
            links.counters.dial_failures += 1
            if failure_logged(peer.attempts):
                log.bind(node=links.own_name, peer=peer.name).warning(
                    "cluster dial failed",
                    address=f"{address[0]}:{address[1]}",
                    attempt=peer.attempts,
                    error=str(exc) or type(exc).__name__,
                )
            peer.dial_task = None
            self.schedule(peer)
            return
        finally:
            if peer.dial_task is asyncio.current_task():
                peer.dial_task = None
