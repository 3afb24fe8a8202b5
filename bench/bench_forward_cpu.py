"""CPU of the forwarding layers alone, in one process: a publish delivered on its own node against one forwarded
to another node, without sockets, MQTT decoding or encoding (docs/performance.md, issue 21 "Cross node").

Two real `Broker`s (nodes a and b) over in-memory metadata stores, each with a real `ForwardDriver` over an
in-memory link that hands node a's FORWARD frames to node b's driver and b's `fwd_ack`s back to a. `pairs`
subscribers (`t/<i>`, QoS of the run) are attached with sinks that only count what they are given. Same node: the
subscribers are on a, a publishes. Cross node: the subscribers are on b (a learns their routes as it would from
the replicated subscriptions), a publishes, the batch of the turn goes to b, b delivers and acknowledges.

Run: ``.venv/bin/python -m bench.bench_forward_cpu [--messages 10000] [--rounds 15] [--qos 0 1]``. Prints CPU
microseconds per message (`time.process_time`), the least of the rounds (as `timeit` does: other work on a
shared machine only ever adds to a round), and cross / same. Needs no network (no lock): it measures only what
forwarding adds in Python, not the socket work a real node also does per frame.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.framing import FrameType
from vmqpy.config import Config
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions import records
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry
from vmqpy.storage import Storage

Handler = Callable[[Any, Any, Any], None]


class MemoryMetadata:
    """One node's metadata store with nobody to replicate to: change events come at once."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.data: dict[tuple[str, Any], Any] = {}
        self.handlers: dict[str, list[Handler]] = defaultdict(list)
        self.clock = 0

    def get(self, prefix: str, key: Any) -> Any | None:
        return self.data.get((prefix, key))

    def put(self, prefix: str, key: Any, value: Any, confirm: Any = None) -> None:
        old = self.data.get((prefix, key))
        self.data[(prefix, key)] = value
        for handler in self.handlers[prefix]:
            handler(key, old, value)

    def confirmation(self) -> None:
        """Nobody to confirm writes: nothing is waited for (a SUBACK leaves at once)."""

    def seal(self, confirm: Any) -> None:
        return None

    def delete(self, prefix: str, key: Any, confirm: Any = None) -> None:
        old = self.data.pop((prefix, key), None)
        for handler in self.handlers[prefix]:
            handler(key, old, None)

    def fold(self, prefix: str) -> Iterator[tuple[Any, Any]]:
        return iter([(key, value) for (p, key), value in self.data.items() if p == prefix])

    def on_change(self, prefix: str, handler: Handler) -> None:
        self.handlers[prefix].append(handler)

    def hlc_now(self) -> list[Any]:
        self.clock += 1
        return [self.clock, 0, self.node]

    def witness(self, stamp: Any) -> None:
        return None

    def known_to(self, peer: str, prefix: str, key: Any) -> bool:
        return False


class CountingSink:
    """A connection that takes everything and only counts it (and acknowledges QoS 1 at once)."""

    def __init__(self) -> None:
        self.written = 0
        self.unacked: list[int] = []
        self.session: Any = None

    def write_packet(self, packet: Any) -> None:
        return None

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False) -> None:
        self.written += 1
        if packet_id is not None:
            self.unacked.append(packet_id)

    def acknowledge(self) -> None:
        """The subscriber's PUBACKs for what was written to it (QoS 1)."""
        unacked, self.unacked = self.unacked, []
        for packet_id in unacked:
            self.session.on_puback(packet_id, 0.0)

    def can_write(self) -> bool:
        return True

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        return None, 0.0


class MemoryLinks:
    """The links of one node: frames to the other node are handed to its driver at the end of the turn."""

    max_frame = 1 << 20

    def __init__(self, name: str) -> None:
        self.name = name
        self.peer: ForwardDriver | None = None
        self.frames: list[tuple[FrameType, Any]] = []

    def send_frame(self, peer: str, type: FrameType, body: Any, *, flush: bool = False) -> bool:
        self.frames.append((type, body))
        return True

    def room(self, peer: str) -> int:
        return 1 << 24

    def pass_frames(self) -> int:
        assert self.peer is not None
        frames, self.frames = self.frames, []
        for type, body in frames:
            if type is FrameType.FORWARD:
                self.peer.receive(self.name, body)
            else:
                self.peer.acknowledged(self.name, body)
        return len(frames)


