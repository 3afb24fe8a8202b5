"""MQTT over WebSocket (`listener.ws.NAME`, `listener.wss.NAME`): aiohttp's WebSocket server at path `/mqtt`,
subprotocol `mqtt`, binary frames, and `WebSocketTransport`, which lets an MQTTConnection run over a WebSocket
exactly as over a socket.

The MQTT stream is the concatenation of the binary frames' payloads: a packet may span frames and a frame may
carry several packets (MQTT 5.0 section 6, 3.1.1 section 6), since the connection's decoder reassembles bytes
whatever their cut. What the connection writes in one pass of the event loop leaves as one binary frame.
A text frame is a protocol error (the connection is closed); so is a handshake without the `mqtt` subprotocol,
refused before the upgrade with 400. A socket has `mqtt.connect_timeout` seconds to send its upgrade request
(`runner`), and the MQTT connection as long again to send its CONNECT.

Before the CONNECT, bounded like tcp: aiohttp holds a whole frame (up to twice the largest packet) before it
hands it on, so the bytes read from a WebSocket's socket are counted below aiohttp (`PreConnectMeter`, aiohttp's
protocol of every socket of a WebSocket listener) until the client's CONNECT is accepted: at most
`UPGRADE_ALLOWANCE` bytes for the upgrade request plus `mqtt.connect_max_size`, and all of them out of the node's
pre-CONNECT budget (`mqtt.connect_budget`, vmqpy.broker.driver.connect_budget); a socket beyond either is closed and
counted (`connect_too_large`, `connect_budget_exceeded`). After the CONNECT a frame may hold the largest packet.
The meter also holds the socket's place, from its accept until it is gone, in the listener's `max_connections`
and the node's MQTT socket budget (`release`), and among its address's sockets, pending until the CONNECT
(`admission`, vmqpy.broker.listeners.address_limit): a socket that never sends its upgrade request costs a descriptor of
the MQTT budget, never one the admin API keeps.

Backpressure, both ways bounded:
* Out: frames are sent one at a time by one task; while more than WRITE_HIGH_WATER bytes wait, the connection
  is told `pause_writing` (its session queues instead, as on TCP), and `resume_writing` once under the low mark.
* In: while the connection has paused reading (congested subscribers, max_message_rate, registration), no frame
  is taken from aiohttp, whose own bounded queue then stops reading the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from vmqpy.broker.driver.connect_budget import ConnectBudget
from vmqpy.broker.listeners.address_limit import Admission
from vmqpy.broker.listeners.preludes import FailureLog

if TYPE_CHECKING:  # aiohttp is imported by the functions that serve a WebSocket: a node without one never loads it
    from aiohttp import web

log = structlog.get_logger("vmqpy.websocket")

PATH = "/mqtt"
SUBPROTOCOL = "mqtt"
WRITE_HIGH_WATER = 256 * 1024  # bytes waiting to be sent before the connection is told to pause writing
CLOSE_TIMEOUT = 5.0  # seconds aiohttp waits for the client's answer to our close frame
LARGEST_PACKET = 268_435_460  # a PUBLISH of the largest remaining length MQTT allows, with its fixed header
UPGRADE_ALLOWANCE = 32 * 1024  # bytes of a socket's HTTP upgrade request counted before its CONNECT


class WebSocketTransport(asyncio.Transport):
    """The transport an MQTTConnection is given on a WebSocket connection: `write` queues a binary frame,
    `close` sends what is queued and then the close frame, reading is paused by not taking frames."""

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        super().__init__()
        self.ws = ws
        self.socket_transport = request.transport  # the TCP (or TLS) transport under the WebSocket
        self.protocol: asyncio.Protocol | None = None
        self.high_water = WRITE_HIGH_WATER
        self.low_water = WRITE_HIGH_WATER // 4
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._readable = asyncio.Event()
        self._readable.set()
        self._closing = False
        self._writing_paused = False

    # ---------------------------------------------------------------------------------------- asyncio.Transport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self.socket_transport is None:
            return default
        return self.socket_transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is queued, then close the WebSocket."""
        if not self._closing:
            self._closing = True
            self._readable.set()
            self._wake.set()

    def abort(self) -> None:
        self._closing = True
        self._queue.clear()
        self._queued = 0
        self._readable.set()
        self._wake.set()
        if self.socket_transport is not None:
            self.socket_transport.abort()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._queue.append(bytes(data))
        self._queued += len(data)
        self._wake.set()
        if not self._writing_paused and self._queued > self.high_water and self.protocol is not None:
            self._writing_paused = True
            self.protocol.pause_writing()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high_water = WRITE_HIGH_WATER if high is None else high
        self.low_water = self.high_water // 4 if low is None else low

    def get_write_buffer_size(self) -> int:
        return self._queued

    def pause_reading(self) -> None:
        self._readable.clear()

    def resume_reading(self) -> None:
        self._readable.set()

    def is_reading(self) -> bool:
        return self._readable.is_set()

    def can_write_eof(self) -> bool:
        return False

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self.protocol = protocol

    # ---------------------------------------------------------------------------------------- the two tasks

    async def send_frames(self) -> None:
        """Send what `write` queued, one binary frame per batch, until closed; then close the WebSocket."""
        ws = self.ws
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                frame = b"".join(self._queue)
                self._queue.clear()
                self._queued = 0
                try:
                    await ws.send_bytes(frame)
                except (ConnectionError, RuntimeError):
                    self.abort()
                    return
                if self._writing_paused and self._queued <= self.low_water and not self._closing:
                    self._writing_paused = False
                    if self.protocol is not None:
                        self.protocol.resume_writing()
            if self._closing:
                with contextlib.suppress(ConnectionError, RuntimeError, asyncio.TimeoutError):
                    await ws.close()
                return

    async def receive_frames(self) -> str | None:
        """Hand the payload of every binary frame to the protocol until the WebSocket ends; the reason when the
        client broke the protocol."""
        from aiohttp import WSMsgType

        ws = self.ws
        protocol = self.protocol
        assert protocol is not None
        while not self._closing:
            await self._readable.wait()
            if self._closing:
                break
            message = await ws.receive()
            if message.type is WSMsgType.BINARY:
                protocol.data_received(message.data)
            elif message.type is WSMsgType.TEXT:
                return "a text frame (MQTT travels in binary frames)"
            elif message.type is WSMsgType.ERROR:
                return f"WebSocket error: {ws.exception()}"
            else:  # CLOSE, CLOSING, CLOSED
                break
        return None


