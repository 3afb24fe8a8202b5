"""What a TLS listener (`ssl`, `wss`) or a WebSocket listener with `proxy_protocol = on` does with a new socket
before its stream is served: read the PROXY protocol header (with the option on), then run the TLS handshake
(on `ssl` and `wss` listeners), then hand the socket to the listener's protocol (a ConnectPrelude, aiohttp's
request handler) with the client's address from the header.

Why the header is read by peeking. HAProxy's `send-proxy-v2` sends the header in clear, before the client's
TLS ClientHello, and a client may have sent its ClientHello (or its HTTP upgrade request) in the same segment.
An asyncio transport reads all it can, and neither `loop.start_tls` nor aiohttp can be given bytes already
read (feeding them to asyncio's TLS protocol by hand would lean on its internals). So the prelude takes the
socket away from the transport the server made before that transport read anything (a duplicate of its
descriptor; the transport is dropped: asyncio's and uvloop's transports both start reading only after
`connection_made`), peeks at it (`MSG_PEEK`), asks the sans-I/O parser how many of the peeked bytes belong to
the header (`header_bytes_to_take`), and takes exactly those from the kernel. What follows the header stays in
the socket, untouched. Bytes of an incomplete header are taken at once (every proper prefix of a header is
only header), so waiting for the rest never spins on data that stays readable. The socket then gets a new
transport (`loop.connect_accepted_socket`), with TLS on `ssl` and `wss` listeners.

Why the handshake runs here rather than in `create_server(ssl=...)`: it must come after the header, and
asyncio's TLS server drops a failed handshake silently. Here each failure is counted
(`broker.tls_handshake_failed`) and logged at most once a second per listener with its reason (`FailureLog`,
`vmqpy.broker.listeners.tls.handshake_failure_reason`), as the cluster links do (vmqpy.cluster.tls_accept). A socket
that ends before its first byte (a TCP health check) is closed without counting: the prelude waits for that
byte before starting the handshake. The context is the listener's server context, whose SNI callback switches
each handshake to the certificate in force (SIGHUP reload, vmqpy.broker.listeners.tls); the verify mode
(`require_certificate`) and the peer certificate the connection reads (`use_identity_as_username`) are the
ones of any TLS transport.

Deadlines: the header has PROXY_HEADER_TIMEOUT seconds from the accept, the handshake TLS_HANDSHAKE_TIMEOUT
from the end of the header (or the accept), first byte included; then the protocol handed the socket has its
own (`mqtt.connect_timeout`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import cast

import structlog

from vmqpy.broker.listeners import proxy_protocol
from vmqpy.broker.listeners.preludes import (
    PROXY_HEADER_MAX_LENGTH,
    PROXY_HEADER_TIMEOUT,
    TLS_HANDSHAKE_TIMEOUT,
    FailureLog,
)
from vmqpy.broker.listeners.proxy_protocol import NEED_DATA, ProxyHeader, ProxyHeaderError
from vmqpy.broker.listeners.tls import handshake_failure_reason

Peer = tuple[str, int]
# The protocol that serves `transport` (plain or TLS) of the client at `peer` (None: the socket's own address).
OpenProtocol = Callable[[Peer | None, asyncio.Transport], asyncio.Protocol]

TLS_HANDSHAKE_FAILED_METRIC = "tls_handshake_failed"

log = structlog.get_logger("vmqpy.listener")


def header_bytes_to_take(taken: bytes, peeked: bytes,
                         max_length: int = PROXY_HEADER_MAX_LENGTH) -> tuple[int, ProxyHeader | None]:
    """How many of the `peeked` bytes (the ones waiting in the socket, after the `taken` ones) to take out of
    the socket: all of them while the header is incomplete, exactly the rest of the header once it is whole
    (returned with it). Raises ProxyHeaderError when `taken + peeked` cannot start a valid header."""
    header = proxy_protocol.parse(taken + peeked, max_length=max_length)
    if header is NEED_DATA:
        return len(peeked), None
    assert isinstance(header, ProxyHeader)
    return header.length - len(taken), header


def _source(header: ProxyHeader) -> Peer | None:
    return None if header.source is None else (header.source.host, header.source.port)


class HandshakePrelude(asyncio.Protocol):
    """The protocol of a socket accepted by a plain server, only for its `connection_made`: it takes the socket
    from the transport before anything was read and hands it, once ready, to `open_protocol(peer, transport)`
    on a new transport: first the PROXY header when `proxy_failures` is given (refusals counted there), then
    the TLS handshake when `tls` is given (failures counted in `tls_failures`). Handshakes under way are tasks
    in `pending` (the listeners cancel them when they close)."""

    def __init__(
        self, open_protocol: OpenProtocol, *, tls: ssl.SSLContext | None, tls_failures: FailureLog | None,
        proxy_failures: FailureLog | None, pending: set[asyncio.Task[None]],
        header_timeout: float = PROXY_HEADER_TIMEOUT, handshake_timeout: float = TLS_HANDSHAKE_TIMEOUT,
    ) -> None:
        if tls is not None and tls_failures is None:
            raise ValueError("a TLS prelude needs a FailureLog for its failed handshakes")
        self.open_protocol = open_protocol
        self.tls = tls
        self.tls_failures = tls_failures
        self.proxy_failures = proxy_failures
        self.pending = pending
        self.header_timeout = header_timeout
        self.handshake_timeout = handshake_timeout
        self.loop = asyncio.get_running_loop()
        self.peername: object = None
        self.taken = b""  # the header's bytes taken out of the socket so far
        self.reading_header = False  # else waiting for the first byte of the TLS handshake
        self.peer: Peer | None = None  # the client's address from the header
        self.deadline = 0.0  # loop time by which the header, or the TLS handshake, must be done
        self._sock: socket.socket | None = None  # the socket while this prelude watches it
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, base_transport)
        # Both asyncio's and uvloop's transports start reading only once this returns: the socket's bytes are
        # all still in the kernel. The duplicate keeps the connection open when the transport closes its own.
        self.peername = transport.get_extra_info("peername")
        try:
            sock = cast(socket.socket, transport.get_extra_info("socket")).dup()
        except OSError as exc:  # out of descriptors: the socket is closed, as an accept that failed
            log.warning("connection closed: cannot take the socket over", error=str(exc))
            transport.abort()
            return
        transport.abort()
        sock.setblocking(False)
        self._sock = sock
        self.reading_header = self.proxy_failures is not None
        try:
            self.loop.add_reader(sock.fileno(), self._readable)
        except (OSError, ValueError) as exc:
            self._close(self.proxy_failures or self.tls_failures, f"cannot read the socket: {exc}")
            return
        self._arm(self.header_timeout if self.reading_header else self.handshake_timeout)

    def _arm(self, timeout: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.deadline = self.loop.time() + timeout
        self._timer = self.loop.call_at(self.deadline, self._expired)

    def _readable(self) -> None:
        if self._sock is None:
            return
        try:
            if self.reading_header:
                self._read_header(self._sock)
            else:
                self._wait_client_hello(self._sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(self.proxy_failures if self.reading_header else self.tls_failures,
                        f"the socket failed: {exc}")

    # ------------------------------------------------------------------------------------- the PROXY header

    def _read_header(self, sock: socket.socket) -> None:
        peeked = sock.recv(PROXY_HEADER_MAX_LENGTH + 1 - len(self.taken), socket.MSG_PEEK)
        if not peeked:
            self._close(self.proxy_failures, f"the connection ended inside the PROXY header ({len(self.taken)} bytes)")
            return
        try:
            count, header = header_bytes_to_take(self.taken, peeked)
        except ProxyHeaderError as exc:
            self._close(self.proxy_failures, str(exc))
            return
        taken = sock.recv(count) if count else b""
        self.taken += taken
        if header is None or len(taken) != count:  # taking peeked bytes cannot come short; if it did, the next
            return                                 # readable event parses again
        self.peer = _source(header)
        if self.tls is None:
            self._serve()
        else:  # the ClientHello may be there already (pipelined): the reader fires again at once
            self.reading_header = False
            self._arm(self.handshake_timeout)

    # ------------------------------------------------------------------------------------- the handshake

    def _wait_client_hello(self, sock: socket.socket) -> None:
        """The first byte of the handshake is there: start it. The end of the stream before any byte (a TCP
        health check, a port scan) closes the socket without counting a failed handshake."""
        if not sock.recv(1, socket.MSG_PEEK):
            self._close(None, "")
            return
        self._serve()

    def _expired(self) -> None:
        self._timer = None
        if self._sock is None:
            return
        if self.reading_header:
            self._close(self.proxy_failures, f"no complete PROXY header within {self.header_timeout:g}s "
                                             f"({len(self.taken)} bytes received)")
        else:
            self._close(self.tls_failures, f"no TLS handshake within {self.handshake_timeout:g}s")

    def _close(self, failures: FailureLog | None, reason: str) -> None:
        """Close the socket without an answer; counted and logged in `failures` (None: not a failure)."""
        sock = self._take_socket()
        if failures is not None:
            failures.failed(reason, self.peername, self.loop.time())
        if sock is not None:
            sock.close()

    def _take_socket(self) -> socket.socket | None:
        """The socket, no longer watched by this prelude."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        sock, self._sock = self._sock, None
        if sock is not None:
            self.loop.remove_reader(sock.fileno())  # before any close: the descriptor leaves the selector
        return sock

    def _serve(self) -> None:
        sock = self._take_socket()
        assert sock is not None
        remaining = max(self.deadline - self.loop.time(), 0.001)  # one deadline from the first byte on
        task = self.loop.create_task(self._handshake(sock, self.peer, remaining))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _handshake(self, sock: socket.socket, peer: Peer | None, timeout: float) -> None:
        """A transport on `sock` (after the TLS handshake with `tls`), handed to the listener's protocol."""
        waiting = HandshakeWait()
        try:
            if self.tls is None:
                transport, _ = await self.loop.connect_accepted_socket(lambda: waiting, sock)
            else:
                transport, _ = await self.loop.connect_accepted_socket(
                    lambda: waiting, sock, ssl=self.tls, ssl_handshake_timeout=timeout)
        except asyncio.CancelledError:
            raise  # the transport was closed by connect_accepted_socket, and the socket with it
        except Exception as exc:  # ssl.SSLError, ConnectionAbortedError (timeout), ConnectionError, ...
            if self.tls_failures is not None:
                self.tls_failures.failed(handshake_failure_reason(exc), self.peername, self.loop.time())
            return
        if not waiting.made:  # the client closed the socket during the handshake without a TLS error (a TCP
            transport.abort()  # health check, a port scan): nothing to serve, and no failure to count
            return
        waiting.hand_on(self.open_protocol(peer, transport), transport)


