"""Registration benchmarks: CONNECT/CONNACK rate when the client id's leader is another node vs this node,
and the takeover latency of a persistent session with 1,000 queued messages from one node to another.

Run: ``.venv/bin/python -m bench.bench_registration [--runs 3] [--duration 5] [--clients 8] [--takeovers 20]``.
Starts three vmqpy nodes on 127.0.0.11-13, joined with vmq-admin. Connects go to node 1; the client ids are
chosen so that their leader (rendezvous hashing over the members) is node 1 ("local leader") or node 2
("remote leader"); both kinds alternate in each run, and the ratio is taken per run, then the median.
Takeover: a persistent subscriber on node 1 holds 1,000 queued QoS 1 messages; it reconnects on node 2; we
time CONNECT -> CONNACK (the messages that were queued are on node 2 before CONNACK) and CONNECT -> the
1,000th message received.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.integration.clients import RawClient, enc_connect, enc_disconnect, unique
from tests.integration.cluster import ClusterNode, join_all
from vmqpy.cluster.leader import leader_for


def ids_led_by(leader: str, members: list[str], prefix: str) -> Callable[[], str]:
    """Fresh client ids whose registration leader is `leader`."""
    counter = itertools.count()

    def gen() -> str:
        while True:
            cid = f"{prefix}{next(counter)}"
            if leader_for(cid, members) == leader:
                return cid

    return gen


async def connect_loop(host: str, port: int, next_id: Callable[[], str], deadline: float,
                       counts: list[int]) -> None:
    """Connect, wait for CONNACK, disconnect; again until the deadline."""
    while time.monotonic() < deadline:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(enc_connect(next_id(), 4, True))
        await writer.drain()
        ack = await reader.readexactly(4)
        if ack[0] != 0x20 or ack[3] != 0:
            raise RuntimeError(f"CONNACK refused: {ack!r}")
        counts[0] += 1
        writer.write(enc_disconnect(4))
        writer.close()
        await writer.wait_closed()


async def connect_rate(node: ClusterNode, next_id: Callable[[], str], clients: int, duration: float) -> float:
    counts = [0]
    deadline = time.monotonic() + duration
    await asyncio.gather(*(connect_loop(node.host, node.mqtt_port, next_id, deadline, counts)
                           for _ in range(clients)))
    return counts[0] / duration


def takeover(n1: ClusterNode, n2: ClusterNode, messages: int) -> tuple[float, float]:
    """(CONNECT -> CONNACK, CONNECT -> last message) in ms for a session with `messages` queued on n1."""
    props = {"session_expiry_interval": 3600, "receive_maximum": 100}
    client_id, topic = unique("mover-"), unique("mover/")
    c = RawClient(n1.mqtt_port, n1.host, 5)
    c.connect(client_id, clean=False, props=props)
    c.subscribe((topic, 1))
    c.disconnect()
    pub = RawClient(n1.mqtt_port, n1.host, 5)
    pub.connect(unique("pub-"))
    for i in range(messages):
        pub.publish(topic, f"m{i}", qos=1)
    pub.disconnect()
    new = RawClient(n2.mqtt_port, n2.host, 5)
    start = time.perf_counter()
    ack = new.connect(client_id, clean=False, props=props, timeout=30)
    connack = time.perf_counter() - start
    assert ack.session_present
    got = new.recv_publishes(messages, timeout=60)
    done = time.perf_counter() - start
    assert len({p.payload for p in got}) == messages
    new.disconnect()
    cleanup = RawClient(n2.mqtt_port, n2.host, 5)
    cleanup.connect(client_id, clean=True)
    cleanup.disconnect()
    return connack * 1000, done * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--takeovers", type=int, default=20)
    parser.add_argument("--messages", type=int, default=1000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-registration-"))
    nodes = [ClusterNode(i, tmp, {"log.console.level": "warning"}) for i in (1, 2, 3)]
    try:
        for node in nodes:
            node.start()
        join_all(nodes)
        n1, n2, _n3 = nodes
        members = sorted(n.name for n in nodes)
        local_ids = ids_led_by(n1.name, members, "bench-local-")
        remote_ids = ids_led_by(n2.name, members, "bench-remote-")
        local_rates, remote_rates, ratios = [], [], []
        for _ in range(args.runs):
            local = asyncio.run(connect_rate(n1, local_ids, args.clients, args.duration))
            remote = asyncio.run(connect_rate(n1, remote_ids, args.clients, args.duration))
            local_rates.append(local)
            remote_rates.append(remote)
            ratios.append(remote / local if local else 0.0)
        connacks, totals = [], []
        for _ in range(args.takeovers):
            connack, total = takeover(n1, n2, args.messages)
            connacks.append(connack)
            totals.append(total)
        print(f"# vmqpy registration: 3 nodes, connects to node 1 from {args.clients} concurrent clients, "
              f"{args.runs} runs of {args.duration:g} s\n")
        print("| leader | CONNECT/CONNACK per s (median) |")
        print("|---|---:|")
        print(f"| local (node 1) | {statistics.median(local_rates):,.0f} |")
        print(f"| remote (node 2) | {statistics.median(remote_rates):,.0f} |")
        print(f"\nremote / local: median of per-run ratios {statistics.median(ratios):.2f}x "
              f"(runs: {', '.join(f'{r:.2f}' for r in ratios)}); target >= 0.5x\n")
        print(f"# takeover of a persistent session with {args.messages} queued QoS 1 messages, node 1 -> node 2, "
              f"{args.takeovers} times\n")
        print("| measure | p50 ms | p99 ms | max ms |")
        print("|---|---:|---:|---:|")
        print(f"| CONNECT -> CONNACK | {pct(connacks, 0.5):.0f} | {pct(connacks, 0.99):.0f} | {max(connacks):.0f} |")
        print(f"| CONNECT -> last message | {pct(totals, 0.5):.0f} | {pct(totals, 0.99):.0f} | {max(totals):.0f} |")
    finally:
        for node in nodes:
            node.stop()


if __name__ == "__main__":
    main()