class ProxiedPeers:
    """The client's address that a PROXY header gave each socket of a WebSocket listener, for the MQTT
    connection made on it (`peer_of(request)`): the socket's protocol is `note(handler, peer)` instead of
    aiohttp's `handler`, which it serves unchanged, and the address is forgotten with the socket."""

    def __init__(self) -> None:
        self._peers: dict[asyncio.BaseTransport, tuple[str, int]] = {}

    def __len__(self) -> int:
        return len(self._peers)

    def note(self, handler: asyncio.Protocol, peer: tuple[str, int]) -> asyncio.Protocol:
        return _NotedPeer(handler, peer, self._peers)

    def peer_of(self, request: web.BaseRequest) -> tuple[str, int] | None:
        transport = request.transport
        return None if transport is None else self._peers.get(transport)


class _NotedPeer(asyncio.Protocol):
    """aiohttp's `handler` for one socket whose client is `peer`, known in `peers` while the socket is open."""

    def __init__(self, handler: asyncio.Protocol, peer: tuple[str, int],
                 peers: dict[asyncio.BaseTransport, tuple[str, int]]) -> None:
        self.handler = handler
        self.peer = peer
        self.peers = peers
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.peers[transport] = self.peer
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.peers.pop(self.transport, None)
        self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


class PreConnectMeter(asyncio.Protocol):
    """aiohttp's protocol `handler` of one socket of a WebSocket listener, counting what it reads until the MQTT
    connection on it has its CONNECT accepted (`connected`, called by the connection; until then at most
    `allowance` bytes, each taken from `budget`); a socket beyond either is aborted and counted in `too_large`
    or (by the budget) `over_budget`. After the CONNECT it only passes bytes on."""

    __slots__ = ("admission", "allowance", "budget", "handler", "meters", "over_budget", "release", "taken",
                 "too_large", "transport")

    def __init__(self, handler: asyncio.Protocol, allowance: int, budget: ConnectBudget, too_large: FailureLog,
                 over_budget: FailureLog, meters: PreConnectMeters, release: Callable[[], None] | None = None,
                 admission: Admission | None = None) -> None:
        self.handler = handler
        self.allowance = allowance
        self.budget = budget
        self.too_large = too_large
        self.over_budget = over_budget
        self.meters = meters
        self.release = release  # the socket's place in max_connections and the descriptor budget, freed when lost
        self.admission = admission  # its place among its address's sockets, pending until the CONNECT
        self.taken = 0  # bytes counted so far, all taken from the budget
        self.transport: asyncio.BaseTransport | None = None  # None once counting stopped (connected, or closed)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.meters.meters[transport] = self
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None:
            size = len(data)
            if self.taken + size > self.allowance:
                self._refuse(transport, self.too_large, f"{self.taken + size} bytes before the CONNECT was "
                             f"accepted, more than {self.allowance} (mqtt.connect_max_size and the upgrade)")
                return
            if not self.budget.take(size):
                self._refuse(transport, self.over_budget, f"{size} more bytes before the CONNECT do not fit the "
                             f"node's budget of {self.budget.limit} (mqtt.connect_budget)")
                return
            self.taken += size
        self.handler.data_received(data)

    def connected(self) -> None:
        """The CONNECT on this socket was accepted: give the bytes back, count no more; the socket is no longer
        pending for its address."""
        if self.admission is not None:
            self.admission.connected()
        if self.transport is not None:
            self.meters.meters.pop(self.transport, None)
            self.transport = None
            self.budget.give(self.taken)
            self.taken = 0

    def _refuse(self, transport: asyncio.BaseTransport, failures: FailureLog, reason: str) -> None:
        self.connected()  # nothing more is counted; connection_lost follows
        failures.failed(reason, transport.get_extra_info("peername"), asyncio.get_running_loop().time())
        transport.abort()  # type: ignore[attr-defined]  # a stream transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.connected()
        if self.admission is not None:
            self.admission.release()
        if self.release is not None:
            release, self.release = self.release, None
            release()
        self.handler.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


