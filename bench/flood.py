"""Slow-loris and connection-flood resistance of one vmqpy node (issue 15), measured from outside.

    .venv/bin/python -m bench.flood --mode slowloris|flood|both --seconds S [options]

For each attack: start a fresh node (bench.brokers, on a free port of 127.0.0.1), connect a well-behaved QoS 1
publisher and subscriber (MQTT 3.1.1, vmqpy's codec over asyncio streams), measure publish->receive round trips
without attack, then again while an attacker process (this module with `--attacker`, so that its sockets do not
count against our descriptor limit) holds its sockets open for S seconds:

* slowloris: `--connections` sockets (2,000) that each send one byte a second of a CONNECT that never completes;
* flood: `--connections` sockets (10,000) that connect and never send anything.

A socket the node closes is opened again after `--reopen-delay` seconds, so the pressure lasts the whole window.
Reported: the round trips' p50/p99 with and without the attack, the node's RSS before, at its peak during and
after (and per attack socket held), its CPU during the window, how many attack sockets the node closed and how
long after they were opened, and when the slowest 2 % of the round trips during the attack happened next to what
the attacker was doing then (opens, closes by the node, bytes written: bench.flood_timeline), the 20 slowest
listed. `--max-connections N` sets `listener.max_connections` (the probe clients connect
before the attack, so they hold two of the places); `--connect-timeout T` sets `mqtt.connect_timeout`.
`--source DIR` runs the node from another tree of vmqpy (`--revision REV`: a committed one, exported with
bench.brokers.export_revision), to measure before and after a change in one session. `--attacker-cpus 1`
`--node-cpus 0` pin the attacker to its own CPUs and the node (every thread) and the probe to theirs
(`os.sched_setaffinity`), as when the attacker is on another machine: on loopback the attacker's sends and the
kernel's TCP work for its segments otherwise share the node's cores.
Both processes raise RLIMIT_NOFILE to its hard limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.brokers import HOST, BrokerProcess, cpu_seconds, export_revision
from bench.flood_timeline import LOOK_BACK, EventBins, causes, explain
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connack, Connect, Puback, Publish, Suback, SubOptions, Subscribe, Subscription

ROUND_TRIP_TIMEOUT = 10.0  # seconds; a round trip slower than this counts as failed
CONNECT_CONCURRENCY = 256  # attack connects in flight at once (the node's accept backlog is 1024)
ATTACK_READY_TIMEOUT = 120.0  # seconds the attacker may take to open its sockets
SLOW_SHOWN = 20  # slowest round trips of the attack window printed with the attacker's events around them


def cpu_set(text: str | None) -> set[int] | None:
    """`--node-cpus`/`--attacker-cpus`: "0" or "0,2" -> {0} or {0, 2}; None when not given."""
    if not text:
        return None
    try:
        cpus = {int(part) for part in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of CPU numbers: {text!r}") from None
    if not cpus or min(cpus) < 0:
        raise argparse.ArgumentTypeError(f"not a list of CPU numbers: {text!r}")
    return cpus


def pin(pid: int, cpus: set[int] | None) -> None:
    """Pin every thread of process `pid` (0: this one) to `cpus`; nothing when None."""
    if cpus is None:
        return
    tasks = Path(f"/proc/{pid or 'self'}/task")
    for task in tasks.iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cpus)


def raise_fd_limit() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to the hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


# ------------------------------------------------------------------------------------------------ the attacker


@dataclass
class AttackTally:
    opened: int = 0
    connect_errors: int = 0
    closed_by_node: int = 0
    close_after: list[float] = field(default_factory=list)  # seconds from open to the node's close
    open_now: int = 0
    most_open: int = 0
    bytes_sent: int = 0
    events: EventBins = field(default_factory=EventBins)  # opens, closes by the node, bytes written


class AttackSocket(asyncio.Protocol):
    """One attack socket: records when the node closes it."""

    def __init__(self, tally: AttackTally, done: asyncio.Future[None]) -> None:
        self.tally = tally
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.opened_at = 0.0
        self.sent = 0
        self.ours = False  # closed by us (end of the attack)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.opened_at = time.monotonic()
        self.tally.opened += 1
        self.tally.events.record("open", self.opened_at)
        self.tally.open_now += 1
        self.tally.most_open = max(self.tally.most_open, self.tally.open_now)

    def data_received(self, data: bytes) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.tally.open_now -= 1
        if not self.ours:
            self.tally.closed_by_node += 1
            now = time.monotonic()
            self.tally.close_after.append(now - self.opened_at)
            self.tally.events.record("close", now)
        if not self.done.done():
            self.done.set_result(None)


def slowloris_bytes(index: int) -> bytes:
    """A CONNECT of 3.1.1 whose last byte is never sent: its client id is long enough that one byte a second
    lasts a few minutes."""
    whole = encode(Connect(client_id=f"slowloris-{index:06d}-" + "x" * 200, keep_alive=60), 4)
    return whole[:-1]


async def hold_socket(index: int, kind: str, port: int, tally: AttackTally, stop: asyncio.Event,
                      gate: asyncio.Semaphore, reopen_delay: float) -> None:
    """Keep one attack socket open until `stop`, opening a new one `reopen_delay` after the node closed one."""
    loop = asyncio.get_running_loop()
    prefix = slowloris_bytes(index)
    while not stop.is_set():
        done: asyncio.Future[None] = loop.create_future()
        try:
            async with gate:
                transport, protocol = await asyncio.wait_for(
                    loop.create_connection(partial(AttackSocket, tally, done), HOST, port), 30.0)
        except (TimeoutError, OSError):
            tally.connect_errors += 1
            await _wait(stop, 1.0)
            continue
        assert isinstance(protocol, AttackSocket)
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        while not stop.is_set() and not done.done():
            if kind == "slowloris" and protocol.sent < len(prefix) and not transport.is_closing():
                transport.write(prefix[protocol.sent:protocol.sent + 1])
                protocol.sent += 1
                tally.bytes_sent += 1
                tally.events.record("write", time.monotonic())
            await asyncio.wait((done, stopped), timeout=1.0 if kind == "slowloris" else None,
                               return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not done.done():
            protocol.ours = True
            transport.abort()
            await done
            return
        await _wait(stop, reopen_delay)


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def attack(kind: str, port: int, count: int, seconds: float, reopen_delay: float) -> dict[str, Any]:
    """Hold `count` attack sockets of `kind` for `seconds` once all were opened; prints `ready` when they are."""
    tally = AttackTally()
    stop = asyncio.Event()
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    started = time.monotonic()
    tasks = [asyncio.create_task(hold_socket(i, kind, port, tally, stop, gate, reopen_delay)) for i in range(count)]
    deadline = started + ATTACK_READY_TIMEOUT
    while tally.opened < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    ready_after = time.monotonic() - started
    print(json.dumps({"ready": tally.opened, "after": round(ready_after, 2), "open": tally.open_now}), flush=True)
    window_start = time.monotonic()
    await asyncio.sleep(seconds)
    stop.set()
    open_at_end = tally.open_now
    await asyncio.wait(tasks, timeout=30.0)
    after = tally.close_after
    return {
        "kind": kind, "count": count, "seconds": seconds, "ready_after": round(ready_after, 2),
        "window": round(time.monotonic() - window_start, 2), "opened": tally.opened,
        "connect_errors": tally.connect_errors, "closed_by_node": tally.closed_by_node,
        "most_open": tally.most_open, "open_at_end": open_at_end, "bytes_sent": tally.bytes_sent,
        "close_after_min": round(min(after), 2) if after else None,
        "close_after_p50": round(statistics.median(after), 2) if after else None,
        "close_after_max": round(max(after), 2) if after else None,
        "window_start": window_start, "events": tally.events.to_json(),
    }


# ------------------------------------------------------------------------------------------------ the probe


class ProbeClient:
    """A well-behaved MQTT 3.1.1 client over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = Decoder(server=False, protocol_level=4)

    @classmethod
    async def connect(cls, port: int, client_id: str) -> ProbeClient:
        reader, writer = await asyncio.open_connection(HOST, port)
        client = cls(reader, writer)
        client.send(Connect(client_id=client_id, keep_alive=60))
        connack = await asyncio.wait_for(client.next_packet(), ROUND_TRIP_TIMEOUT)
        if not isinstance(connack, Connack) or connack.reason_code != 0:
            raise RuntimeError(f"probe {client_id}: CONNECT refused: {connack!r}")
        return client

    def send(self, packet: Any) -> None:
        self.writer.write(encode(packet, 4))

    async def next_packet(self) -> Any:
        while True:
            packet = self.decoder.next_packet()
            if packet is not NEED_DATA:
                return packet
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("the node closed the probe connection")
            self.decoder.receive_data(data)

    def close(self) -> None:
        self.writer.close()