class Node:
    def __init__(self, name: str, directory: Path, batches: bool = True) -> None:
        self.storage = Storage(directory / f"{name}.db")
        self.storage.open()
        self.metadata = MemoryMetadata(name)
        self.broker = Broker(Config(nodename=name), SessionStore(self.storage), self.metadata)
        self.links = MemoryLinks(name)
        self.driver = ForwardDriver(self.links, self.broker.deliver_forwarded)
        self.broker.forwarder = self.driver  # type: ignore[assignment]  # the driver has the Forwarder's methods
        if batches:
            self.driver.deliver_batch = self.broker.forwards.deliver_batch

    def subscribe(self, client_id: str, topic: str, qos: int) -> CountingSink:
        sink = CountingSink()
        session, _ = self.broker.open_session(client_id, 5, True, 0, sink, 0.0)
        self.broker.attach(session, sink, 1000, 0, 0.0)
        sink.session = session
        self.broker.subscribe(session, [Subscription(topic, SubOptions(qos))], None)
        return sink

    def learn_remote(self, node: str, client_id: str, topic: str, qos: int) -> None:
        entry = SubEntry(topic, topic, SubOptions(qos), None, None)
        self.metadata.put(records.SUBSCRIPTION, records.subscription_key(client_id, topic),
                          records.subscription_value(self.metadata.hlc_now(), node, entry))


MODES = ("same node", "cross node, one by one", "cross node, batches")


def one_round(mode: str, qos: int, messages: int, pairs: int, batch: int) -> float:
    """CPU seconds per message of `messages` publishes, `batch` per turn of the loop, in one of `MODES`: the
    receiving node delivers a frame's forwards one call each (`Broker.deliver_forwarded`, as before 2026-11-27's
    fourth session) or in one call (`Forwards.deliver_batch`)."""
    cross = mode != MODES[0]
    with TemporaryDirectory() as tmp:
        a, b = Node("a", Path(tmp)), Node("b", Path(tmp), batches=mode == MODES[2])
        a.links.peer, b.links.peer = b.driver, a.driver
        sinks = []
        for i in range(pairs):
            if cross:
                sinks.append(b.subscribe(f"s{i}", f"t/{i}", qos))
                a.learn_remote("b", f"s{i}", f"t/{i}", qos)
            else:
                sinks.append(a.subscribe(f"s{i}", f"t/{i}", qos))
        topics = [f"t/{i % pairs}" for i in range(messages)]

        async def drive() -> float:
            start = time.process_time()
            for first in range(0, messages, batch):
                for topic in topics[first:first + batch]:
                    a.broker.publish(Message(topic, b"x" * 64, qos, publisher="p"), 0.0)
                a.driver.flush()
                a.links.pass_frames()
                b.driver.flush()
                await asyncio.sleep(0)  # the acknowledgements scheduled for the end of the turn
                b.links.pass_frames()
                for sink in sinks:
                    sink.acknowledge()
            return time.process_time() - start

        elapsed = asyncio.run(drive())
        delivered = sum(s.written for s in sinks)
        if delivered != messages:
            raise RuntimeError(f"{delivered} of {messages} messages delivered")
        a.storage.close()
        b.storage.close()
        return elapsed / messages


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50, help="publishes per turn of the event loop")
    parser.add_argument("--qos", type=int, nargs="+", choices=(0, 1), default=[0, 1])
    args = parser.parse_args(argv)
    print("| QoS | " + " | ".join(MODES) + " | cross / same, one by one | cross / same, batches |")
    print("|---|" + "---:|" * (len(MODES) + 2))
    for qos in args.qos:
        cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):  # alternating, so that all see the same load of the machine
            for mode in MODES:
                cpu[mode].append(one_round(mode, qos, args.messages, args.pairs, args.batch))
        us = [min(cpu[mode]) * 1e6 for mode in MODES]
        shown = " | ".join(f"{u:.2f} us" for u in us)
        print(f"| {qos} | {shown} | {us[1] / us[0]:.2f}x | {us[2] / us[0]:.2f}x |")


if __name__ == "__main__":
    main()