class PreConnectMeters:
    """The `PreConnectMeter` of every socket of the WebSocket listeners still before its CONNECT, by the socket's
    transport (which aiohttp's request names), so that the MQTT connection made on it can stop its count."""

    def __init__(self) -> None:
        self.meters: dict[asyncio.BaseTransport, PreConnectMeter] = {}

    def __len__(self) -> int:
        return len(self.meters)

    def meter(self, handler: asyncio.Protocol, allowance: int, budget: ConnectBudget, too_large: FailureLog,
              over_budget: FailureLog, release: Callable[[], None] | None = None,
              admission: Admission | None = None) -> PreConnectMeter:
        return PreConnectMeter(handler, allowance, budget, too_large, over_budget, self, release, admission)

    def of(self, request: web.BaseRequest) -> PreConnectMeter | None:
        """The meter of the socket `request` came on (None once its count stopped)."""
        transport = request.transport
        return None if transport is None else self.meters.get(transport)


def runner(app: web.Application, connect_timeout: float) -> web.AppRunner:
    """aiohttp's runner for the application of one WebSocket listener. A socket whose upgrade request is not whole
    within `connect_timeout` seconds (`mqtt.connect_timeout`) is closed: aiohttp's keep-alive timer, which also
    runs before the first request, would leave an idle or slow socket open for an hour by default. After the
    upgrade the MQTT connection's own CONNECT timeout takes over; the timer does not run during a request."""
    from aiohttp import web

    return web.AppRunner(app, handle_signals=False, access_log=None, keepalive_timeout=connect_timeout)


def application(open_connection: Callable[[web.Request], asyncio.Protocol], largest_packet: int = LARGEST_PACKET
                ) -> web.Application:
    """The aiohttp application of one WebSocket listener: GET /mqtt upgrades to a WebSocket with subprotocol mqtt
    served by `open_connection(request)` (an MQTTConnection, made once the upgrade succeeded; the request tells
    which socket it came on, whose client address a PROXY header may have given)."""
    from aiohttp import web

    async def serve(request: web.Request) -> web.StreamResponse:
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if SUBPROTOCOL not in offered:
            return web.Response(status=400, text="MQTT over WebSocket needs the subprotocol 'mqtt'\n")
        # A frame holds at most one largest packet and the start of the next one.
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=2 * largest_packet, autoping=True,
                                   timeout=CLOSE_TIMEOUT)
        await ws.prepare(request)
        transport = WebSocketTransport(ws, request)
        protocol = open_connection(request)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        sender = asyncio.get_running_loop().create_task(transport.send_frames())
        error = None
        try:
            error = await transport.receive_frames()
        finally:
            if error is not None:
                log.info("WebSocket closed: the client broke the protocol", reason=error,
                         peer=transport.get_extra_info("peername"))
            transport.close()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(sender), CLOSE_TIMEOUT)
            sender.cancel()
            protocol.connection_lost(None)
            transport.protocol = None  # as asyncio's transports do: no cycle keeps the connection alive
        return ws

    app = web.Application()
    app.router.add_get(PATH, serve)
    return app
