"""Balancer benchmarks (issue 16, "Speed"): what stickiness saves, a reconnect storm through HAProxy, and what the
PROXY header and HAProxy itself cost.

Run (under the network lock; three vmqpy nodes on 127.0.0.11-13, HAProxy on 127.0.0.14):

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_balancer [--reconnects 20] [--queued 1000]
        [--storm 2000] [--storm-rounds 3] [--connects 2000] [--rounds 3] [--duration 5] [--only a,b,c]

(a) takeover: a persistent 3.1.1 client with `--queued` QoS 1 messages waiting reconnects `--reconnects` times
    to the node that holds its session (sticky) and as often to another node (the session is taken over); the
    time to CONNACK and to the last queued message, p50/p99, and the nodes' CPU per reconnect.
(b) storm: `--storm` persistent clients connected through HAProxy; one node is restarted (stop, start, rejoin,
    back in HAProxy's pool); then every client closes and all reconnect at once through HAProxy: the time until
    all have their CONNACK (session present), and until one QoS 1 message published to all of them reached
    every one; with the shipped stick table and without it (leastconn only); medians of `--storm-rounds`.
(c) PROXY header: `--connects` connects (CONNECT, CONNACK, DISCONNECT, 50 at a time) straight to one node's
    listener without and with `proxy_protocol = on` (a v2 header sent first), connects/s and the node's CPU per
    connect; and msgs/s of bench.loadgen (10 QoS 1 pairs) straight to that node vs through an HAProxy that has
    only that node as server, in the same run; medians of `--rounds`.

Every client here is a small asyncio MQTT 3.1.1 client of this file's own (no library threads). CPU is
utime+stime of the node processes from /proc, summed over the nodes, during the measured part only.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.brokers import cpu_seconds
from bench.loadgen import Scenario, run
from chaos.haproxy import Balancer, Server
from chaos.ports import free_port
from tests.integration.clients import enc_ack, enc_connect, enc_disconnect, enc_publish, enc_subscribe
from tests.integration.cluster import ClusterNode, cluster_ready, start_cluster

CONNECT_TIMEOUT_S = 30.0
PROXY_V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
BALANCER_HOST = "127.0.0.14"


# -- a minimal asyncio MQTT 3.1.1 client ---------------------------------------------------------------------------
def proxy_v2(src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    """A PROXY protocol v2 header (PROXY command, TCP over IPv4) for a connection from src to dst."""
    body = (ipaddress.IPv4Address(src[0]).packed + ipaddress.IPv4Address(dst[0]).packed
            + struct.pack(">HH", src[1], dst[1]))
    return PROXY_V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack(">H", len(body)) + body


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(packet type, body) of the next packet."""
    first = (await reader.readexactly(1))[0]
    length = shift = 0
    for _ in range(4):
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first >> 4, await reader.readexactly(length) if length else b""


