"""The TCP fault proxy: one listener per ordered pair of nodes (on the dialing node's address, at the target's
cluster port), forwarding to the target's cluster listener. Needs no root.

Faults per unordered pair: *cut* turns the pair's connections into black holes (bytes are discarded, nothing
is closed: the nodes see silence, as with a DROP rule) and new connections are accepted but never forwarded;
*heal* closes those connections (the nodes redial). On every link, `delay_ms` delays each chunk and `loss`
delays a chunk by a retransmission timeout with that probability (what loss looks like above TCP).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

RTO_S = 0.2


@dataclass
class _Link:
    pair: tuple[int, int]
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    doomed: bool = False  # made or carried traffic during a cut: closed at heal


class ProxyNetwork:
    name = "proxy"

    def __init__(self, hosts: list[str], cluster_ports: list[int], *, delay_ms: int = 0, loss: float = 0.0,
                 seed: int = 0) -> None:
        self.hosts = hosts
        self.ports = cluster_ports
        self.delay_ms = delay_ms
        self.loss = loss
        self._rng = random.Random(seed)
        self._cut: frozenset[tuple[int, int]] = frozenset()
        self._links: list[_Link] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._servers: list[asyncio.AbstractServer] = []
        self.forwarded_bytes = 0

    # ---------------------------------------------------------------------------------------- control
    def setup(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def cut(self, pairs: Iterable[tuple[int, int]]) -> None:
        cut = frozenset((min(a, b), max(a, b)) for a, b in pairs)
        self._call(lambda: self._set_cut(cut))

    def heal(self) -> None:
        self._call(lambda: self._set_cut(frozenset()))

    def teardown(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _call(self, fn: Callable[[], None]) -> None:
        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ---------------------------------------------------------------------------------------- inside the loop
    def _set_cut(self, cut: frozenset[tuple[int, int]]) -> None:
        self._cut = cut
        for link in list(self._links):
            if link.pair in cut:
                link.doomed = True
            elif link.doomed:
                self._drop(link)

    async def _listen(self) -> None:
        for src, host in enumerate(self.hosts):
            for dst, port in enumerate(self.ports):
                if src == dst:
                    continue
                server = await asyncio.start_server(self._handler(src, dst), host, port, reuse_address=True)
                self._servers.append(server)

    def _handler(
        self, src: int, dst: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(reader, writer, src, dst)

        return handle

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for link in self._links:
            for writer in link.writers:
                writer.close()
        self._links.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, src: int, dst: int) -> None:
        pair = (min(src, dst), max(src, dst))
        link = _Link(pair, [writer], doomed=pair in self._cut)
        self._links.append(link)
        if link.doomed:
            await self._black_hole(reader)
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.hosts[dst], self.ports[dst])
        except OSError:
            writer.close()
            self._drop(link)
            return
        link.writers.append(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer, link), self._pipe(up_reader, writer, link),
                             return_exceptions=True)
        self._drop(link)

    def _drop(self, link: _Link) -> None:
        for w in link.writers:
            w.close()
        if link in self._links:
            self._links.remove(link)

    async def _black_hole(self, reader: asyncio.StreamReader) -> None:
        for _ in range(10_000_000):
            if not await reader.read(65536):
                return

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        try:
            for _ in range(1 << 40):
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if link.doomed:
                    continue  # a black hole while cut; the link is closed at heal
                delay = self.delay_ms / 1000.0
                if self.loss and self._rng.random() < self.loss:
                    delay += RTO_S
                if delay:
                    await asyncio.sleep(delay)
                writer.write(chunk)
                self.forwarded_bytes += len(chunk)
                await writer.drain()
        finally:
            if not link.doomed:  # across a cut a close must not be seen either: the heal closes the link
                writer.close()
