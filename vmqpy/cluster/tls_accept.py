"""The TLS side of the cluster listener: each accepted socket shakes hands in TLS first (`loop.start_tls`), and
only a peer whose certificate verifies against the cluster CA gets a `LinkConnection` (docs/security.md,
"Cluster links").

Doing the TLS handshake here rather than in `create_server(ssl=...)` lets the node log (as a warning naming the
remote address) and count every refused TLS handshake, which asyncio would otherwise drop silently.

Why the socket is taken from the transport the server made (a duplicate of its descriptor, that transport
aborted) and shakes hands on a new one (`loop.connect_accepted_socket(ssl=...)`) rather than `loop.start_tls` on
it: uvloop starts reading an accepted socket once `connection_made` returns, whatever `pause_reading` said
there. A ClientHello already waiting when the node got to the accept (a node busy for a moment, a loaded host)
was read before `start_tls` took the socket over and lost: both ends then waited for each other until the
dialer's TLS handshake timeout, on every retry while the node stayed that slow (a `cluster join` refused
after "SSL handshake is taking longer than 2 seconds"). Before `connection_made` returns nothing has been
read (asyncio's and uvloop's transports alike), so the new transport sees the whole stream; the same way as
the MQTT TLS listeners (vmqpy.broker.listeners.handshake_prelude).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any, cast

import structlog

from vmqpy.cluster.connection import LinkConnection, LinkHost
from vmqpy.cluster.pending_links import PendingLink

__all__ = ["TlsAcceptor"]

log = structlog.get_logger("vmqpy.cluster")


class TlsAcceptor(asyncio.Protocol):
    """The protocol an accepted socket is handed to first: it takes the socket over (see the module docstring)
    and shakes hands in TLS on it; then the socket belongs to a new `LinkConnection`. `context()` is the server
    context in force (reloaded on SIGHUP); `pending` holds the handshakes under way (cancelled when the network
    stops); `place` is the socket's place among the pending links (pending_links.py), handed to its
    LinkConnection or released when the TLS handshake fails."""

    def __init__(self, host: LinkHost, context: Callable[[], ssl.SSLContext], handshake_timeout: float,
                 pending: set[asyncio.Task[None]], place: PendingLink | None = None) -> None:
        self.host = host
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.pending = pending
        self.place = place
        self.remote = "?"
        self.sock: socket.socket | None = None  # the socket taken over, until a transport of its own owns it

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base_transport)
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and len(peername) >= 2:
            self.remote = f"{peername[0]}:{peername[1]}"
        try:  # nothing is read yet: the duplicate gets the whole stream once this transport is gone
            sock = cast(socket.socket, transport.get_extra_info("socket")).dup()
        except OSError as exc:  # out of descriptors: closed as an accept that failed
            self._refused(exc)
            transport.abort()
            self._release()
            return
        transport.abort()
        sock.setblocking(False)
        self.sock = sock
        task = self.host.loop.create_task(self._handshake())
        self.pending.add(task)
        task.add_done_callback(self._done)
        if self.place is not None:
            def evicted() -> None:  # its place taken (pending_links.py): the handshake stops, its socket closes
                task.cancel()

            self.place.close = evicted

    def data_received(self, data: bytes) -> None:  # the transport is aborted in connection_made: never called
        pass

    async def _handshake(self) -> None:
        sock, self.sock = self.sock, None  # from here connect_accepted_socket closes it, whatever happens
        assert sock is not None
        conn = LinkConnection(self.host, None)
        conn.pending = self.place  # released by the links once established or closed
        try:
            tls_transport, _ = await self.host.loop.connect_accepted_socket(
                lambda: conn, sock, ssl=self.context(), ssl_handshake_timeout=self.handshake_timeout
            )
        except asyncio.CancelledError:
            self._release()
            raise
        except Exception as exc:  # ssl.SSLError, TimeoutError, ConnectionError, ...
            self._refused(exc)
            self._release()
            return
        if self.place is not None and not self.place.released:
            self.place.close = tls_transport.abort  # evicted before its link is established

    def _done(self, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if self.sock is not None:  # cancelled before it started: the socket was never handed on
            sock, self.sock = self.sock, None
            sock.close()
            self._release()

    def _refused(self, exc: BaseException) -> None:
        self.host.counters.handshakes_refused += 1
        log.bind(node=self.host.own_name).warning(
            "cluster TLS handshake failed, connection refused", remote=self.remote, error=_describe(exc)
        )

    def _release(self) -> None:
        if self.place is not None:
            self.place.release()


def _describe(exc: BaseException) -> Any:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.reason} ({exc.library or 'ssl'})" if exc.library else str(exc.reason)
    return str(exc) or type(exc).__name__
