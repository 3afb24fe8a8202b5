"""What a SUBACK acknowledged by the whole cluster costs: `subscription.acknowledge = cluster` against `local`.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_suback [--quick] [--rounds 3] [--out FILE]

Every round starts, for each setting in turn (the order alternating between rounds), a fresh three-node cluster
on 127.0.0.51-53 (chaos.node processes joined with the real `vmq-admin cluster join`; the test suite uses
127.0.0.11-49), every node with the same `subscription.acknowledge` (the environment form of the key is
VMQPY_SUBSCRIPTION__ACKNOWLEDGE) and `subscription.acknowledge_timeout` (`--ack-timeout`, 5 s). MQTT 3.1.1
clients on asyncio, QoS 1 filters, then:

1. idle: one client on node 1 sends `--latency-n` SUBSCRIBEs of one new filter each, one at a time (the next
   when the SUBACK of the one before has arrived), after 20 unmeasured ones: SUBSCRIBE-to-SUBACK p50 and p99.
2. loaded: the same while a load process (an interpreter of its own) publishes QoS 0 64-byte messages at
   `--load-rate` msgs/s in total, half from a client on node 2 to a subscriber on node 3 and half from a client
   on node 3 to a subscriber on node 1 (every message crosses one cluster link), timed from `--warmup` seconds
   after the load started. Reported with it: the load's delivered msgs/s while the SUBSCRIBEs ran, and the
   nodes' CPU share under the load alone (over the warmup, before the SUBSCRIBEs).
3. rate: the same client subscribes to `--filters` new filters in SUBSCRIBEs of `--per-packet` filters each,
   pipelined: `--window` SUBSCRIBEs awaiting their SUBACK at most. Filters/s from the first SUBSCRIBE to the
   last SUBACK, and the CPU of the three node processes (utime + stime of /proc/PID/stat) per filter over the
   same time, their CPU at rest (measured over `--rest` seconds just before) subtracted. Then clients on node 2
   and node 3 publish to the last filter's topic every 10 ms, the first one as soon as its SUBACK has arrived,
   until the client on node 1 got one from each: whether that first publish arrived (the node already routed by
   the filter) and when the first one arrived; and the CPU per filter again, up to 1 s after that ("with tail":
   what the other nodes still did after the last SUBACK).

A SUBACK that waited out the timeout shows twice: as a single SUBSCRIBE of phase 1 or 2 that took at least 0.9 x
the timeout, and in the nodes' counters `vmqpy_subscription_acks_waited` and `vmqpy_subscription_acks_late`
(GET /metrics of every node at the end of the round, summed). `--vmqpy-rev REV` runs the nodes from
`git archive REV` instead of the working tree (shared with other engineers).

Medians of the rounds. A table on stdout, every figure of every round in JSON (`--out`, bench/results/suback.json).
Every node and the load process are stopped by their PID; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, cast

from bench.brokers import REPO, cpu_seconds, export_revision
from bench.curves_common import DISCONNECT, connect_frame, publish_frame, subscribe_frame, write_json
from bench.mqtt_raw import split_packets
from bench.suite_report import machine
from chaos.cluster import Cluster
from chaos.node import Node
from chaos.ports import free_port, host_of, port_open

BASE = "127.0.0.51"  # node i on 127.0.0.(50 + i)
SETTINGS = ("cluster", "local")
CONNACK, PUBLISH, SUBACK = 2, 3, 9
CLOSED = 0  # the packet type queued when the connection is lost
OUT = REPO / "bench" / "results" / "suback.json"
PAYLOAD = bytes(64)
WARM_UP_SUBSCRIBES = 20
PROBE_INTERVAL_S = 0.01
PROBE_LIMIT_S = 30.0
TAIL_S = 1.0
PHASE_LIMIT_S = 600.0  # the longest any phase of a round may take
JOIN_DEADLINE_S = 60.0
ACK_METRICS = ("vmqpy_subscription_acks_waited", "vmqpy_subscription_acks_late")


class BenchError(Exception):
    """A node, a client or the load process failed, or a wait ran out."""


@dataclass(frozen=True)
class Params:
    rounds: int
    latency_n: int
    filters: int
    per_packet: int
    window: int
    load_rate: float
    warmup: float
    rest: float
    ack_timeout: float


# ----------------------------------------------------------------------------- a minimal MQTT 3.1.1 client

class Conn(asyncio.Protocol):
    """One MQTT 3.1.1 connection. Each packet goes to `packets` as (type, body, time.perf_counter() of its
    arrival); with `count_only` a PUBLISH is only counted (`publishes`)."""

    def __init__(self, client_id: str, count_only: bool = False) -> None:
        self.client_id = client_id
        self.count_only = count_only
        self.packets: asyncio.Queue[tuple[int, bytes, float]] = asyncio.Queue()
        self.publishes = 0
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(connect_frame(self.client_id, True))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.buffer += data
        try:
            packets = split_packets(self.buffer)
        except ValueError:
            assert self.transport is not None
            self.transport.close()
            return
        for first, body in packets:
            kind = first >> 4
            if kind == PUBLISH:
                self.publishes += 1
                if self.count_only:
                    continue
            self.packets.put_nowait((kind, body, now))

    def connection_lost(self, exc: Exception | None) -> None:
        self.packets.put_nowait((CLOSED, b"", time.perf_counter()))

    def send(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise BenchError(f"{self.client_id}: not connected")
        self.transport.write(data)

    async def next(self, timeout: float) -> tuple[int, bytes, float]:
        """The next packet; BenchError when the connection closed, TimeoutError after `timeout` seconds."""
        kind, body, at = await asyncio.wait_for(self.packets.get(), timeout)
        if kind == CLOSED:
            self.packets.put_nowait((kind, body, at))  # every later wait fails too
            raise BenchError(f"{self.client_id}: the broker closed the connection")
        return kind, body, at

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(DISCONNECT)
            self.transport.close()


async def open_conn(host: str, port: int, client_id: str, timeout: float = 30.0, count_only: bool = False) -> Conn:
    """Connect and wait for a successful CONNACK."""
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(loop.create_connection(lambda: Conn(client_id, count_only), host, port),
                                     timeout)
    kind, body, _ = await conn.next(timeout)
    if kind != CONNACK or len(body) != 2 or body[1] != 0:
        conn.close()
        raise BenchError(f"{client_id}: no CONNACK 0 from {host}:{port} ({kind} {body.hex()})")
    return conn


async def wait_suback(conn: Conn, expected: dict[int, int], timeout: float) -> tuple[int, float]:
    """(packet id, arrival) of the next SUBACK, one of `expected` (packet id -> filters); other packets are
    skipped. BenchError if a filter was refused or the SUBACK is not one we wait for."""
    end = time.monotonic() + timeout
    while True:
        try:
            kind, body, at = await conn.next(max(0.0, end - time.monotonic()))
        except TimeoutError:
            raise BenchError(f"{conn.client_id}: no SUBACK within {timeout:g} s") from None
        if kind != SUBACK:
            continue
        packet_id = int.from_bytes(body[:2], "big")
        if expected.get(packet_id) != len(body) - 2 or 0x80 in body[2:]:
            raise BenchError(f"{conn.client_id}: unexpected or refused SUBACK {body[:8].hex()}...")
        return packet_id, at


# ----------------------------------------------------------------------------- the measured phases

async def suback_latencies(conn: Conn, prefix: str, count: int, timeout: float) -> list[float]:
    """SUBSCRIBE-to-SUBACK milliseconds of `count` SUBSCRIBEs of one new filter each, one at a time."""
    out: list[float] = []
    end = time.monotonic() + PHASE_LIMIT_S
    for i in range(count):
        if time.monotonic() > end:
            raise BenchError(f"{count} single SUBSCRIBEs took more than {PHASE_LIMIT_S:g} s")
        packet_id = i % 65535 + 1
        sent = time.perf_counter()
        conn.send(subscribe_frame(packet_id, [f"{prefix}/{i}"], 1))
        _, at = await wait_suback(conn, {packet_id: 1}, timeout)
        out.append((at - sent) * 1000)
    return out


@dataclass
class Bulk:
    seconds: float  # first SUBSCRIBE to last SUBACK
    cpu: float  # CPU seconds of the nodes over the same time
    packet_ms: list[float]  # SUBSCRIBE-to-SUBACK of each packet


async def subscribe_bulk(conn: Conn, prefix: str, total: int, per_packet: int, window: int, timeout: float,
                         cpu: Callable[[], float]) -> Bulk:
    """Subscribe to `total` new filters `prefix/i` in SUBSCRIBEs of `per_packet`, `window` awaiting a SUBACK."""
    packets = [[f"{prefix}/{i}" for i in range(start, min(total, start + per_packet))]
               for start in range(0, total, per_packet)]
    if len(packets) > 65535:
        raise BenchError("more SUBSCRIBEs than packet ids")
    in_flight: dict[int, tuple[float, int]] = {}  # packet id -> (sent, filters)
    latencies: list[float] = []
    sent_packets = 0
    end = time.monotonic() + PHASE_LIMIT_S
    cpu_start = cpu()
    first = time.perf_counter()
    last = first

    def send_next() -> None:
        nonlocal sent_packets
        filters = packets[sent_packets]
        sent_packets += 1
        in_flight[sent_packets] = (time.perf_counter(), len(filters))
        conn.send(subscribe_frame(sent_packets, filters, 1))

    while sent_packets < len(packets) and len(in_flight) < window:
        send_next()
    while in_flight:
        if time.monotonic() > end:
            raise BenchError(f"{total} filters took more than {PHASE_LIMIT_S:g} s")
        packet_id, last = await wait_suback(conn, {k: v[1] for k, v in in_flight.items()}, timeout)
        latencies.append((last - in_flight.pop(packet_id)[0]) * 1000)
        if sent_packets < len(packets):
            send_next()
    return Bulk(last - first, cpu() - cpu_start, latencies)


async def probe_routes(sub: Conn, probers: dict[str, Conn], topic: str) -> dict[str, dict[str, float | None]]:
    """From now, every PROBE_INTERVAL_S, each of `probers` publishes (QoS 0) to `topic` until `sub` (subscribed
    to it) has one from each: per prober, the number of the first that arrived (0: the one sent at once) and the
    milliseconds from now until it arrived (None: none within PROBE_LIMIT_S)."""
    start = time.perf_counter()
    found: dict[str, dict[str, float | None]] = {}
    seq = 0
    while len(found) < len(probers) and time.perf_counter() - start < PROBE_LIMIT_S:
        for name, conn in probers.items():
            if name not in found:
                conn.send(publish_frame(topic, f"{name}:{seq}".encode()))
        seq += 1
        tick_end = time.perf_counter() + PROBE_INTERVAL_S
        while (left := tick_end - time.perf_counter()) > 0:
            try:
                kind, body, at = await sub.next(left)
            except TimeoutError:
                break
            if kind != PUBLISH:
                continue
            topic_len = int.from_bytes(body[:2], "big")
            name, _, number = body[2 + topic_len:].decode().partition(":")
            if name in probers and name not in found:
                found[name] = {"first_seq": int(number), "ms": (at - start) * 1000}
    return {name: found.get(name, {"first_seq": None, "ms": None}) for name in probers}


# ----------------------------------------------------------------------------- the background load

@dataclass(frozen=True)
class LoadSpec:
    flows: tuple[tuple[tuple[str, int], tuple[str, int]], ...]  # (publisher's node, subscriber's node) (host, port)
    rate: float  # msgs/s published in total, split evenly over the flows
    limit_s: float  # the longest the load runs if nobody stops it


def load_main(spec: LoadSpec, pipe: Connection) -> None:
    """The load process: answers "mark" with ("mark", time, published, delivered) and "stop" with ("done", ...)."""
    asyncio.run(_load(spec, pipe))


async def _load(spec: LoadSpec, pipe: Connection) -> None:
    subs, pubs = [], []
    for i, ((pub_host, pub_port), (sub_host, sub_port)) in enumerate(spec.flows):
        sub = await open_conn(sub_host, sub_port, f"load-sub-{i}", count_only=True)
        sub.send(subscribe_frame(1, [f"load/f{i}"], 0))
        await wait_suback(sub, {1: 1}, 30.0)
        subs.append(sub)
        pubs.append(await open_conn(pub_host, pub_port, f"load-pub-{i}"))
    frames = [publish_frame(f"load/f{i}", PAYLOAD) for i in range(len(pubs))]
    per_flow = spec.rate / len(pubs)
    pipe.send(("ready",))
    start = time.monotonic()
    sent = 0  # per flow
    while time.monotonic() - start < spec.limit_s:
        due = int((time.monotonic() - start) * per_flow)
        if due > sent:
            burst = min(due - sent, 1000)
            for pub, frame in zip(pubs, frames, strict=True):
                pub.send(frame * burst)
            sent += burst
        if pipe.poll():
            if pipe.recv() == "stop":
                break
            pipe.send(("mark", time.monotonic(), sent * len(pubs), sum(s.publishes for s in subs)))
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.5)  # the messages on their way
    pipe.send(("done", time.monotonic() - start, sent * len(pubs), sum(s.publishes for s in subs),
               time.process_time()))
    for conn in subs + pubs:
        conn.close()


class LoadProcess:
    """The load in its own interpreter (multiprocessing, spawn); `close` stops it by its PID."""

    def __init__(self, spec: LoadSpec) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.proc: BaseProcess = context.Process(target=load_main, args=(spec, child), name="bench-suback-load")
        self.proc.start()
        child.close()

    def receive(self, timeout: float) -> tuple[Any, ...]:
        try:
            if self.pipe.poll(timeout):
                return cast(tuple[Any, ...], self.pipe.recv())
        except (EOFError, OSError):
            pass
        raise BenchError(f"the load process did not answer within {timeout:g} s (exit code {self.proc.exitcode})")

    def mark(self) -> tuple[float, int, int]:
        """(time, messages published, messages delivered) so far."""
        self.pipe.send("mark")
        _, at, published, delivered = self.receive(10.0)
        return at, published, delivered

    def stop(self) -> tuple[Any, ...]:
        self.pipe.send("stop")
        return self.receive(30.0)

    def close(self) -> None:
        self.proc.join(10.0)
        if self.proc.is_alive():
            self.proc.terminate()  # SIGTERM to its PID
            self.proc.join(5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self.pipe.close()


# ----------------------------------------------------------------------------- one cluster, one setting

def start_cluster(workdir: Path, setting: str, params: Params, source: Path) -> Cluster:
    """Three nodes on 127.0.0.51-53 with `subscription.acknowledge = setting`, joined and ready."""
    keys = {"subscription.acknowledge": setting, "subscription.acknowledge_timeout": f"{params.ack_timeout:g}s",
            "distributed_cookie": "bench-suback", "systree_enabled": "off", "log.console.level": "warning"}
    nodes = []
    for i in range(3):
        host = host_of(BASE, i)
        nodes.append(Node(i, host, free_port(host), free_port(host), free_port(host), workdir / f"n{i + 1}",
                          dict(keys), source=source))
    cluster = Cluster(nodes)
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            starts = [pool.submit(node.start) for node in nodes]
        for start in starts:
            start.result()
        cluster.join(JOIN_DEADLINE_S)
        end = time.monotonic() + 30.0
        while not all(port_open(node.host, node.mqtt_port) for node in nodes):
            if time.monotonic() > end:
                raise BenchError("an MQTT listener did not open within 30 s")
            time.sleep(0.1)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def ack_counters(node: Node) -> dict[str, float] | None:
    """The node's counters of SUBACKs that waited for the cluster and of those sent late (after the timeout),
    from GET /metrics (a counter never incremented is not exported: 0); None if the node does not answer."""
    try:
        request = urllib.request.Request(f"{node.url}/metrics", headers={"x-api-key": node.api_key()})
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
    except (OSError, ValueError):
        return None
    found = dict.fromkeys(ACK_METRICS, 0.0)
    for line in text.splitlines():
        sample, _, value = line.partition(" ")
        name = sample.split("{")[0].removesuffix("_total")  # a counter's sample is NAME_total
        if name in ACK_METRICS and value:
            found[name] += float(value.split()[0])
    return found


def percentiles(values: Sequence[float], timeout: float) -> dict[str, float]:
    ordered = sorted(values)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    waited = sum(1 for v in values if v >= 0.9 * timeout * 1000)
    return {"n": len(values), "p50": at(50), "p99": at(99), "max": ordered[-1], "waited_timeout": waited}


async def measure(nodes: list[Node], params: Params) -> dict[str, Any]:
    """The three phases against a running cluster: its figures."""
    n1, n2, n3 = nodes
    pids = [node.pid for node in nodes]

    def cpu() -> float:
        if None in pids or any(node.pid is None for node in nodes):
            raise BenchError("a node exited")
        return sum(cpu_seconds(cast(int, pid)) for pid in pids)

    timeout = params.ack_timeout + 10.0
    sub = await open_conn(n1.host, n1.mqtt_port, "suback-client")
    probers = {"n2": await open_conn(n2.host, n2.mqtt_port, "probe-n2"),
               "n3": await open_conn(n3.host, n3.mqtt_port, "probe-n3")}
    try:
        await suback_latencies(sub, "warm", WARM_UP_SUBSCRIBES, timeout)
        idle = await suback_latencies(sub, "idle", params.latency_n, timeout)

        # publisher on node 2 -> subscriber on node 3, publisher on node 3 -> subscriber on node 1: every
        # message crosses a cluster link once, node 1's links carry the load as well as the acknowledgements
        spec = LoadSpec((((n2.host, n2.mqtt_port), (n3.host, n3.mqtt_port)),
                         ((n3.host, n3.mqtt_port), (n1.host, n1.mqtt_port))), params.load_rate, PHASE_LIMIT_S)
        load = LoadProcess(spec)
        try:
            load.receive(60.0)  # ready
            await asyncio.sleep(0.5)
            marks, cpus = [load.mark()], [cpu()]
            await asyncio.sleep(params.warmup)  # the load alone
            marks.append(load.mark())
            cpus.append(cpu())
            loaded = await suback_latencies(sub, "loaded", params.latency_n, timeout)
            cpus.append(cpu())
            marks.append(load.mark())
            done = load.stop()
        finally:
            load.close()

        def over(i: int) -> dict[str, float]:
            """The load's figures between marks i and i + 1."""
            (t0, published0, delivered0), (t1, published1, delivered1) = marks[i], marks[i + 1]
            return {"window_s": t1 - t0, "published_per_s": (published1 - published0) / (t1 - t0),
                    "delivered_per_s": (delivered1 - delivered0) / (t1 - t0),
                    "node_cpu_share": (cpus[i + 1] - cpus[i]) / (t1 - t0)}

        load_figures = {"alone": over(0), "while_subscribing": over(1), "target_per_s": params.load_rate,
                        "published": done[2], "delivered": done[3], "load_process_cpu_share": done[4] / done[1]}

        await asyncio.sleep(1.0)  # the load's last messages
        rest_start, rest_cpu = time.monotonic(), cpu()
        await asyncio.sleep(params.rest)
        rest_share = (cpu() - rest_cpu) / (time.monotonic() - rest_start)
        started = time.monotonic()
        cpu_before = cpu()
        bulk = await subscribe_bulk(sub, "rate", params.filters, params.per_packet, params.window, timeout, cpu)
        probes = await probe_routes(sub, probers, f"rate/{params.filters - 1}")
        await asyncio.sleep(TAIL_S)
        tail_seconds, tail_cpu = time.monotonic() - started, cpu() - cpu_before
    finally:
        for conn in (sub, *probers.values()):
            conn.close()
    rate = {"filters": params.filters, "seconds": bulk.seconds, "filters_per_s": params.filters / bulk.seconds,
            "cpu_us_per_filter": (bulk.cpu - rest_share * bulk.seconds) / params.filters * 1e6,
            "cpu_us_per_filter_tail": (tail_cpu - rest_share * tail_seconds) / params.filters * 1e6,
            "cpu_s": bulk.cpu, "tail_cpu_s": tail_cpu, "tail_s": tail_seconds, "rest_cpu_share": rest_share,
            "packets": percentiles(bulk.packet_ms, params.ack_timeout)}
    return {"idle_ms": percentiles(idle, params.ack_timeout), "loaded_ms": percentiles(loaded, params.ack_timeout),
            "load": load_figures, "rate": rate, "probes": probes,
            "ack_counters": {node.short: ack_counters(node) for node in nodes}}


