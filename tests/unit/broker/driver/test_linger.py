"""vmqpy.broker.driver.linger on real sockets (a TCP connection on loopback, the node's end under asyncio): a lingering
close delivers the last bytes written to a client that is still writing, ends when the client closes its side,
and is bounded in bytes (aborted past the budget, counted) and in time (closed when the time is up)."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from vmqpy.broker.driver.linger import LINGER_CUT, Lingering, close_lingering


class Node(asyncio.Protocol):
    """The node's end before the close: it only keeps its transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport


@dataclass
class Pair:
    transport: asyncio.Transport
    client: socket.socket


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as server:  # TCP on loopback: a reset is a TCP reset
        theirs = socket.create_connection(server.getsockname())
        ours, _ = server.accept()
    node = Node()
    await loop.connect_accepted_socket(lambda: node, ours)
    assert node.transport is not None
    theirs.setblocking(False)
    yield Pair(node.transport, theirs)
    node.transport.abort()
    theirs.close()


async def read_until_end(client: socket.socket, limit: float = 5.0) -> tuple[bytes, str]:
    """What the client reads until the node's end is gone: the bytes and "eof" or "reset"."""
    loop = asyncio.get_running_loop()
    got = bytearray()
    try:
        async with asyncio.timeout(limit):
            while True:
                try:
                    data = await loop.sock_recv(client, 65536)
                except ConnectionResetError:
                    return bytes(got), "reset"
                if not data:
                    return bytes(got), "eof"
                got += data
    except TimeoutError:
        return bytes(got), "still open"


async def test_the_last_bytes_reach_a_client_that_is_still_writing(pair: Pair) -> None:
    loop = asyncio.get_running_loop()
    metrics: Counter[str] = Counter()
    pair.client.sendall(b"unread " * 100)  # in the node's receive queue, never read by the connection
    pair.transport.write(b"DISCONNECT 0x93")
    assert close_lingering(pair.transport, loop, metrics, seconds=30.0)
    assert isinstance(pair.transport.get_protocol(), Lingering)
    pair.client.sendall(b"PUBREL" * 1000)  # still writing after the close
    got, ending = await read_until_end(pair.client)
    assert (got, ending) == (b"DISCONNECT 0x93", "eof")  # the node's FIN after its last bytes, no reset
    pair.client.shutdown(socket.SHUT_WR)  # the client closes its side: the node closes at once
    await wait_closed(pair.transport)
    assert metrics[LINGER_CUT] == 0


async def wait_closed(transport: asyncio.Transport, limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while not transport.is_closing():
            await asyncio.sleep(0.01)


async def test_more_than_the_byte_budget_aborts_the_socket(pair: Pair) -> None:
    loop = asyncio.get_running_loop()
    metrics: Counter[str] = Counter()
    assert close_lingering(pair.transport, loop, metrics, seconds=30.0, budget=4096)
    await read_until_end(pair.client, 1.0)  # the FIN
    for _ in range(20):  # 20 x 1 KiB: over the budget of 4 KiB
        try:
            pair.client.send(b"x" * 1024)
        except OSError:
            break
        await asyncio.sleep(0)
    await wait_closed(pair.transport)
    assert metrics[LINGER_CUT] == 1


async def test_a_client_that_neither_closes_nor_writes_is_closed_when_the_time_is_up(pair: Pair) -> None:
    loop = asyncio.get_running_loop()
    metrics: Counter[str] = Counter()
    assert close_lingering(pair.transport, loop, metrics, seconds=0.05)
    await wait_closed(pair.transport)
    _got, ending = await read_until_end(pair.client)
    assert ending in ("eof", "reset")
    assert metrics[LINGER_CUT] == 0


async def test_a_paused_socket_is_read_while_it_lingers(pair: Pair) -> None:
    loop = asyncio.get_running_loop()
    pair.transport.pause_reading()
    assert close_lingering(pair.transport, loop, Counter(), seconds=30.0)
    assert pair.transport.is_reading()


async def test_a_transport_that_cannot_half_close_is_left_to_the_caller(pair: Pair) -> None:
    loop = asyncio.get_running_loop()
    pair.transport.close()
    assert not close_lingering(pair.transport, loop, Counter())  # closing already