class Probe:
    """A QoS 1 publisher and subscriber on one topic; `round_trip()` is one publish -> receive, in seconds."""

    def __init__(self, publisher: ProbeClient, subscriber: ProbeClient, topic: str) -> None:
        self.publisher = publisher
        self.subscriber = subscriber
        self.topic = topic
        self.seq = 0
        self.failed = 0

    @classmethod
    async def start(cls, port: int, name: str) -> Probe:
        subscriber = await ProbeClient.connect(port, f"{name}-sub")
        topic = f"flood/{name}"
        subscriber.send(Subscribe(1, [Subscription(topic, SubOptions(qos=1))]))
        suback = await asyncio.wait_for(subscriber.next_packet(), ROUND_TRIP_TIMEOUT)
        if not isinstance(suback, Suback):
            raise RuntimeError(f"probe: expected SUBACK, got {suback!r}")
        publisher = await ProbeClient.connect(port, f"{name}-pub")
        return cls(publisher, subscriber, topic)

    async def round_trip(self) -> float | None:
        """Seconds from writing the PUBLISH to reading it at the subscriber (None: failed or too slow)."""
        self.seq += 1
        packet_id = self.seq % 65535 + 1
        payload = str(self.seq).encode()
        started = time.perf_counter()
        self.publisher.send(Publish(self.topic, payload, qos=1, packet_id=packet_id))
        try:
            elapsed = await asyncio.wait_for(self._receive(payload, started), ROUND_TRIP_TIMEOUT)
            puback = await asyncio.wait_for(self.publisher.next_packet(), ROUND_TRIP_TIMEOUT)
        except (TimeoutError, ConnectionError):
            self.failed += 1
            return None
        if not isinstance(puback, Puback):
            self.failed += 1
            return None
        return elapsed

    async def _receive(self, payload: bytes, started: float) -> float:
        while True:
            packet = await self.subscriber.next_packet()
            if isinstance(packet, Publish):
                elapsed = time.perf_counter() - started
                if packet.packet_id is not None:
                    self.subscriber.send(Puback(packet.packet_id))
                if packet.payload == payload:
                    return elapsed

    async def measure(self, count: int, interval: float, until: asyncio.Future[Any] | None = None,
                      timeline: list[tuple[float, float]] | None = None) -> list[float]:
        """Up to `count` round trips, one every `interval` seconds (stops early when `until` is done); each
        successful one is also appended to `timeline` as (its start on the monotonic clock, seconds)."""
        times: list[float] = []
        for _ in range(count):
            if until is not None and until.done():
                break
            started = time.monotonic()
            took = await self.round_trip()
            if took is not None:
                times.append(took)
                if timeline is not None:
                    timeline.append((started, took))
            await asyncio.sleep(interval)
        return times

    def close(self) -> None:
        self.publisher.close()
        self.subscriber.close()


