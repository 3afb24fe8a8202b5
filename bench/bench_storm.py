"""Persistent connects and a reconnect storm, vmqpy and Mosquitto (persistence on) side by side (issue 21).

Two measures, each on a fresh broker of each kind, interleaved per round:

persistent  `--connects` clients, `--concurrency` at a time, connect with clean session false (MQTT 3.1.1),
            wait for CONNACK, DISCONNECT, wait for the broker to close: first with new client ids (the session is
            created: on vmqpy registered through the leader and written to SQLite), then the same ids again (the
            session is resumed, CONNACK says session present). Connects per second and broker CPU per connect
            (/proc/PID/stat utime + stime over the phase), each phase.
storm       `--clients` persistent clients subscribe (QoS 1, one topic each) and go away; `--messages` QoS 1
            messages are published to each one's topic (queued, since nobody is connected); then every client
            reconnects at once (`--in-flight` connects in flight at most; 0: all at once) and takes its queued
            messages, acknowledging each. Reported: the time until all are connected, the time until every queued
            message has arrived (all must arrive, and every CONNACK must say session present), the connect time
            (TCP connect -> CONNACK) p50/p99 and the broker CPU over the storm.

Mosquitto runs with `persistence true` and a `persistence_location` in its temporary directory; vmqpy with the
defaults of bench/brokers.py (sessions in SQLite). The bench raises its own soft file limit to the hard one
(the brokers inherit it) and refuses a `--clients` that would not fit.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_storm [--only persistent|storm] [--rounds R]
        [--connects N] [--concurrency C] [--clients N] [--messages M] [--in-flight K] [--json FILE]
        [--baseline REV] [--kinds vmqpy,mosquitto]

`--baseline REV` adds vmqpy at git revision REV (exported to a temporary directory, bench.brokers.export_revision),
interleaved with the others in every round, so that a change is measured before and after in one run; `--kinds`
leaves out a broker (`--kinds vmqpy` with `--baseline`: the two vmqpy only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.brokers import KINDS, BrokerProcess, export_revision
from bench.mqtt_raw import close_client, open_client, publish_all, subscribe_packet

TIMEOUT = 120.0  # seconds any one wait of a client may take (a bound, not a measure)
SETUP_CONCURRENCY = 200
PUBLISH_WINDOW = 200
FD_MARGIN = 200


class PersistentBroker(BrokerProcess):
    """Mosquitto with its persistence on (vmqpy keeps persistent sessions in SQLite anyway)."""

    def command(self, config_file: Path) -> list[str]:
        if self.kind == "mosquitto":
            assert self.workdir is not None
            text = config_file.read_text().replace("persistence false\n", "")
            text += f"persistence true\npersistence_location {self.workdir / 'data'}/\n"
            config_file.write_text(text)
        return super().command(config_file)


@dataclass(frozen=True, slots=True)
class PersistentRound:
    new_per_s: float
    new_us_cpu: float
    resume_per_s: float
    resume_us_cpu: float


@dataclass(frozen=True, slots=True)
class StormRound:
    all_connected_s: float
    all_delivered_s: float
    connect_p50_ms: float
    connect_p99_ms: float
    cpu_s: float
    messages: int
    rss_kib: int


async def connect_leave(port: int, client_id: str, clean: bool, expect_present: bool | None) -> None:
    client = await open_client(port, client_id, clean, TIMEOUT)
    present = client.connack.result()
    if expect_present is not None and present != expect_present:
        raise RuntimeError(f"{client_id}: CONNACK session present {present}, expected {expect_present}")
    await close_client(client, TIMEOUT)


async def in_parallel(count: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> None:
    """Run `job(i)` for i in range(count), `concurrency` at a time."""
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            await job(i)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))


def run_persistent(kind: str, connects: int, concurrency: int, tag: str,
                   source: Path | None = None) -> PersistentRound:
    with PersistentBroker(kind, source=source) as broker:
        async def phase(resume: bool) -> None:
            await in_parallel(connects, concurrency,
                              lambda i: connect_leave(broker.port, f"{tag}-{i}", False, resume))

        asyncio.run(in_parallel(200, concurrency, lambda i: connect_leave(broker.port, f"w{tag}-{i}", False, None)))
        figures: list[float] = []
        for resume in (False, True):
            cpu, started = broker.cpu_seconds(), time.monotonic()
            asyncio.run(phase(resume))
            elapsed = time.monotonic() - started
            figures += [connects / elapsed, (broker.cpu_seconds() - cpu) / connects * 1e6]
        if not broker.alive():
            raise RuntimeError(f"{kind} died during the persistent connects:\n{broker.log_tail()}")
        return PersistentRound(*figures)


async def storm(port: int, clients: int, messages: int, in_flight: int, cpu: Callable[[], float]) -> StormRound:
    async def subscribe_leave(i: int) -> None:
        client = await open_client(port, f"s{i}", False, TIMEOUT)
        client.send(subscribe_packet(1, f"storm/{i}", 1))
        if await asyncio.wait_for(asyncio.shield(client.suback), TIMEOUT) != 1:
            raise RuntimeError(f"s{i}: subscription not granted at QoS 1")
        await close_client(client, TIMEOUT)

    await in_parallel(clients, SETUP_CONCURRENCY, subscribe_leave)
    await publish_all(port, [(f"storm/{i}", b"m%d" % m) for m in range(messages) for i in range(clients)],
                      PUBLISH_WINDOW, TIMEOUT)
    cpu_before = cpu()
    started = time.monotonic()
    gate = asyncio.Semaphore(in_flight if in_flight > 0 else clients)
    connect_times: list[float] = []
    connected_at: list[float] = []
    held = []

    async def reconnect(i: int) -> None:
        async with gate:
            client = await open_client(port, f"s{i}", False, TIMEOUT, expected=messages)
        connect_times.append(client.connack_at - client.started)
        connected_at.append(client.connack_at)
        held.append(client)
        if not client.connack.result():
            raise RuntimeError(f"s{i}: CONNACK without session present: the session was lost")
        await asyncio.wait_for(asyncio.shield(client.all_received), TIMEOUT)

    try:
        await asyncio.gather(*(reconnect(i) for i in range(clients)))
        delivered = time.monotonic() - started
        cpu_used = cpu() - cpu_before
        received = sum(c.received for c in held)
    finally:
        for client in held:
            if client.transport is not None:
                client.transport.close()
    connect_times.sort()
    return StormRound(max(connected_at) - started, delivered, statistics.median(connect_times) * 1e3,
                      connect_times[min(len(connect_times) - 1, int(len(connect_times) * 0.99))] * 1e3,
                      cpu_used, received, 0)


def run_storm(kind: str, clients: int, messages: int, in_flight: int, source: Path | None = None) -> StormRound:
    with PersistentBroker(kind, source=source) as broker:
        result = asyncio.run(storm(broker.port, clients, messages, in_flight, broker.cpu_seconds))
        if result.messages != clients * messages:
            raise RuntimeError(f"{kind}: {result.messages} of {clients * messages} queued messages arrived")
        return StormRound(**{**asdict(result), "rss_kib": broker.peak_rss_kib()})


def raise_file_limit(needed: int) -> int:
    """Soft RLIMIT_NOFILE up to the hard one (inherited by the brokers we start); returns it."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if needed > hard:
        raise SystemExit(f"{needed} file descriptors needed, this process may open {hard} at most")
    return hard


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("persistent", "storm"), default=None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connects", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=0, help="storm connects in flight at most (0: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rounds to this file")
    parser.add_argument("--baseline", default="", help="also run vmqpy at this git revision")
    parser.add_argument("--kinds", default=",".join(KINDS), help="the brokers to run, comma separated")
    args = parser.parse_args(argv)
    if min(args.rounds, args.connects, args.concurrency, args.clients, args.messages) < 1 or args.in_flight < 0:
        parser.error("--rounds, --connects, --concurrency, --clients and --messages must be at least 1")
    kinds = [kind for kind in args.kinds.split(",") if kind]
    if not kinds or any(kind not in KINDS for kind in kinds):
        parser.error(f"--kinds: a comma separated list of {', '.join(KINDS)}")
    raise_file_limit(args.clients + FD_MARGIN)
    asyncio.set_event_loop_policy(_loop_policy())
    with tempfile.TemporaryDirectory(prefix="bench-storm-") as tmp:
        sources: dict[str, tuple[str, Path | None]] = {kind: (kind, None) for kind in kinds}
        if args.baseline:
            commit = export_revision(args.baseline, Path(tmp))
            ours = {k: v for k, v in sources.items() if k == "vmqpy"}
            others = {k: v for k, v in sources.items() if k != "vmqpy"}
            sources = {**ours, f"vmqpy@{commit[:7]}": ("vmqpy", Path(tmp)), **others}
        persistent, storms = run_rounds(args, sources)
    report(args, persistent, storms)
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "persistent": {k: [asdict(x) for x in v] for k, v in persistent.items()},
                                         "storm": {k: [asdict(x) for x in v] for k, v in storms.items()}},
                                        indent=1))
    return 0


