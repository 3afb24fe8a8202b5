"""The TLS side of the cluster listener: each accepted socket shakes hands in TLS first (`loop.start_tls`), and
only a peer whose certificate verifies against the cluster CA gets a `LinkConnection` (docs/security.md,
"Cluster links").

Doing the TLS handshake here rather than in `create_server(ssl=...)` lets the node log (as a warning naming the
remote address) and count every refused TLS handshake, which asyncio would otherwise drop silently.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any, cast

import structlog

from vmqpy.cluster.connection import LinkConnection, LinkHost
from vmqpy.cluster.pending_links import PendingLink

__all__ = ["TlsAcceptor"]

log = structlog.get_logger("vmqpy.cluster")


class TlsAcceptor(asyncio.Protocol):
    """The protocol of an accepted socket until its TLS handshake is done; then the socket belongs to a new
    `LinkConnection`. `context()` is the server context in force (reloaded on SIGHUP); `pending` holds the
    handshakes under way (cancelled when the network stops); `place` is the socket's place among the pending
    links (pending_links.py), handed to its LinkConnection or released when the TLS handshake fails."""

    def __init__(self, host: LinkHost, context: Callable[[], ssl.SSLContext], handshake_timeout: float,
                 pending: set[asyncio.Task[None]], place: PendingLink | None = None) -> None:
        self.host = host
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.pending = pending
        self.place = place
        self.remote = "?"

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base_transport)
        transport.pause_reading()  # nothing is read before start_tls takes the socket over
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and len(peername) >= 2:
            self.remote = f"{peername[0]}:{peername[1]}"
        task = self.host.loop.create_task(self._handshake(transport))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    def data_received(self, data: bytes) -> None:  # reading is paused until start_tls: never called
        pass

    async def _handshake(self, transport: asyncio.Transport) -> None:
        conn = LinkConnection(self.host, None)
        try:
            tls_transport = await self.host.loop.start_tls(
                transport, conn, self.context(), server_side=True, ssl_handshake_timeout=self.handshake_timeout
            )
        except asyncio.CancelledError:
            self._give_up(transport)
            raise
        except Exception as exc:  # ssl.SSLError, TimeoutError, ConnectionError, ...
            self.host.counters.handshakes_refused += 1
            log.bind(node=self.host.own_name).warning(
                "cluster TLS handshake failed, connection refused", remote=self.remote, error=_describe(exc)
            )
            self._give_up(transport)
            return
        if tls_transport is None:  # the socket closed meanwhile
            self._give_up(transport)
            return
        conn.pending = self.place  # released by the links once established or closed
        conn.connection_made(tls_transport)

    def _give_up(self, transport: asyncio.Transport) -> None:
        transport.abort()
        if self.place is not None:
            self.place.release()


def _describe(exc: BaseException) -> Any:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.reason} ({exc.library or 'ssl'})" if exc.library else str(exc.reason)
    return str(exc) or type(exc).__name__
