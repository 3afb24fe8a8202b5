"""What a listener does with a new socket before the MQTT connection serves it: read a PROXY protocol header
(`ProxyPrelude`, `listener.tcp.NAME.proxy_protocol = on`; TLS and WebSocket listeners read theirs and run the
TLS handshake in vmqpy.broker.listeners.handshake_prelude), and wait for the client's whole CONNECT packet
(`ConnectPrelude`, every tcp and ssl listener). Each is the socket's asyncio protocol until it is done, then
hands the transport to the protocol that serves the connection (an MQTTConnection, aiohttp's request handler),
which never knows a prelude was there; nothing is added to the path of a packet after the CONNECT.

Why wait for the CONNECT here: a socket that has not sent a CONNECT is most of what a slow-loris or a flood of
idle sockets holds, so until then it gets a few hundred bytes of state, not a whole MQTT connection; it has
`mqtt.connect_timeout` seconds (`ConnectWait.timeout`) to send the CONNECT whole, and a CONNECT announcing more
than `ConnectWait.max_size` bytes (`mqtt.connect_max_size`) is refused on its fixed header, before its body is
read (docs/security.md, "Slow clients and floods"). The bytes of partial CONNECTs held by all sockets together
come out of the node-wide `ConnectWait.budget` (`mqtt.connect_budget`, vmqpy.broker.driver.connect_budget): a socket
whose bytes do not fit is closed.

Sockets refused here are closed and counted in the broker's metrics (`proxy_protocol_refused`,
`connect_timeout`, `connect_too_large`, `connect_budget_exceeded`, and `tls_handshake_failed` from
vmqpy.broker.listeners.handshake_prelude); the log gets at most one line a second per listener and kind, with the latest
reason and how many failed since the last line (`FailureLog`).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable

import structlog

from vmqpy.broker.driver.connect_budget import BUDGET_EXCEEDED_METRIC, ConnectBudget
from vmqpy.broker.listeners import proxy_protocol
from vmqpy.broker.listeners.connect_pacing import connect_deadline, pause_until
from vmqpy.broker.listeners.proxy_protocol import NEED_DATA, ProxyHeader, ProxyHeaderError

log = structlog.get_logger("vmqpy.listener")

PROXY_REFUSED_METRIC = "proxy_protocol_refused"
CONNECT_TIMEOUT_METRIC = "connect_timeout"
CONNECT_TOO_LARGE_METRIC = "connect_too_large"
CONNECT_TIMEOUT = 10.0  # default of mqtt.connect_timeout: seconds a new connection has to send its whole CONNECT
PROXY_HEADER_TIMEOUT = 10.0  # seconds a socket has to send its whole PROXY header (the spec: "a few seconds")
PROXY_HEADER_MAX_LENGTH = 4096  # bytes: HAProxy's v2 headers, TLVs included, take a few hundred
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to complete the TLS handshake
LOG_EVERY = 1.0  # seconds between two log lines of failures of one listener


class FailureLog:
    """Failures of one kind on listener `listener`: each counted in `metrics[metric]`, logged at most once a
    second (with the number of failures since the previous line). Time is an argument."""

    def __init__(self, listener: str, metric: str, message: str, metrics: Counter[str]) -> None:
        self.listener = listener
        self.metric = metric
        self.message = message
        self.metrics = metrics
        self.unlogged = 0
        self._logged_at: float | None = None

    def failed(self, reason: str, peer: object, now: float) -> bool:
        """Count one failure; True when it was logged."""
        self.metrics[self.metric] += 1
        self.unlogged += 1
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY:
            return False
        log.warning(self.message, listener=self.listener, reason=reason, peer=_show_peer(peer),
                    failures=self.unlogged)
        self.unlogged = 0
        self._logged_at = now
        return True


def _show_peer(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "?"


class ProxyPrelude(asyncio.Protocol):
    """Collects the PROXY header (at most PROXY_HEADER_MAX_LENGTH bytes, within PROXY_HEADER_TIMEOUT seconds),
    then hands the socket to `open_connection(source)`, where `source` is the client's (host, port) from the
    header, or None (v1 UNKNOWN, v2 LOCAL health checks, families without addresses) to keep the socket's own.
    The bytes after the header are the connection's first data. Anything that is not a valid header closes the
    socket. `on_lost` runs once if the socket goes away before it was handed on."""

    def __init__(
        self, open_connection: Callable[[tuple[str, int] | None], asyncio.Protocol], failures: FailureLog,
        on_lost: Callable[[], None], timeout: float = PROXY_HEADER_TIMEOUT,
    ) -> None:
        self.open_connection = open_connection
        self.failures = failures
        self.on_lost = on_lost
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.done = False  # handed on, or refused
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._timer = self.loop.call_later(self.timeout, self._expired)

    def data_received(self, data: bytes) -> None:
        if self.done:
            return
        self.buffer += data
        try:
            header = proxy_protocol.parse(self.buffer, max_length=PROXY_HEADER_MAX_LENGTH)
        except ProxyHeaderError as exc:
            self._refuse(str(exc))
            return
        if header is NEED_DATA:
            return
        assert isinstance(header, ProxyHeader)
        self._hand_on(header)

    def eof_received(self) -> bool | None:
        if not self.done:
            self._refuse(f"the connection ended inside the PROXY header ({len(self.buffer)} bytes)")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        on_lost, self.on_lost = self.on_lost, _nothing
        on_lost()

    def _hand_on(self, header: ProxyHeader) -> None:
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self.transport
        assert transport is not None
        rest = self.buffer[header.length:]
        self.buffer = b""
        source = None if header.source is None else (header.source.host, header.source.port)
        protocol = self.open_connection(source)
        self.on_lost = _nothing  # the connection's own connection_lost takes over
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if rest and not transport.is_closing():
            protocol.data_received(rest)

    def _refuse(self, reason: str) -> None:
        self.done = True
        transport = self.transport
        peer = None if transport is None else transport.get_extra_info("peername")
        self.failures.failed(reason, peer, self.loop.time())
        if transport is not None:
            transport.abort()

    def _expired(self) -> None:
        self._timer = None
        if not self.done:
            self._refuse(f"no complete PROXY header within {self.timeout:g}s ({len(self.buffer)} bytes received)")


class OversizedConnect(Exception):
    """The first packet is a CONNECT announcing more bytes than a CONNECT may have."""


_CONNECT_FIRST_BYTE = 0x10  # packet type 1, flags 0


def connect_bytes_needed(head: bytes | bytearray, max_size: int) -> int | None:
    """How many bytes of the stream that starts with `head` must be there before the MQTT connection takes over:
    the whole CONNECT packet when `head` starts with one, 1 for anything else (the connection's decoder refuses
    it with the reason the protocol prescribes), or None while the fixed header is incomplete. Raises
    OversizedConnect when the CONNECT announces more than `max_size` bytes, fixed header included."""
    if not head:
        return None
    if head[0] != _CONNECT_FIRST_BYTE:
        return 1
    remaining = 0
    for index in range(1, 5):  # a remaining length is 1 to 4 bytes
        if index >= len(head):
            return None
        byte = head[index]
        remaining |= (byte & 0x7F) << (7 * (index - 1))
        if not byte & 0x80:
            total = index + 1 + remaining
            if total > max_size:
                raise OversizedConnect(f"a CONNECT of {total} bytes announced, more than {max_size}")
            return total
    return 1  # a fifth length byte: malformed, for the decoder to refuse


class ConnectWait:
    """What the new sockets of listener `listener` get before their CONNECT: `timeout` seconds to send it whole
    and at most `max_size` bytes for it; the ones closed for either are counted and logged (`FailureLog`).
    `jitter()` draws the point of each pause of a socket that trickles its CONNECT
    (vmqpy.broker.listeners.connect_pacing)."""

    def __init__(self, listener: str, timeout: float, max_size: int, metrics: Counter[str],
                 jitter: Callable[[], float] = random.random, budget: ConnectBudget | None = None) -> None:
        self.timeout = timeout
        self.max_size = max_size
        self.metrics = metrics
        self.jitter = jitter
        # the node-wide pre-CONNECT budget, shared by every listener (one of its own when none is given)
        self.budget = budget if budget is not None else ConnectBudget(1 << 62, metrics)
        self.late = FailureLog(listener, CONNECT_TIMEOUT_METRIC, "connection closed: no CONNECT in time", metrics)
        self.too_large = FailureLog(listener, CONNECT_TOO_LARGE_METRIC, "connection closed: CONNECT too large",
                                    metrics)
        self.over_budget = FailureLog(listener, BUDGET_EXCEEDED_METRIC,
                                      "connection closed: the node's pre-CONNECT byte budget is used up", metrics)


class ConnectPrelude(asyncio.Protocol):
    """Holds a new socket until its first packet is complete (a CONNECT, normally), then hands the socket to
    `open_connection()` with every byte received. The CONNECT must be complete within `wait.timeout` seconds
    and announce at most `wait.max_size` bytes, else the socket is aborted (nothing was sent to it, and nothing
    is) and counted. A socket whose client ends it before sending a whole CONNECT (a TCP health check, a port
    scan) is closed without a log line. `on_lost` runs once if the socket goes away before it was handed on.
    The socket counts in the broker's `socket_open` while it waits (the connection counts it once handed on).
    A socket whose CONNECT is still incomplete after a moment (a slow-loris) is read only now and then, at
    random points, and the deadlines of sockets accepted together are spread over a fifth of the timeout after
    it (`vmqpy.broker.listeners.connect_pacing`): the node does not read or close thousands of them in one burst."""

    def __init__(self, open_connection: Callable[[], asyncio.Protocol], wait: ConnectWait,
                 on_lost: Callable[[], None]) -> None:
        self.open_connection = open_connection
        self.wait = wait
        self.on_lost = on_lost
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.done = False  # handed on, or closed
        self.handed_on = False
        self.opened_at = 0.0
        self.deadline = 0.0  # when the socket is closed if its CONNECT is still incomplete (connect_deadline)
        self.paused = False  # reading paused by connect_pacing until `_resume` fires
        self._needed: int | None = None  # the CONNECT's whole length, once its fixed header was read
        self._timer: asyncio.TimerHandle | None = None
        self._resume: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.wait.metrics["socket_open"] += 1
        self.opened_at = self.loop.time()
        self.deadline = connect_deadline(self.opened_at, self.wait.timeout, self.wait.jitter())
        self._timer = self.loop.call_at(self.deadline, self._expired)

    def data_received(self, data: bytes) -> None:
        if self.done:
            return
        if not self.buffer and self._needed is None:  # the first bytes: usually the whole CONNECT, handed on as is
            try:
                needed = connect_bytes_needed(data, self.wait.max_size)
            except OversizedConnect as exc:
                self._refuse(self.wait.too_large, str(exc))
                return
            if needed is not None and len(data) >= needed:
                self._hand_on(bytes(data))
                return
        if not self.wait.budget.take(len(data)):
            self._refuse(self.wait.over_budget, f"{len(data)} more bytes of a partial CONNECT do not fit the node's "
                                                f"budget of {self.wait.budget.limit} (mqtt.connect_budget)")
            return
        self.buffer += data
        needed = self._needed
        if needed is None:
            try:
                needed = self._needed = connect_bytes_needed(self.buffer, self.wait.max_size)
            except OversizedConnect as exc:
                self._refuse(self.wait.too_large, str(exc))
                return
        if needed is not None and len(self.buffer) >= needed:
            self._hand_on(bytes(self.buffer))
            return
        now = self.loop.time()
        resume_at = pause_until(self.opened_at, now, self.wait.jitter(), self.deadline)
        if resume_at is not None and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()
            self._resume = self.loop.call_at(resume_at, self._resume_reading)

    def _resume_reading(self) -> None:
        self._resume = None
        if self.paused and not self.done and self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    def eof_received(self) -> bool | None:
        self.done = True
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self._drop_buffer()
        self._cancel_timers()
        if not self.handed_on:
            self.wait.metrics["socket_close"] += 1
        on_lost, self.on_lost = self.on_lost, _nothing
        on_lost()

    def _cancel_timers(self) -> None:
        for timer in (self._timer, self._resume):
            if timer is not None:
                timer.cancel()
        self._timer = self._resume = None

    def _hand_on(self, received: bytes) -> None:
        """Hand the socket and every byte received so far (`received`) to the connection."""
        self.done = self.handed_on = True
        self._cancel_timers()
        transport = self.transport
        assert transport is not None
        if self.paused:  # the connection expects a socket that is read
            self.paused = False
            transport.resume_reading()
        self._drop_buffer()
        self.wait.metrics["socket_open"] -= 1  # counted again by the connection, in the same callback
        protocol = self.open_connection()
        self.on_lost = _nothing  # the connection's own connection_lost takes over
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if not transport.is_closing():
            protocol.data_received(received)

    def _drop_buffer(self) -> None:
        """Forget the partial CONNECT held, and give its bytes back to the node's budget (a CONNECT that arrived
        whole in one read held none)."""
        if self.buffer:
            self.wait.budget.give(len(self.buffer))
            self.buffer = bytearray()

    def _refuse(self, failures: FailureLog, reason: str) -> None:
        self.done = True
        self._drop_buffer()
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        transport = self.transport
        peer = None if transport is None else transport.get_extra_info("peername")
        failures.failed(reason, peer, self.loop.time())
        if transport is not None:
            transport.abort()

    def _expired(self) -> None:
        self._timer = None
        if not self.done:
            self._refuse(self.wait.late, f"no complete CONNECT within {self.wait.timeout:g}s "
                                         f"({len(self.buffer)} bytes received)")


def _nothing() -> None:
    return None