def run_rounds(args: argparse.Namespace, sources: dict[str, tuple[str, Path | None]]
               ) -> tuple[dict[str, list[PersistentRound]], dict[str, list[StormRound]]]:
    """Interleaved rounds over `sources` (label -> broker kind, vmqpy source directory or None: this checkout)."""
    persistent: dict[str, list[PersistentRound]] = {label: [] for label in sources}
    storms: dict[str, list[StormRound]] = {label: [] for label in sources}
    for r in range(args.rounds):
        for kind, (broker_kind, source) in sources.items():
            if args.only in (None, "persistent"):
                p = run_persistent(broker_kind, args.connects, args.concurrency, f"p{r}", source)
                persistent[kind].append(p)
                print(f"round {r + 1} {kind:9} persistent: new {p.new_per_s:6.0f}/s {p.new_us_cpu:5.0f} us CPU, "
                      f"resume {p.resume_per_s:6.0f}/s {p.resume_us_cpu:5.0f} us CPU", flush=True)
            if args.only in (None, "storm"):
                s = run_storm(broker_kind, args.clients, args.messages, args.in_flight, source)
                storms[kind].append(s)
                print(f"round {r + 1} {kind:9} storm: all connected {s.all_connected_s:.2f} s, all delivered "
                      f"{s.all_delivered_s:.2f} s, connect p50 {s.connect_p50_ms:.0f} ms p99 "
                      f"{s.connect_p99_ms:.0f} ms, CPU {s.cpu_s:.2f} s, peak RSS {s.rss_kib / 1024:.0f} MiB",
                      flush=True)
    return persistent, storms


