"""A minimal MQTT 3.1.1 client for the fleet benchmarks (bench_storm, bench_sessions_memory): raw packets on an
asyncio Protocol, so that one process can hold ten thousand connections and the broker, not the client
library, is what is measured.

Only what the benchmarks need: CONNECT (clean or persistent), SUBSCRIBE, QoS 1 PUBLISH in both directions with
PUBACK, DISCONNECT. Every wait is bounded (`asyncio.wait_for` around the futures below); a refusal or a packet
this client does not expect fails the future with a message that names the client id.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast

HOST = "127.0.0.1"
DISCONNECT = b"\xe0\x00"


def remaining_length(n: int) -> bytes:
    """MQTT's variable-length integer."""
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mqtt_string(s: str) -> bytes:
    """A UTF-8 string with its two-byte length."""
    raw = s.encode()
    return len(raw).to_bytes(2, "big") + raw


def connect_packet(client_id: str, clean: bool, keep_alive: int = 600) -> bytes:
    """CONNECT, MQTT 3.1.1; `clean` sets the clean session flag."""
    flags = bytes([0x02 if clean else 0x00])
    body = b"\x00\x04MQTT\x04" + flags + keep_alive.to_bytes(2, "big") + mqtt_string(client_id)
    return b"\x10" + remaining_length(len(body)) + body


def subscribe_packet(packet_id: int, topic_filter: str, qos: int = 1) -> bytes:
    body = packet_id.to_bytes(2, "big") + mqtt_string(topic_filter) + bytes([qos])
    return b"\x82" + remaining_length(len(body)) + body


def publish_packet(topic: str, payload: bytes, packet_id: int) -> bytes:
    """PUBLISH QoS 1."""
    body = mqtt_string(topic) + packet_id.to_bytes(2, "big") + payload
    return b"\x32" + remaining_length(len(body)) + body


def puback_packet(packet_id: int) -> bytes:
    return b"\x40\x02" + packet_id.to_bytes(2, "big")


def split_packets(buffer: bytearray) -> list[tuple[int, bytes]]:
    """Take the whole packets off the front of `buffer`: (first byte, body) each; a partial packet stays."""
    packets: list[tuple[int, bytes]] = []
    while len(buffer) >= 2:
        length, shift, i = 0, 0, 1
        while True:
            if i >= len(buffer):
                return packets
            byte = buffer[i]
            length |= (byte & 0x7F) << shift
            i += 1
            if not byte & 0x80:
                break
            shift += 7
            if shift > 21:
                raise ValueError("malformed remaining length from the broker")
        if len(buffer) < i + length:
            return packets
        packets.append((buffer[0], bytes(buffer[i:i + length])))
        del buffer[:i + length]
    return packets


class RawClient(asyncio.Protocol):
    """One connection. `connack` resolves to the session present flag (a refusal fails it); `suback` to the
    granted QoS; `received` counts QoS 0/1 PUBLISHes (each QoS 1 one acknowledged at once) and `all_received`
    resolves when `expected` have arrived; `on_puback` is called with each PUBACK's packet id; `closed`
    resolves when the broker closed the socket."""

    def __init__(self, client_id: str, clean: bool, expected: int = 0,
                 on_puback: Callable[[int], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.client_id = client_id
        self.clean = clean
        self.expected = expected
        self.on_puback = on_puback
        self.connack: asyncio.Future[bool] = loop.create_future()
        self.suback: asyncio.Future[int] = loop.create_future()
        self.all_received: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.received = 0
        self.started = time.monotonic()
        self.connack_at = 0.0
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        if expected == 0:
            self.all_received.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport subclasses
        self.transport.write(connect_packet(self.client_id, self.clean))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        try:
            packets = split_packets(self.buffer)
        except ValueError as e:
            self._fail(e)
            return
        for first, body in packets:
            self._packet(first, body)

    def _packet(self, first: int, body: bytes) -> None:
        kind = first >> 4
        if kind == 2:  # CONNACK
            self.connack_at = time.monotonic()
            if len(body) != 2 or body[1] != 0:
                self._fail(RuntimeError(f"{self.client_id}: CONNACK refused ({body.hex()})"))
            elif not self.connack.done():
                self.connack.set_result(bool(body[0] & 1))
        elif kind == 9:  # SUBACK
            if not self.suback.done():
                self.suback.set_result(body[-1])
        elif kind == 3:  # PUBLISH
            qos = (first >> 1) & 3
            if qos == 1:
                topic_len = int.from_bytes(body[:2], "big")
                packet_id = body[2 + topic_len:4 + topic_len]
                assert self.transport is not None
                self.transport.write(b"\x40\x02" + packet_id)
            elif qos != 0:
                self._fail(RuntimeError(f"{self.client_id}: unexpected QoS {qos} PUBLISH"))
                return
            self.received += 1
            if self.received >= self.expected and not self.all_received.done():
                self.all_received.set_result(None)
        elif kind == 4:  # PUBACK
            if self.on_puback is not None:
                self.on_puback(int.from_bytes(body[:2], "big"))
        else:
            self._fail(RuntimeError(f"{self.client_id}: unexpected packet type {kind}"))

    def _fail(self, error: Exception) -> None:
        for future in (self.connack, self.suback, self.all_received):
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: not every waiter awaits every future
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RuntimeError(f"{self.client_id}: connection closed ({exc})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def disconnect(self) -> None:
        """DISCONNECT and half-close; `closed` resolves when the broker has closed its side."""
        assert self.transport is not None
        self.transport.write(DISCONNECT)


async def open_client(port: int, client_id: str, clean: bool, timeout: float, expected: int = 0,
                      on_puback: Callable[[int], None] | None = None) -> RawClient:
    """Connect and wait for a successful CONNACK (bounded by `timeout`)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    _transport, client = await asyncio.wait_for(
        loop.create_connection(lambda: RawClient(client_id, clean, expected, on_puback), HOST, port), timeout)
    client.started = started
    await asyncio.wait_for(asyncio.shield(client.connack), timeout)
    return client


async def close_client(client: RawClient, timeout: float) -> None:
    """DISCONNECT, then wait (bounded) until the broker closed the socket."""
    if client.transport is None or client.transport.is_closing():
        return
    client.disconnect()
    try:
        await asyncio.wait_for(asyncio.shield(client.closed), timeout)
    finally:
        client.transport.close()


async def publish_all(port: int, messages: list[tuple[str, bytes]], window: int, timeout: float) -> None:
    """Publish `messages` (topic, payload) at QoS 1 from one connection, `window` unacknowledged at most; returns
    when every PUBACK has arrived."""
    free = asyncio.Semaphore(window)
    pending: set[int] = set()
    all_acked = asyncio.get_running_loop().create_future()

    def acked(packet_id: int) -> None:
        if packet_id in pending:
            pending.discard(packet_id)
            free.release()
            if not pending and sent[0] == len(messages) and not all_acked.done():
                all_acked.set_result(None)

    sent = [0]
    client = await open_client(port, "bench-publisher", True, timeout, on_puback=acked)
    for index, (topic, payload) in enumerate(messages):
        await asyncio.wait_for(free.acquire(), timeout)
        packet_id = index % 65535 + 1
        pending.add(packet_id)
        sent[0] += 1
        client.send(publish_packet(topic, payload, packet_id))
    if pending:
        await asyncio.wait_for(all_acked, timeout)
    await close_client(client, timeout)
