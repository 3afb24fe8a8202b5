"""CPU time and Python calls of one node's connection path per message when every message arrives alone, in
process, without sockets or a load generator (issue 21: the paced, fixed-rate case).

Ten publisher/subscriber pairs (MQTT 3.1.1, as `bench.loadgen`'s clients) on one Broker over in-memory transports
(bench/bench_connection.py's). Each PUBLISH is handed to its publisher's connection in a read of its own, then the
event loop turns once (as a paced message is one read and one loop pass on a real node): the delivery is written,
the subscriber's PUBACK (QoS 1) comes back in its own read, and the publisher's PUBACK leaves. Reported per
message: process CPU time, and with `--calls` the Python function calls (cProfile) and the top functions.

    .venv/bin/python -m bench.bench_paced [--messages N] [--qos 0|1] [--calls] [--asyncio]

Another revision: run it with `PYTHONPATH=DIR`, DIR a checkout of that revision (e.g. a `git worktree`).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import pstats
import time

import structlog
import uvloop

from bench.bench_connection import MemoryTransport, OneNodeMetadata
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.config import Config
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connect, Puback, Publish, SubOptions, Subscribe, Subscription

PAIRS = 10
LEVEL = 4  # MQTT 3.1.1, as the load generator's clients


class Pair:
    """One publisher and its subscriber, on topic bench/N."""

    def __init__(self, broker: Broker, config: Config, auth: Authenticator, n: int, qos: int) -> None:
        self.topic = f"bench/{n}"
        self.qos = qos
        self.pub, self.to_pub = self._connect(broker, config, auth, f"pub{n}")
        self.sub, self.to_sub = self._connect(broker, config, auth, f"sub{n}")
        self.sub.data_received(encode(Subscribe(1, [Subscription(self.topic, SubOptions(qos=qos))]), LEVEL))
        self.decoder = Decoder(server=False, protocol_level=LEVEL)
        self.next_id = 0

    @staticmethod
    def _connect(broker: Broker, config: Config, auth: Authenticator,
                 client_id: str) -> tuple[MQTTConnection, MemoryTransport]:
        connection, transport = MQTTConnection(broker, config, None, auth, "default"), MemoryTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.data_received(encode(Connect(client_id, protocol_level=LEVEL), LEVEL))
        return connection, transport

    def frame(self) -> bytes:
        self.next_id = self.next_id % 65535 + 1
        return encode(Publish(self.topic, b"p" * 64, self.qos, packet_id=self.next_id if self.qos else None), LEVEL)

    def deliveries(self) -> list[bytes]:
        """The PUBACKs for what reached the subscriber (none at QoS 0); raises if nothing arrived."""
        self.decoder.receive_data(self.to_sub.take())
        acks = []
        got = 0
        for _ in range(100):  # bounded: one delivery per message
            packet = self.decoder.next_packet()
            if packet is NEED_DATA:
                break
            if type(packet) is Publish:
                got += 1
                if packet.qos:
                    acks.append(encode(Puback(packet.packet_id or 0), LEVEL))
        if not got:
            raise RuntimeError(f"{self.topic}: the message was not delivered")
        return acks


async def run(messages: int, qos: int, profile: cProfile.Profile | None) -> float:
    """CPU microseconds per message (with the profiler's overhead when it runs)."""
    config = Config()
    broker = Broker(config, SessionStore(None), OneNodeMetadata())  # type: ignore[arg-type]
    auth = Authenticator.__new__(Authenticator)
    auth.allow_anonymous, auth.users = True, {}
    pairs = [Pair(broker, config, auth, n, qos) for n in range(PAIRS)]
    await asyncio.sleep(0.01)
    for pair in pairs:
        pair.to_sub.take()
        pair.to_pub.take()
    frames = [[pair.frame() for _ in range(64)] for pair in pairs]  # encoded before the clock starts
    if profile is not None:
        profile.enable()
    started = time.process_time()
    for i in range(messages):
        pair = pairs[i % PAIRS]
        pair.pub.data_received(frames[i % PAIRS][(i // PAIRS) % 64])
        await asyncio.sleep(0)  # the loop turns: the delivery's write leaves
        for ack in pair.deliveries():
            pair.sub.data_received(ack)  # the subscriber's PUBACK, in a read of its own
        if qos:
            await asyncio.sleep(0)
            if not pair.to_pub.take():
                raise RuntimeError("no PUBACK for the publisher")
    spent = time.process_time() - started
    if profile is not None:
        profile.disable()
    return spent / messages * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_paced", description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=50_000, help="messages (default 50,000)")
    ap.add_argument("--qos", type=int, choices=(0, 1), default=0)
    ap.add_argument("--calls", action="store_true", help="count Python calls per message (cProfile) and list the top")
    ap.add_argument("--asyncio", action="store_true", help="the standard event loop instead of uvloop")
    ap.add_argument("--top", type=int, default=30, help="functions listed with --calls (default 30)")
    args = ap.parse_args()
    if args.messages < PAIRS:
        ap.error(f"--messages: at least {PAIRS}")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))  # no connect lines
    profile = cProfile.Profile() if args.calls else None
    runner = asyncio.run if args.asyncio else uvloop.run  # the node runs on uvloop (vmqpy/__main__.py)
    us = runner(run(args.messages, args.qos, profile))
    print(f"QoS {args.qos}, one message per read: {us:.2f} us of CPU per message ({args.messages} messages"
          + (", under cProfile)" if profile else ")"))
    if profile is not None:
        stats = pstats.Stats(profile)
        calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
        node = sum(v[1] for k, v in stats.stats.items() if "/vmqpy/" in k[0])  # type: ignore[attr-defined]
        print(f"{calls / args.messages:.1f} calls per message in all (this script's own and builtins included), "
              f"{node / args.messages:.1f} of vmqpy's Python functions")
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