class Conn:
    """One MQTT connection: CONNECT/CONNACK, SUBSCRIBE, QoS 1 PUBLISH receive with PUBACK, DISCONNECT."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, present: bool) -> None:
        self.reader, self.writer, self.session_present = reader, writer, present

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, clean: bool, proxy: bool = False) -> Conn:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        if proxy:
            local = writer.get_extra_info("sockname")
            writer.write(proxy_v2((local[0], local[1]), (host, port)))
        writer.write(enc_connect(client_id, version=4, clean=clean, keepalive=300))
        ptype, body = await asyncio.wait_for(read_packet(reader), CONNECT_TIMEOUT_S)
        if ptype != 2 or len(body) < 2 or body[1] != 0:
            writer.close()
            raise ConnectionError(f"{client_id}: no CONNACK accepted (type {ptype}, {body!r})")
        return cls(reader, writer, bool(body[0] & 1))

    async def subscribe(self, topic: str) -> None:
        self.writer.write(enc_subscribe(1, [(topic, 1)]))
        while (await asyncio.wait_for(read_packet(self.reader), CONNECT_TIMEOUT_S))[0] != 9:
            pass

    async def receive(self, count: int, timeout: float) -> int:
        """QoS 1 PUBLISHes received (each acknowledged) until `count` or `timeout`; how many."""
        got = 0
        end = time.monotonic() + timeout
        while got < count:
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                ptype, body = await asyncio.wait_for(read_packet(self.reader), left)
            except TimeoutError:
                break
            if ptype == 3:
                topic_len = struct.unpack(">H", body[:2])[0]
                if body and len(body) >= topic_len + 4:
                    packet_id = struct.unpack(">H", body[2 + topic_len:4 + topic_len])[0]
                    self.writer.write(enc_ack(4, packet_id))
                got += 1
        return got

    async def publish_all(self, topic: str, count: int, window: int = 20) -> None:
        """`count` QoS 1 PUBLISHes, at most `window` awaiting their PUBACK."""
        sent = acked = 0
        while acked < count:
            while sent < count and sent - acked < window:
                sent += 1
                self.writer.write(enc_publish(topic, b"x" * 64, qos=1, packet_id=(sent % 65535) + 1))
            ptype, _ = await asyncio.wait_for(read_packet(self.reader), CONNECT_TIMEOUT_S)
            if ptype == 4:
                acked += 1

    async def close(self, clean: bool = True) -> None:
        if clean:
            self.writer.write(enc_disconnect())
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


# -- figures -------------------------------------------------------------------------------------------------------
def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))] if ordered else float("nan")


def node_cpu(nodes: Sequence[ClusterNode]) -> float:
    return sum(cpu_seconds(n.pid) for n in nodes if n.pid is not None)


def moves(nodes: Sequence[ClusterNode]) -> int:
    """Sessions moved between nodes so far (handovers the new node asked for), summed over the nodes."""
    total = 0
    for node in nodes:
        values = {r["Metric"]: r["Value"] for r in node.api("metrics/show")}
        total += int(values.get("registration.handovers_requested", 0))
    return total


# -- (a) sticky reconnect vs takeover -------------------------------------------------------------------------------
async def takeover(nodes: list[ClusterNode], reconnects: int, queued: int) -> dict[str, list[tuple[float, float,
                                                                                                     float]]]:
    """mode -> [(ms to CONNACK, ms to the last queued message, node CPU ms)] per reconnect."""
    out: dict[str, list[tuple[float, float, float]]] = {"sticky": [], "takeover": []}
    tag = f"bench-rc-{os.getpid()}"
    client_id, topic = tag, f"bench/rc/{tag}"
    home = 0
    first = await Conn.open(nodes[home].host, nodes[home].mqtt_port, client_id, clean=False)
    await first.subscribe(topic)
    await first.close()
    publisher = await Conn.open(nodes[0].host, nodes[0].mqtt_port, f"{tag}-pub", clean=True)
    try:
        for i in range(2 * reconnects):
            mode = "sticky" if i % 2 == 0 else "takeover"
            target = home if mode == "sticky" else (home + 1 + (i // 2) % (len(nodes) - 1)) % len(nodes)
            await publisher.publish_all(topic, queued)
            await asyncio.sleep(0.3)  # the routed copies reach the session's queue
            node = nodes[target]
            cpu0, t0 = node_cpu(nodes), time.perf_counter()
            conn = await Conn.open(node.host, node.mqtt_port, client_id, clean=False)
            t1 = time.perf_counter()
            got = await conn.receive(queued, 60)
            t2 = time.perf_counter()
            await conn.close()
            await asyncio.sleep(0.2)  # the disconnect and the takeover's last writes are counted
            cpu = node_cpu(nodes) - cpu0
            if not conn.session_present or got < queued:
                print(f"!! {mode} reconnect {i}: session present {conn.session_present}, {got}/{queued} received")
            out[mode].append(((t1 - t0) * 1e3, (t2 - t0) * 1e3, cpu * 1e3))
            home = target
    finally:
        await publisher.close()
    return out


# -- (b) the reconnect storm ---------------------------------------------------------------------------------------
async def storm_once(balancer: Balancer, nodes: list[ClusterNode], clients: int, tag: str,
                     restart: ClusterNode) -> tuple[float, float, float, int, int]:
    """(s until all CONNACKed, s from the publish until all received, node CPU ms per client, sessions not
    present, sessions moved between nodes by the reconnect)."""
    host, port = balancer.host, balancer.port
    topic = f"bench/storm/{tag}"
    ids = [f"{tag}-{i}" for i in range(clients)]
    conns = await connect_all(host, port, ids, clean=False)
    await asyncio.gather(*(c.subscribe(topic) for c in conns))
    restart.stop()
    restart.start()
    deadline = time.monotonic() + 60
    while not cluster_ready(nodes) and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    balancer.wait_status(restart.short, up=True, deadline_s=30)
    await asyncio.gather(*(c.close(clean=False) for c in conns))
    await asyncio.sleep(1.0)  # the nodes notice the closed connections
    moved = moves(nodes)
    cpu0, t0 = node_cpu(nodes), time.perf_counter()
    conns = await connect_all(host, port, ids, clean=False)
    t1 = time.perf_counter()
    publisher = await Conn.open(host, port, f"{tag}-pub", clean=True)
    t_pub = time.perf_counter()
    await publisher.publish_all(topic, 1)
    counts = await asyncio.gather(*(c.receive(1, 60) for c in conns))
    t2 = time.perf_counter()
    cpu = node_cpu(nodes) - cpu0
    moved = moves(nodes) - moved
    missing = sum(1 for n in counts if n < 1)
    if missing:
        print(f"!! storm {tag}: {missing} clients did not receive the message")
    absent = sum(1 for c in conns if not c.session_present)
    await publisher.close()
    await asyncio.gather(*(c.close() for c in conns))
    return t1 - t0, t2 - t_pub, cpu * 1e3 / clients, absent, moved


async def connect_all(host: str, port: int, ids: list[str], clean: bool, parallel: int = 500) -> list[Conn]:
    """Every client connected, `parallel` connects in flight at most (a refused one is retried, bounded)."""
    gate = asyncio.Semaphore(parallel)

    async def one(cid: str) -> Conn:
        for attempt in range(20):
            async with gate:
                try:
                    return await Conn.open(host, port, cid, clean)
                except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                    if attempt == 19:
                        raise
            await asyncio.sleep(0.2)
        raise ConnectionError(cid)

    return list(await asyncio.gather(*(one(cid) for cid in ids)))


# -- (c) the PROXY header and HAProxy -------------------------------------------------------------------------------
async def connect_rate(host: str, port: int, total: int, proxy: bool, pid: int,
                       parallel: int = 50) -> tuple[float, float]:
    """(connects/s, node CPU us per connect) of `total` clean connects."""
    counter = iter(range(total))
    tag = f"bench-cr-{os.getpid()}-{int(proxy)}"

    async def worker() -> None:
        for i in counter:
            conn = await Conn.open(host, port, f"{tag}-{i}", clean=True, proxy=proxy)
            await conn.close()

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(parallel)))
    elapsed = time.perf_counter() - t0
    return total / elapsed, (cpu_seconds(pid) - cpu0) * 1e6 / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reconnects", type=int, default=20)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--storm", type=int, default=2000)
    parser.add_argument("--storm-rounds", type=int, default=3)
    parser.add_argument("--connects", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--only", default="a,b,c")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench-balancer-"))
    extra = {"log.console.level": "warning", "max_offline_messages": "10000", "max_online_messages": "10000"}
    nodes = start_cluster(tmp, extra)
    balancers: list[Balancer] = []
    try:
        for node in nodes:  # the listener HAProxy sends to (PROXY v2); the default one stays plain
            node.settings.update({"listener.tcp.balanced": f"{node.host}:{free_port(node.host)}",
                                  "listener.tcp.balanced.proxy_protocol": "on"})
            node.stop()
            node.start()
        deadline = time.monotonic() + 60
        while not cluster_ready(nodes) and time.monotonic() < deadline:
            time.sleep(0.3)
        servers = [Server(n.short, n.host, int(n.settings["listener.tcp.balanced"].rsplit(":", 1)[1]), n.http_port)
                   for n in nodes]
        print(f"# vmqpy behind HAProxy: 3 nodes, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        if "a" in parts:
            report_takeover(asyncio.run(takeover(nodes, args.reconnects, args.queued)), args)
        if "b" in parts:
            rows: dict[str, list[tuple[float, float, float, int, int]]] = {"sticky": [], "leastconn only": []}
            for sticky, name in ((True, "sticky"), (False, "leastconn only")):
                balancer = Balancer(tmp / f"haproxy-{name[0]}", servers, host=BALANCER_HOST, sticky=sticky).start()
                balancers.append(balancer)
                for r in range(args.storm_rounds):
                    tag = f"storm{int(sticky)}{r}x{os.getpid()}"
                    rows[name].append(asyncio.run(storm_once(balancer, nodes, args.storm, tag, nodes[r % 3])))
                balancer.stop()
            report_storm(rows, args)
        if "c" in parts:
            report_proxy(nodes[0], servers[0], tmp, args, balancers)
    finally:
        for balancer in balancers:
            balancer.stop()
        for node in nodes:
            node.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def report_takeover(rows: dict[str, list[tuple[float, float, float]]], args: argparse.Namespace) -> None:
    print(f"## (a) reconnect of a persistent client with {args.queued} queued QoS 1 messages, "
          f"{args.reconnects} reconnects each\n")
    print("| reconnect to | CONNACK p50 ms | p99 ms | last queued message p50 ms | p99 ms | node CPU ms / reconnect |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, values in rows.items():
        ack = [v[0] for v in values]
        done = [v[1] for v in values]
        cpu = statistics.median(v[2] for v in values)
        print(f"| {mode} | {pct(ack, .5):.1f} | {pct(ack, .99):.1f} | {pct(done, .5):.1f} | {pct(done, .99):.1f} "
              f"| {cpu:.1f} |")
    print()


def report_storm(rows: dict[str, list[tuple[float, float, float, int, int]]], args: argparse.Namespace) -> None:
    print(f"## (b) reconnect storm: {args.storm} persistent clients through HAProxy after a node restart, "
          f"medians of {args.storm_rounds} rounds\n")
    print("| HAProxy | all CONNACKed s | one message to all s | node CPU ms / client | sessions moved "
          "| sessions not present |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):.2f} | "
              f"{statistics.median(v[1] for v in values):.2f} | {statistics.median(v[2] for v in values):.2f} | "
              f"{statistics.median(v[4] for v in values):.0f} | {max(v[3] for v in values)} |")
    print()


def report_proxy(node: ClusterNode, server: Server, tmp: Path, args: argparse.Namespace,
                 balancers: list[Balancer]) -> None:
    assert node.pid is not None
    only = Balancer(tmp / "haproxy-one", [server], host=BALANCER_HOST).start()
    balancers.append(only)
    rates: dict[str, list[tuple[float, float]]] = {"proxy_protocol off": [], "proxy_protocol on": []}
    msgs: dict[str, list[tuple[float, float]]] = {"direct": [], "through HAProxy": []}
    scenario = Scenario("qos1-pairs10", "pairs", 10, 1)

    def probe() -> float:
        return cpu_seconds(node.pid or 0)

    for _ in range(args.rounds):
        for proxy, name in ((False, "proxy_protocol off"), (True, "proxy_protocol on")):
            port = server.mqtt_port if proxy else node.mqtt_port
            rates[name].append(asyncio.run(connect_rate(node.host, port, args.connects, proxy, node.pid)))
        for name, (host, port) in (("direct", (node.host, node.mqtt_port)),
                                   ("through HAProxy", (only.host, only.port))):
            cpu0 = probe()
            result = run(host, port, scenario, duration=args.duration)
            used = probe() - cpu0
            delivered = result.delivered_total or 1
            msgs[name].append((result.rate, used * 1e6 / delivered))
            if result.acked_lost:
                print(f"!! {result.acked_lost} acknowledged messages lost ({name})")
    only.stop()
    print(f"## (c) the PROXY header and HAProxy, one node, medians of {args.rounds} rounds\n")
    print(f"| connects ({args.connects}, 50 at a time, straight to the node) | connects/s | node CPU us / connect |")
    print("|---|---:|---:|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):,.0f} | "
              f"{statistics.median(v[1] for v in values):.0f} |")
    print()
    print(f"| 10 QoS 1 pairs, {args.duration:g} s | delivered msg/s | node CPU us / delivered message |")
    print("|---|---:|---:|")
    for name, values in msgs.items():
        print(f"| {name} | {statistics.median(v[0] for v in values):,.0f} | "
              f"{statistics.median(v[1] for v in values):.0f} |")
    print()


if __name__ == "__main__":
    main()