def suite_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """bench.suite's rows (bench.suite_report.row) from the file `--json` writes: medians per broker."""
    from bench.suite_report import row

    med = statistics.median
    clients = max(1, int(result.get("args", {}).get("clients", 1)))
    out = []
    for kind, rounds in result.get("persistent", {}).items():
        if rounds:
            out.append(row("persistent connects (new / resumed)", kind, rate=med(r["new_per_s"] for r in rounds),
                           cpu_us=med(r["new_us_cpu"] for r in rounds), unit="connect",
                           note=f"resumed {med(r['resume_per_s'] for r in rounds):.0f}/s, "
                                f"{med(r['resume_us_cpu'] for r in rounds):.0f} us CPU"))
    for kind, srounds in result.get("storm", {}).items():
        if srounds:
            out.append(row(f"reconnect storm ({clients:,} clients)", kind, unit="reconnect",
                           cpu_us=med(r["cpu_s"] for r in srounds) / clients * 1e6,
                           p50_ms=med(r["connect_p50_ms"] for r in srounds),
                           p99_ms=med(r["connect_p99_ms"] for r in srounds),
                           rss=f"peak {med(r['rss_kib'] for r in srounds) / 1024:.0f} MiB",
                           note=f"all delivered in {med(r['all_delivered_s'] for r in srounds):.2f} s"))
    return out


def _loop_policy() -> asyncio.AbstractEventLoopPolicy:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the venv has it
        return asyncio.DefaultEventLoopPolicy()
    policy: asyncio.AbstractEventLoopPolicy = uvloop.EventLoopPolicy()
    return policy


def report(args: argparse.Namespace, persistent: dict[str, list[PersistentRound]],
           storms: dict[str, list[StormRound]]) -> None:
    med = statistics.median
    if any(persistent.values()):
        print(f"\n{args.connects} persistent 3.1.1 connects, {args.concurrency} concurrent, median of "
              f"{args.rounds} round(s):")
        print("| broker | new session connects/s | CPU per connect | resumed connects/s | CPU per connect |")
        print("|---|---:|---:|---:|---:|")
        for kind, rounds in persistent.items():
            print(f"| {kind} | {med(r.new_per_s for r in rounds):.0f} | {med(r.new_us_cpu for r in rounds):.0f} us "
                  f"| {med(r.resume_per_s for r in rounds):.0f} | {med(r.resume_us_cpu for r in rounds):.0f} us |")
    if any(storms.values()):
        limit = args.in_flight or "all"
        print(f"\nReconnect storm: {args.clients} persistent clients x {args.messages} queued QoS 1 messages, "
              f"{limit} connects in flight, median of {args.rounds} round(s):")
        print("| broker | all connected | all delivered | connect p50 | connect p99 | broker CPU | peak RSS |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for kind, srounds in storms.items():
            print(f"| {kind} | {med(r.all_connected_s for r in srounds):.2f} s "
                  f"| {med(r.all_delivered_s for r in srounds):.2f} s | {med(r.connect_p50_ms for r in srounds):.0f} ms"
                  f" | {med(r.connect_p99_ms for r in srounds):.0f} ms | {med(r.cpu_s for r in srounds):.2f} s "
                  f"| {med(r.rss_kib for r in srounds) / 1024:.0f} MiB |")


if __name__ == "__main__":
    raise SystemExit(main())
