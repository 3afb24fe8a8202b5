"""The floor of a relayed message in Python on uvloop: a server that does only what the load generator's pairs need
at the socket, for `bench.bench_latency --floor` (and `bench.profile_node --brokers relay-floor`).

    .venv/bin/python -m bench.relay_floor PORT

It answers CONNECT with CONNACK, SUBSCRIBE with SUBACK (each filter a topic name, no wildcards, granted as asked),
PINGREQ with PINGRESP, closes on DISCONNECT, and relays each PUBLISH as it came (the same bytes, so a QoS 1 one
keeps its publisher's packet identifier) to the connections that subscribed to its topic, answering a QoS 1 one with
PUBACK; the subscribers' PUBACKs are read and dropped. No session, queue, window, retry, ACL, metric or log: what a
broker on uvloop spends per message beyond this server's CPU is its own work; this server's is the event loop's,
the interpreter's and the kernel's share (each read, each write, each wake-up), which no broker in Python on uvloop
avoids. Everything one read brings leaves in one write per connection at its end, as in vmqpy.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import uvloop

CONNACK = b"\x20\x02\x00\x00"
PINGRESP = b"\xd0\x00"
CONNECT, PUBLISH, PUBACK, SUBSCRIBE, PINGREQ, DISCONNECT = 0x10, 0x30, 0x40, 0x80, 0xC0, 0xE0


class Relay(asyncio.Protocol):
    """One client connection of the relay; `routes` (topic -> subscribed connections) is shared by all."""

    def __init__(self, routes: dict[bytes, list[Relay]]) -> None:
        self.routes = routes
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.out: list[bytes] = []
        self.topics: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport (not a subclass in Python)

    def connection_lost(self, exc: Exception | None) -> None:
        for topic in self.topics:
            subscribers = self.routes.get(topic, [])
            if self in subscribers:
                subscribers.remove(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos, end = 0, len(buf)
        touched: list[Relay] = []
        while pos < end:
            first = buf[pos]
            length, shift, i, complete = 0, 0, pos + 1, False
            while i < end and i - pos <= 4:  # the remaining length: at most four bytes
                byte = buf[i]
                i += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    complete = True
                    break
            if not complete and i - pos > 4:
                self.close()  # not MQTT
                return
            if not complete or i + length > end:
                break  # the rest of this packet comes in a later read
            body = buf[i:i + length]
            kind = first & 0xF0
            if kind == PUBLISH:
                topic = body[2:2 + int.from_bytes(body[:2], "big")]
                frame = buf[pos:i + length]
                for subscriber in self.routes.get(topic, ()):
                    if not subscriber.out:
                        touched.append(subscriber)
                    subscriber.out.append(frame)
                if first & 0x06:  # QoS 1 (the load generator sends no QoS 2)
                    at = 2 + len(topic)
                    self.out.append(b"\x40\x02" + body[at:at + 2])
            elif kind == CONNECT:
                self.out.append(CONNACK)
            elif kind == SUBSCRIBE:
                at, codes = 2, []
                while at < len(body):
                    size = int.from_bytes(body[at:at + 2], "big")
                    topic = body[at + 2:at + 2 + size]
                    self.routes.setdefault(topic, []).append(self)
                    self.topics.append(topic)
                    codes.append(body[at + 2 + size] & 0x03)
                    at += 3 + size
                self.out.append(bytes([0x90, 2 + len(codes)]) + body[:2] + bytes(codes))
            elif kind == PINGREQ:
                self.out.append(PINGRESP)
            elif kind == DISCONNECT:
                self.close()
                return
            pos = i + length  # PUBACK and anything else: read and dropped
        self.buffer = buf[pos:]
        if self.out and self not in touched:
            touched.append(self)
        for connection in touched:
            connection.flush()

    def flush(self) -> None:
        if self.transport is not None and self.out:
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def close(self) -> None:
        self.flush()
        if self.transport is not None:
            self.transport.close()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    routes: dict[bytes, list[Relay]] = {}
    server = await loop.create_server(lambda: Relay(routes), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
