"""CPU time of one node's connection path per QoS 1 (or QoS 0) message, in process, without sockets or a load
generator.

A QoS 1 publisher and a QoS 1 subscriber (MQTT 5.0) on one Broker over an in-memory transport: batches of 20
PUBLISHes in, the deliveries decoded and acknowledged back. Reported: process CPU time per message (the
publisher's PUBLISH and PUBACK, the delivery and the subscriber's PUBACK, plus this script's own decoding of the
deliveries, which is the same for every revision). `--qos 0`: the same with QoS 0 PUBLISHes (nothing to
acknowledge). Another revision: run this file with `PYTHONPATH=DIR`, DIR a checkout of that revision (e.g. a
`git worktree`, or `git archive REV | tar -x -C DIR`).

    .venv/bin/python bench/bench_connection.py [MESSAGES] [--qos 0|1]
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.config import Config
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connect, Puback, Publish, SubOptions, Subscribe, Subscription

BATCH = 20  # the broker's default window of QoS 1 messages in flight

Handler = Callable[[Any, Any, Any], None]


class OneNodeMetadata:
    """A metadata store with nobody to replicate to."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, Any], Any] = {}
        self.handlers: dict[str, list[Handler]] = {}

    def get(self, prefix: str, key: Any) -> Any:
        return self.data.get((prefix, key))

    def put(self, prefix: str, key: Any, value: Any, confirm: Any = None) -> None:
        old = self.data.get((prefix, key))
        self.data[(prefix, key)] = value
        for handler in self.handlers.get(prefix, []):
            handler(key, old, value)

    def confirmation(self) -> None:
        """Nobody to confirm writes: nothing is waited for (a SUBACK leaves at once)."""

    def seal(self, confirm: Any) -> None:
        return None

    def delete(self, prefix: str, key: Any, confirm: Any = None) -> None:
        old = self.data.pop((prefix, key), None)
        for handler in self.handlers.get(prefix, []):
            handler(key, old, None)

    def fold(self, prefix: str) -> Iterator[tuple[Any, Any]]:
        return iter([(key, value) for (p, key), value in self.data.items() if p == prefix])

    def on_change(self, prefix: str, handler: Handler) -> None:
        self.handlers.setdefault(prefix, []).append(handler)

    def hlc_now(self) -> list[Any]:
        return [1, 0, "bench"]

    def known_to(self, *args: Any) -> bool:
        return False

    def witness(self, stamp: Any) -> None:
        pass


class MemoryTransport:
    """What the connection writes, kept; everything else a no-op."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


async def measure(messages: int, qos: int = 1) -> float:
    """CPU microseconds per message of `qos` (1: the subscriber acknowledges every delivery)."""
    config = Config()
    broker = Broker(config, SessionStore(None), OneNodeMetadata())  # type: ignore[arg-type]
    auth = Authenticator.__new__(Authenticator)
    auth.allow_anonymous, auth.users = True, {}

    def connect(client_id: str) -> tuple[MQTTConnection, MemoryTransport]:
        connection, transport = MQTTConnection(broker, config, None, auth, "default"), MemoryTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.data_received(encode(Connect(client_id, protocol_level=5), 5))
        return connection, transport

    subscriber, to_subscriber = connect("sub")
    subscriber.data_received(encode(Subscribe(1, [Subscription("t/x", SubOptions(qos=1))]), 5))
    publisher, to_publisher = connect("pub")
    await asyncio.sleep(0.01)
    decoder = Decoder(server=False, protocol_level=5)
    batch = b"".join(encode(Publish("t/x", b"p" * 64, qos, packet_id=i + 1 if qos else None), 5) for i in range(BATCH))
    started = time.process_time()
    for _ in range(messages // BATCH):
        publisher.data_received(batch)
        await asyncio.sleep(0)
        decoder.receive_data(to_subscriber.take())
        acks = []
        for _ in range(10 * BATCH):  # bounded: at most BATCH deliveries (and a SUBACK) per round
            packet = decoder.next_packet()
            if packet is NEED_DATA:
                break
            if type(packet) is Publish and qos:
                acks.append(encode(Puback(packet.packet_id or 0), 5))
        if acks:
            subscriber.data_received(b"".join(acks))
            await asyncio.sleep(0)
        to_publisher.take()
    return (time.process_time() - started) / messages * 1e6


def main() -> None:
    args = sys.argv[1:]
    qos = 1
    if "--qos" in args:
        at = args.index("--qos")
        qos = int(args[at + 1])
        del args[at:at + 2]
    messages = int(args[0]) if args else 100_000
    print(f"{asyncio.run(measure(messages, qos)):.2f} us of CPU per QoS {qos} message ({messages} messages)")


if __name__ == "__main__":
    main()
