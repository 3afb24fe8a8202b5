"""A lingering close, as HTTP servers close a connection: the last bytes written (a DISCONNECT with its reason
code) reach a client that is still writing.

Closing a TCP socket whose receive queue holds unread bytes, or that receives more afterwards, makes the kernel
answer with a reset; the client's kernel then throws away what it had received and not yet read, and a client
library that was busy writing (PUBRELs for the PUBRECs it got, say) reports "connection reset" and never sees
the DISCONNECT 0x93 that explained why. So a plain TCP connection is closed in three steps: shut down writing
(a FIN after the bytes still buffered: `transport.write_eof()`), read and discard what the client still sends
until it closes its side too, and close. The drain is bounded, so that a hostile client cannot keep the socket:
at most `LINGER_BYTES` bytes (then the socket is aborted and `broker.socket_linger_cut` counted) and
`LINGER_SECONDS` seconds (then it is closed; bytes still unsent to a client that reads nothing are given
`CLOSE_TIMEOUT` seconds more, as before, then the socket is aborted).

The MQTT connection ends at once (its session goes offline, its will is due): the socket is handed to a
`Lingering` protocol, which only counts and discards. A connection the client ended itself with DISCONNECT does
not linger: the client sends nothing after it (MQTT 3.1.1 3.14.4, 5.0 3.14.4: it closes the connection) and the
node has no last word for it, so its socket is closed at once (`Close.by_client`, vmqpy.broker.driver.connection),
which saves every clean disconnect a shutdown(2), a second read and a timer. Transports that cannot half-close
are closed as before by their own means: TLS sends close_notify and discards application data until the
client's close_notify (asyncio's TLS layer, OpenSSL), a WebSocket sends its close frame and discards frames until
the client's (aiohttp), both aborted after `CLOSE_TIMEOUT` seconds (vmqpy.broker.driver.connection).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Final

from vmqpy.broker.core.broker import LINGER_CUT  # the counter of drains cut short by LINGER_BYTES

__all__ = ["CLOSE_TIMEOUT", "LINGER_BYTES", "LINGER_CUT", "LINGER_SECONDS", "Lingering", "close_lingering"]

LINGER_SECONDS: Final = 2.0  # how long a half-closed socket is drained before it is closed
LINGER_BYTES: Final = 64 * 1024  # how much a half-closed socket may still receive before it is aborted
CLOSE_TIMEOUT: Final = 5.0  # seconds a closed socket's unsent bytes get before the socket is aborted


class Lingering(asyncio.Protocol):
    """The protocol of a half-closed socket: discards what arrives, within a budget of bytes and time."""

    __slots__ = ("_left", "_metrics", "_timer", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, seconds: float,
                 budget: int, metrics: Counter[str]) -> None:
        self.transport = transport
        self._left = budget
        self._metrics = metrics
        self._timer: asyncio.TimerHandle | None = loop.call_later(seconds, self._expired)

    def data_received(self, data: bytes) -> None:
        self._left -= len(data)
        if self._left < 0 and not self.transport.is_closing():
            self._metrics[LINGER_CUT] += 1
            self._cancel()
            self.transport.abort()

    def eof_received(self) -> bool | None:
        return False  # the client closed its side too: asyncio closes the socket

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()

    def _expired(self) -> None:
        self._timer = None
        transport = self.transport
        if transport.is_closing():
            return
        transport.close()
        if transport.get_write_buffer_size():
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(CLOSE_TIMEOUT, transport.abort)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def close_lingering(transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, metrics: Counter[str],
                    seconds: float = LINGER_SECONDS, budget: int = LINGER_BYTES) -> bool:
    """Half-close `transport` and hand it to a `Lingering` protocol. False when the transport cannot half-close
    (TLS, WebSocket) or is closing already: the caller closes it as before."""
    try:
        if transport.is_closing() or not transport.can_write_eof():
            return False
    except NotImplementedError:  # a transport that does not say: take it as one that cannot
        return False
    try:
        transport.write_eof()
    except (OSError, RuntimeError):  # the socket broke meanwhile
        transport.abort()
        return True
    transport.set_protocol(Lingering(transport, loop, seconds, budget, metrics))
    if not transport.is_reading():
        transport.resume_reading()  # paused by pacing or backpressure: the drain must read
    return True