# ------------------------------------------------------------------------------------------------ one run


class FloodNode(BrokerProcess):
    """bench.brokers' vmqpy node with a few more configuration lines."""

    def __init__(self, extra: dict[str, str], source: Path | None = None) -> None:
        super().__init__("vmqpy", source=source)
        self.extra = extra

    def command(self, config_file: Path) -> list[str]:
        # Called by start() right after it wrote the configuration file: add our keys to it.
        with config_file.open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in self.extra.items())
        return super().command(config_file)


async def _sample_rss(node: FloodNode, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], node.rss_kib())
        await _wait(stop, 0.25)


async def run_attack(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    extra: dict[str, str] = {}
    if args.max_connections:
        extra["listener.max_connections"] = str(args.max_connections)
    if args.connect_timeout is not None:
        extra["mqtt.connect_timeout"] = args.connect_timeout
    count = args.connections or (2000 if kind == "slowloris" else 10000)
    node = FloodNode(extra, args.source)
    node.start()
    try:
        pin(node.pid, args.node_cpus)
        pin(0, args.node_cpus)  # the probe: a real client, where the node is
        probe = await Probe.start(node.port, f"probe-{kind}")
        await probe.measure(20, 0.005)  # warm-up, not counted
        rss_before = node.rss_kib()
        baseline = await probe.measure(args.round_trips, args.interval)
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.flood", "--attacker", kind, "--port", str(node.port),
            "--connections", str(count), "--seconds", str(args.seconds), "--reopen-delay", str(args.reopen_delay),
            stdout=asyncio.subprocess.PIPE)
        pin(attacker.pid, args.attacker_cpus)
        try:
            assert attacker.stdout is not None
            ready = json.loads(await asyncio.wait_for(attacker.stdout.readline(), ATTACK_READY_TIMEOUT + 10))
            cpu_start, wall_start = cpu_seconds(node.pid), time.monotonic()
            peak = [node.rss_kib()]
            stop = asyncio.Event()
            sampler = asyncio.create_task(_sample_rss(node, peak, stop))
            finished = asyncio.ensure_future(attacker.stdout.readline())
            timeline: list[tuple[float, float]] = []
            during = await probe.measure(10**6, args.interval, until=finished, timeline=timeline)
            report_line = await asyncio.wait_for(finished, args.seconds + 60)
            cpu_used, wall = cpu_seconds(node.pid) - cpu_start, time.monotonic() - wall_start
            stop.set()
            await sampler
            await asyncio.wait_for(attacker.wait(), 30)
        finally:
            if attacker.returncode is None:
                attacker.kill()
                await attacker.wait()
        attack_report = json.loads(report_line)
        await asyncio.sleep(args.settle)
        rss_after = node.rss_kib()
        after = await probe.measure(args.round_trips // 4, args.interval)
        probe.close()
        alive = node.alive()
    finally:
        node.stop()
    held = attack_report["most_open"] or 1
    events = EventBins.from_json(attack_report.pop("events"))
    # the tail that makes the p99 during the attack: its slowest 2 %
    slow = explain(timeline, events, percentile(during, 98), attack_report["window_start"])
    return {
        "attack": kind, "connections": count, "extra": extra, "source": str(args.source or "this checkout"),
        "node_cpus": sorted(args.node_cpus or ()), "attacker_cpus": sorted(args.attacker_cpus or ()),
        "ready": ready, "attacker": attack_report,
        "baseline": summary(baseline), "during": summary(during), "after": summary(after),
        "probe_failures": probe.failed, "node_alive": alive,
        "rss_kib": {"before": rss_before, "peak_during": peak[0], "after": rss_after},
        "rss_per_attack_socket_bytes": round((peak[0] - rss_before) * 1024 / held),
        "node_cpu_percent_during": round(100 * cpu_used / wall, 1) if wall else None,
        "slow_causes": causes(slow),
        "slow_samples": [{"at": s.at, "ms": round(s.took * 1000, 2), "cause": s.cause, **s.events} for s in slow],
    }


def summary(times: list[float]) -> dict[str, Any]:
    return {"n": len(times), "p50_ms": round(percentile(times, 50) * 1000, 3),
            "p99_ms": round(percentile(times, 99) * 1000, 3)}


def print_report(result: dict[str, Any]) -> None:
    a = result["attacker"]
    b, d, af = result["baseline"], result["during"], result["after"]
    ratio = d["p99_ms"] / b["p99_ms"] if b["p99_ms"] else float("nan")
    rss = result["rss_kib"]
    print(f"## {result['attack']}: {result['connections']} sockets, {a['seconds']} s window "
          f"(config: {result['extra'] or 'defaults'}; vmqpy from {result['source']}; CPUs of the node and probe "
          f"{result['node_cpus'] or 'any'}, of the attacker {result['attacker_cpus'] or 'any'})")
    print(f"  attack sockets: {a['ready_after']} s to open; at most {a['most_open']} open at once; "
          f"{a['opened']} opened, {a['closed_by_node']} closed by the node "
          f"(after {a['close_after_min']} / {a['close_after_p50']} / {a['close_after_max']} s min/median/max), "
          f"{a['connect_errors']} connect errors, {a['open_at_end']} open at the end")
    print(f"  round trips: without attack p50 {b['p50_ms']} ms p99 {b['p99_ms']} ms (n={b['n']}); "
          f"during p50 {d['p50_ms']} ms p99 {d['p99_ms']} ms (n={d['n']}); after p50 {af['p50_ms']} ms "
          f"p99 {af['p99_ms']} ms (n={af['n']}); p99 during/without = {ratio:.2f}; "
          f"failed round trips {result['probe_failures']}")
    print(f"  node RSS: before {rss['before'] / 1024:.1f} MiB, peak during {rss['peak_during'] / 1024:.1f} MiB, "
          f"after {rss['after'] / 1024:.1f} MiB; {result['rss_per_attack_socket_bytes']} bytes per attack socket "
          f"held; node CPU during {result['node_cpu_percent_during']} % of a core; node alive: "
          f"{result['node_alive']}")
    slow = result["slow_samples"]
    print(f"  the slowest 2 % of the round trips during the attack: {len(slow)}, by likely cause "
          f"{result['slow_causes']} (attacker events from {LOOK_BACK * 1000:g} ms before to the end of each)")
    for sample in sorted(slow, key=lambda s: -s["ms"])[:SLOW_SHOWN]:
        print(f"    at {sample['at']:7.3f} s: {sample['ms']} ms; {sample['cause']}: {sample['open']} opens, "
              f"{sample['close']} closes by the node, {sample['write']} bytes written")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("slowloris", "flood", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the attack window (30)")
    parser.add_argument("--connections", type=int, default=0,
                        help="attack sockets (default: 2000 slow-loris, 10000 flood)")
    parser.add_argument("--round-trips", type=int, default=300, help="round trips without attack (300)")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between two round trips (0.02)")
    parser.add_argument("--reopen-delay", type=float, default=1.0,
                        help="seconds before the attacker reopens a socket the node closed (1.0)")
    parser.add_argument("--max-connections", type=int, default=0, help="listener.max_connections (default: none)")
    parser.add_argument("--connect-timeout", default=None, help="mqtt.connect_timeout (default: the node's)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after the attack before 'after' (3)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("--source", type=Path, default=None,
                        help="run the node from this tree of vmqpy (default: this checkout)")
    parser.add_argument("--revision", default=None,
                        help="run the node from this committed revision (exported to a temporary directory)")
    parser.add_argument("--node-cpus", type=cpu_set, default=None,
                        help="pin the node and the probe to these CPUs, e.g. 0 (default: not pinned)")
    parser.add_argument("--attacker-cpus", type=cpu_set, default=None,
                        help="pin the attacker process to these CPUs, e.g. 1 (default: not pinned)")
    parser.add_argument("--attacker", choices=("slowloris", "flood"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_fd_limit()
    if args.attacker:
        report = asyncio.run(attack(args.attacker, args.port, args.connections, args.seconds, args.reopen_delay))
        print(json.dumps(report), flush=True)
        return 0
    kinds = ("slowloris", "flood") if args.mode == "both" else (args.mode,)
    if args.revision is not None:
        args.source = Path(tempfile.mkdtemp(prefix="bench-flood-src-"))
        commit = export_revision(args.revision, args.source)
        print(f"# vmqpy {args.revision} = {commit} exported to {args.source}")
    print(f"# python -m bench.flood {' '.join(sys.argv[1:] if argv is None else argv)}  "
          f"({time.strftime('%Y-%m-%d %H:%M:%S')})")
    results = []
    try:
        for kind in kinds:
            result = asyncio.run(run_attack(kind, args))
            results.append(result)
            print_report(result)
    finally:
        if args.revision is not None:
            shutil.rmtree(args.source, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r["node_alive"] and r["probe_failures"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
