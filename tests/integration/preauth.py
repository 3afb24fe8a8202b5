"""Hostile bytes before authentication: raw sockets that push the body of a CONNECT (or a cluster frame) the node
should not hold, WebSockets that send a huge frame before any CONNECT, and a node with a cluster listener whose
port strangers can reach."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

import aiohttp

from tests.integration.clients import enc_connect, unique
from tests.integration.conftest import Broker, free_port, wait_until

MIB = 1024 * 1024


class HostileSockets:
    """Raw sockets that each try to make the node hold `body` bytes after sending `head`; `poll` counts the ones
    the node closed."""

    def __init__(self, port: int, count: int, head: bytes, body: int) -> None:
        self.head = head
        self.body = body
        self.socks: list[socket.socket] = []
        self.sent: dict[socket.socket, int] = {}
        self.closed = 0
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
            sock.setblocking(False)
            self.socks.append(sock)
            self.sent[sock] = 0
            with contextlib.suppress(BlockingIOError, ConnectionError):
                sock.send(head)

    def push(self) -> int:
        """Send what each socket's buffer takes of its body; the bytes sent in all."""
        chunk = bytes(64 * 1024)
        total = 0
        for sock in self.socks:
            left = self.body - self.sent[sock]
            while left > 0:
                try:
                    n = sock.send(chunk[:left])
                except (BlockingIOError, ConnectionError, OSError):
                    break
                self.sent[sock] += n
                total += n
                left -= n
        return total

    def poll(self) -> int:
        """How many are still open (the ones the node closed are counted and closed here)."""
        still = []
        for sock in self.socks:
            try:
                closed = sock.recv(65536) == b""
            except BlockingIOError:
                closed = False
            except (ConnectionError, OSError):
                closed = True
            if closed:
                self.closed += 1
                sock.close()
            else:
                still.append(sock)
        self.socks = still
        return len(still)

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks = []


def connect_head(total: int) -> bytes:
    """The fixed header of a CONNECT of `total` bytes in all (remaining length in 4 bytes) and its first bytes."""
    remaining = total - 5
    encoded = bytes(((remaining >> (7 * i)) & 0x7F) | (0x80 if i < 3 else 0) for i in range(4))
    return b"\x10" + encoded + b"\x00\x04MQTT\x04\x02\x00\x3c"


async def websocket_flood(port: int, count: int, frame: bytes) -> list[aiohttp.WSMsgType]:
    """`count` WebSockets that each send `frame` (no CONNECT before it) and wait for the node to close them."""
    async def one(session: aiohttp.ClientSession) -> aiohttp.WSMsgType:
        async with session.ws_connect(f"ws://127.0.0.1:{port}/mqtt", protocols=("mqtt",),
                                      max_msg_size=0) as ws:
            with contextlib.suppress(ConnectionError, aiohttp.ClientError, RuntimeError):
                await ws.send_bytes(frame)
            message = await ws.receive(timeout=60.0)
            return message.type

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session) for _ in range(count))))


async def websocket_connect(port: int) -> bytes:
    """A well-behaved MQTT client over WebSocket: its CONNECT gets a CONNACK."""
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"ws://127.0.0.1:{port}/mqtt", protocols=("mqtt",)) as ws:
        await ws.send_bytes(enc_connect(unique("ws-good")))
        message = await ws.receive(timeout=15.0)
        assert message.type is aiohttp.WSMsgType.BINARY, message
        return bytes(message.data)


def cluster_node(broker_factory: Callable[..., Broker], **extra: str) -> tuple[Broker, int]:
    """A node with a cluster listener (and the test's own cookie): the node and its cluster port."""
    port = free_port()
    broker = broker_factory(**{"listener.vmq.clustering": f"127.0.0.1:{port}",
                               "distributed_cookie": "budget-test-cookie", **extra})
    wait_until(lambda: _listening(port), 15.0, what="the cluster listener")
    return broker, port


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0):
        return True
    return False