class HandshakeWait(asyncio.Protocol):
    """The protocol `loop.start_tls` is given: asyncio may deliver the first decrypted bytes (a CONNECT sent
    with the client's last handshake message), an end of stream or the loss of the connection before the
    awaiting task runs; this keeps them for the protocol the socket is then handed to (`hand_on`)."""

    def __init__(self) -> None:
        self.made = False  # asyncio called connection_made: the handshake succeeded
        self.received: list[bytes] = []
        self.eof = False
        self.lost = False
        self.lost_with: Exception | None = None
        self.protocol: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True  # the transport is given again with `hand_on`

    def data_received(self, data: bytes) -> None:
        if self.protocol is not None:
            self.protocol.data_received(data)
        else:
            self.received.append(data)

    def eof_received(self) -> bool | None:
        if self.protocol is not None:
            return self.protocol.eof_received()
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.protocol is not None:
            self.protocol.connection_lost(exc)
        else:
            self.lost, self.lost_with = True, exc

    def hand_on(self, protocol: asyncio.Protocol, transport: asyncio.Transport) -> None:
        """Make `protocol` the transport's protocol and give it what came meanwhile, in order."""
        self.protocol = protocol
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        received, self.received = self.received, []
        for data in received:
            if transport.is_closing():
                break
            protocol.data_received(data)
        if self.eof:
            protocol.eof_received()
        if self.lost:
            protocol.connection_lost(self.lost_with)
