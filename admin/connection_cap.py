"""The admin API's connections: at most `listener.http.max_connections` at once per listener, so a flood of
sockets on the admin port takes neither the node's descriptors nor the operator's place for long.

`CappedConnection` is the protocol of an accepted socket: under the cap it hands the socket to aiohttp's own
request handler (`server()`, which counts itself in `server.connections` from then on); at the cap it answers
`503 Service Unavailable` with `Connection: close` and closes, nothing read. Idle and trickling connections are
closed by aiohttp's keep-alive timer (`keepalive_timeout` of the runner, `listener.http.request_timeout`), which
runs from the moment a connection opens and again after each answer, and is not reset by the bytes of an
unfinished request head: a socket that sends nothing, or a header a byte at a time, is closed when it expires.
"""

from __future__ import annotations

import asyncio
from typing import cast

import structlog
from aiohttp import web

log = structlog.get_logger("vmqpy.admin")

#: the whole answer to a connection over the cap
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 42\r\n\r\nadmin API busy: too many open connections\n")
LOG_EVERY = 1.0  # seconds between two log lines of refusals


class ConnectionCap:
    """The connections of one admin listener served by `server`: at most `maximum` at once."""

    def __init__(self, server: web.Server, maximum: int, host: str, port: int) -> None:
        self.server = server
        self.maximum = maximum
        self.where = f"{host}:{port}"
        self.refused = 0  # since the start
        self.unlogged = 0
        self._logged_at: float | None = None

    def protocol(self) -> asyncio.Protocol:
        """The protocol factory for `loop.create_server`."""
        return CappedConnection(self)

    def admit(self, now: float) -> bool:
        if len(self.server.connections) < self.maximum:
            return True
        self.refused += 1
        self.unlogged += 1
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.warning("admin API connections refused: listener.http.max_connections are open",
                        listener=self.where, max_connections=self.maximum, refused=self.unlogged)
            self.unlogged = 0
            self._logged_at = now
        return False


class CappedConnection(asyncio.Protocol):
    """An accepted admin socket: handed to aiohttp under the cap, answered 503 and closed at it."""

    __slots__ = ("cap",)

    def __init__(self, cap: ConnectionCap) -> None:
        self.cap = cap

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # (uvloop's transports are no subclasses of asyncio's)
        if not self.cap.admit(asyncio.get_running_loop().time()):
            transport.write(BUSY)
            transport.close()  # after the answer is written
            return
        handler = self.cap.server()
        transport.set_protocol(handler)
        handler.connection_made(transport)