def one_round(setting: str, round_no: int, params: Params, source: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-suback-{setting}-"))
    cluster: Cluster | None = None
    try:
        cluster = start_cluster(workdir, setting, params, source)
        figures = asyncio.run(measure(cluster.nodes, params))
        return {"round": round_no, "setting": setting, **figures}
    except BaseException:
        for node in cluster.nodes if cluster is not None else []:
            print(f"--- {node.name} log tail:\n{node.log_tail(15)}", file=sys.stderr)
        raise
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# ----------------------------------------------------------------------------- summary

def counter_sum(rounds: list[dict[str, Any]], name: str) -> int | None:
    """The nodes' counter `name` summed over the nodes and rounds (None if no node had it)."""
    values = [c[name] for r in rounds for c in r["ack_counters"].values() if c is not None and name in c]
    return int(sum(values)) if values else None


def summarise(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per setting: the medians of the rounds' figures; counts of SUBACKs that waited the timeout and of rounds
    whose first probe arrived."""
    out: dict[str, dict[str, Any]] = {}
    for setting in SETTINGS:
        mine = [r for r in rounds if r["setting"] == setting]
        if not mine:
            continue

        def med(*path: str, rows: list[dict[str, Any]] = mine) -> float:
            values = []
            for r in rows:
                value: Any = r
                for key in path:
                    value = value[key]
                values.append(value)
            return float(statistics.median(values))

        out[setting] = {
            "rounds": len(mine),
            "idle_p50_ms": med("idle_ms", "p50"), "idle_p99_ms": med("idle_ms", "p99"),
            "loaded_p50_ms": med("loaded_ms", "p50"), "loaded_p99_ms": med("loaded_ms", "p99"),
            "load_delivered_per_s": med("load", "while_subscribing", "delivered_per_s"),
            "load_node_cpu_share": med("load", "alone", "node_cpu_share"),
            "filters_per_s": med("rate", "filters_per_s"), "cpu_us_per_filter": med("rate", "cpu_us_per_filter"),
            "cpu_us_per_filter_tail": med("rate", "cpu_us_per_filter_tail"),
            "waited_timeout": sum(r[k]["waited_timeout"] for r in mine for k in ("idle_ms", "loaded_ms")),
            "acks_waited": counter_sum(mine, "vmqpy_subscription_acks_waited"),
            "acks_late": counter_sum(mine, "vmqpy_subscription_acks_late"),
            "first_probe_routed": {n: sum(1 for r in mine if r["probes"][n]["first_seq"] == 0) for n in ("n2", "n3")},
        }
    return out


def table(summary: dict[str, dict[str, Any]], params: Params) -> str:
    head = (f"| subscription.acknowledge | idle SUBACK p50 / p99 ms | loaded SUBACK p50 / p99 ms | load delivered "
            f"msgs/s (nodes' CPU, load alone) | {params.filters:,} filters: filters/s | CPU us/filter to last SUBACK | "
            f"CPU us/filter with tail | first probe routed n2 / n3 | "
            f"single SUBACKs >= {0.9 * params.ack_timeout:g} s | SUBACKs waited / late (nodes' counters) |")
    lines = [head, "|---|---|---|---|---:|---:|---:|---|---:|---|"]
    for setting, s in summary.items():
        probes = s["first_probe_routed"]
        counters = " / ".join("-" if s[k] is None else f"{s[k]:,}" for k in ("acks_waited", "acks_late"))
        lines.append(
            f"| {setting} | {s['idle_p50_ms']:.2f} / {s['idle_p99_ms']:.2f} | {s['loaded_p50_ms']:.2f} / "
            f"{s['loaded_p99_ms']:.2f} | {s['load_delivered_per_s']:,.0f} ({s['load_node_cpu_share']:.0%} of a core) | "
            f"{s['filters_per_s']:,.0f} | {s['cpu_us_per_filter']:.0f} | {s['cpu_us_per_filter_tail']:.0f} | "
            f"{probes['n2']}/{s['rounds']} / {probes['n3']}/{s['rounds']} | {s['waited_timeout']} | "
            f"{counters} |")
    return "\n".join(lines)


def round_lines(rounds: list[dict[str, Any]]) -> str:
    """One line of figures per round and setting."""
    lines = []
    for r in rounds:
        idle, loaded, load, rate = r["idle_ms"], r["loaded_ms"], r["load"], r["rate"]
        probes = ", ".join(f"{n} first #{p['first_seq']} at {p['ms']:.1f} ms" if p["ms"] is not None else f"{n} none"
                           for n, p in r["probes"].items())
        lines.append(
            f"round {r['round']} {r['setting']}: idle {idle['p50']:.2f}/{idle['p99']:.2f}/{idle['max']:.1f} ms, "
            f"loaded {loaded['p50']:.2f}/{loaded['p99']:.2f}/{loaded['max']:.1f} ms (p50/p99/max), "
            f"load {load['while_subscribing']['delivered_per_s']:,.0f} delivered/s (alone "
            f"{load['alone']['delivered_per_s']:,.0f}/s, {load['alone']['node_cpu_share']:.0%} of a core), "
            f"{rate['filters_per_s']:,.0f} filters/s, {rate['cpu_us_per_filter']:.0f} / "
            f"{rate['cpu_us_per_filter_tail']:.0f} us/filter (rest {rate['rest_cpu_share']:.1%}), "
            f"SUBSCRIBE->SUBACK p50/p99 {rate['packets']['p50']:.1f}/{rate['packets']['p99']:.1f} ms; "
            f"probes: {probes}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 round, 100 SUBSCRIBEs, 2,000 filters")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of each setting (3; quick 1)")
    parser.add_argument("--latency-n", type=int, default=None, help="SUBSCRIBEs timed per phase (500; quick 100)")
    parser.add_argument("--filters", type=int, default=None, help="filters of the rate phase (10,000; quick 2,000)")
    parser.add_argument("--per-packet", type=int, default=100, help="filters per SUBSCRIBE in the rate phase")
    parser.add_argument("--window", type=int, default=10, help="SUBSCRIBEs awaiting a SUBACK in the rate phase")
    parser.add_argument("--load-rate", type=float, default=2000.0, help="QoS 0 msgs/s published by the load")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of load before timing (2; quick 1)")
    parser.add_argument("--rest", type=float, default=None, help="seconds of CPU at rest measured (3; quick 1)")
    parser.add_argument("--ack-timeout", type=float, default=5.0, help="subscription.acknowledge_timeout, seconds")
    parser.add_argument("--vmqpy-rev", default=None, help="run the nodes from this commit (git archive)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    quick = args.quick
    params = Params(
        rounds=args.rounds or (1 if quick else 3), latency_n=args.latency_n or (100 if quick else 500),
        filters=args.filters or (2000 if quick else 10000), per_packet=args.per_packet, window=args.window,
        load_rate=args.load_rate, warmup=args.warmup if args.warmup is not None else (1.0 if quick else 2.0),
        rest=args.rest if args.rest is not None else (1.0 if quick else 3.0), ack_timeout=args.ack_timeout)
    started = datetime.now(UTC)
    meta = machine(REPO)
    export_dir: Path | None = None
    source, vmqpy = REPO, f"working tree at {meta['git_commit'][:12]} (uncommitted changes: {meta['git_dirty']})"
    try:
        if args.vmqpy_rev:
            export_dir = Path(tempfile.mkdtemp(prefix="bench-suback-src-"))
            commit = export_revision(args.vmqpy_rev, export_dir)
            source, vmqpy = export_dir, f"git {args.vmqpy_rev} = {commit[:12]} (exported with git archive)"
        if '"subscription.acknowledge"' not in (source / "vmqpy" / "config_schema.py").read_text():
            raise SystemExit(f"{vmqpy}: this vmqpy does not know subscription.acknowledge")
        rounds: list[dict[str, Any]] = []
        for round_no in range(1, params.rounds + 1):
            order = SETTINGS if round_no % 2 else tuple(reversed(SETTINGS))
            for setting in order:
                print(f"round {round_no}: subscription.acknowledge = {setting}", flush=True)
                rounds.append(one_round(setting, round_no, params, source))
    finally:
        if export_dir is not None:
            shutil.rmtree(export_dir, ignore_errors=True)
    summary = summarise(rounds)
    loadavg_end = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"\n# SUBACK latency and subscribe rate, three-node cluster on 127.0.0.51-53, vmqpy {vmqpy}\n"
          f"load average at start {meta['loadavg']}, at end {loadavg_end}; medians of {params.rounds} round(s) per "
          f"setting, alternating; {params.latency_n} single SUBSCRIBEs per latency phase; load {params.load_rate:,.0f} "
          f"QoS 0 msgs/s (node 2 -> node 3, node 3 -> node 1); {params.filters:,} filters in "
          f"SUBSCRIBEs of {params.per_packet}, {params.window} in flight; subscription.acknowledge_timeout "
          f"{params.ack_timeout:g} s\n")
    print(table(summary, params))
    print()
    print(round_lines(rounds))
    write_json(args.out, {"command": " ".join([Path(sys.executable).name, "-m", "bench.bench_suback", *sys.argv[1:]]),
                          "started": started.isoformat(timespec="seconds"), "machine": meta,
                          "loadavg_end": loadavg_end, "vmqpy": vmqpy, "params": asdict(params), "summary": summary,
                          "rounds": rounds})
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
