"""The floor of a connect in Python on uvloop: a server that does nothing but what a clean connect needs at the
socket (accept, read the CONNECT, write a CONNACK, read the DISCONNECT, close), for `bench.bench_connect --floor`.

    .venv/bin/python -m bench.connect_floor PORT

What a broker spends per connect beyond this server's CPU is its own work; this server's is the event loop's and
the kernel's share, which no broker on uvloop avoids.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import uvloop

CONNACK = b"\x20\x02\x00\x00"  # MQTT 3.1.1, session present 0, accepted
CONNECT, DISCONNECT = 0x10, 0xE0


class Floor(asyncio.Protocol):
    """Answers the first packet if it is a CONNECT; closes when a DISCONNECT comes (nothing is parsed)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport (not a subclass in Python)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if data[0] == CONNECT:
            self.transport.write(CONNACK)
            data = data[2 + data[1]:] if len(data) > 1 and data[1] < 128 else b""
        if data[:1] == bytes([DISCONNECT]):
            self.transport.close()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Floor, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
