"""Queue replicas (issue 18): what R = 2 costs a QoS 1 publish to persistent offline sessions, against R = 1, and
how long the messages of a lost owner take to come back.

Run (under the network lock: it starts node processes on 127.0.0.11-13):

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_replicas [--rounds 3] [--messages 10000] [--quick]

Each round starts a fresh 3-node cluster (the integration harness: real node processes joined with vmq-admin,
`cluster.readiness = majority`, `queue.failover_timeout = 0s`) with `queue.replicas = R`, rounds interleaved
R=1, R=2, R=1, R=2, ... On node A (the owner) `--sessions` persistent MQTT 3.1.1 sessions subscribe to one topic
each and go offline; one publisher connected to A sends `--messages` QoS 1 publishes spread over them, at most
`--window` unacknowledged. Measured: messages per second (first publish to last PUBACK), publish-to-PUBACK
latency p50/p99, and the broker CPU per message (/proc/PID/stat user + system over the publish window, divided by
the messages) of the owner A and of the two other nodes together (the replica side: each client id's replica is
the next node of its ranking, B or C).

Recovery (R = 2 rounds): once A's replica operations are all acknowledged, A is killed with SIGKILL and its data
directory deleted; once C sees A unreachable, every session reconnects on C and reads its messages. Reported: the
seconds from the kill until C saw A go, and from the first reconnect until the last of the `--messages` queued
messages arrived (each counted once). Medians over the rounds; the target of issue 18 is R=2 at least 0.5x the
msgs/s of R=1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.brokers import cpu_seconds
from bench.mqtt_raw import RawClient, close_client, publish_packet, subscribe_packet

TIMEOUT_S = 60.0
SETTLE_S = 60.0


@dataclass
class Round:
    replicas: int
    messages: int
    seconds: float
    rate: float
    p50_ms: float
    p99_ms: float
    owner_cpu_us: float  # per message
    replica_cpu_us: float  # per message, the two other nodes together
    detect_s: float | None = None  # recovery (R >= 2): kill until C saw the owner unreachable
    recover_s: float | None = None  # first reconnect on C until every queued message arrived
    recovered: int | None = None


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def topic(index: int) -> str:
    return f"bench/replicas/{index}"


def client_id(index: int) -> str:
    return f"bench-rep-{index}"


async def connect(host: str, port: int, cid: str, clean: bool, expected: int = 0,
                  on_puback: Any = None) -> RawClient:
    loop = asyncio.get_running_loop()
    _, client = await asyncio.wait_for(
        loop.create_connection(lambda: RawClient(cid, clean, expected, on_puback), host, port), TIMEOUT_S)
    await asyncio.wait_for(asyncio.shield(client.connack), TIMEOUT_S)
    return client


async def make_sessions(host: str, port: int, sessions: int) -> None:
    """`sessions` persistent sessions, each subscribed (QoS 1) to its own topic, offline."""
    for i in range(sessions):
        client = await connect(host, port, client_id(i), clean=False)
        client.send(subscribe_packet(1, topic(i), 1))
        await asyncio.wait_for(asyncio.shield(client.suback), TIMEOUT_S)
        await close_client(client, TIMEOUT_S)


async def publish(host: str, port: int, messages: int, sessions: int, window: int) -> tuple[float, list[float]]:
    """QoS 1 publishes spread over the sessions' topics, `window` unacknowledged at most: (seconds from the first
    publish to the last PUBACK, publish-to-PUBACK latencies in ms)."""
    free = asyncio.Semaphore(window)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    done = asyncio.get_running_loop().create_future()

    def acked(packet_id: int) -> None:
        started = sent_at.pop(packet_id, None)
        if started is None:
            return
        latencies.append((time.monotonic() - started) * 1000)
        free.release()
        if len(latencies) == messages and not done.done():
            done.set_result(None)

    client = await connect(host, port, "bench-rep-publisher", True, on_puback=acked)
    payload = b"x" * 64
    t0 = time.monotonic()
    for n in range(messages):
        await asyncio.wait_for(free.acquire(), TIMEOUT_S)
        packet_id = n % 65535 + 1
        sent_at[packet_id] = time.monotonic()
        client.send(publish_packet(topic(n % sessions), payload, packet_id))
    await asyncio.wait_for(done, TIMEOUT_S * 5)
    seconds = time.monotonic() - t0
    await close_client(client, TIMEOUT_S)
    return seconds, latencies


async def drain(host: str, port: int, sessions: int, messages: int) -> tuple[float, int]:
    """Every session reconnects (persistent) and reads its share: (seconds from the first reconnect until every
    share arrived, messages received)."""
    share = [messages // sessions + (1 if i < messages % sessions else 0) for i in range(sessions)]
    t0 = time.monotonic()
    clients = [await connect(host, port, client_id(i), clean=False, expected=share[i]) for i in range(sessions)]
    try:
        await asyncio.wait_for(asyncio.gather(*(c.all_received for c in clients)), TIMEOUT_S * 3)
        seconds = time.monotonic() - t0
    finally:
        received = sum(c.received for c in clients)
        for c in clients:
            await close_client(c, TIMEOUT_S)
    return seconds, received


def metric(node: Any, name: str) -> Any:
    """One value of `vmq-admin metrics show` on a tests.integration.cluster.ClusterNode (typed Any: importing the
    integration harness here would pull it into `mypy --strict tests/unit`)."""
    answer = node.admin("metrics", "show", "--json")
    if answer.returncode != 0:
        return None
    return {row["Metric"]: row["Value"] for row in json.loads(answer.stdout)}.get(name)


def wait_for(condition: Any, seconds: float, what: str) -> float:
    """Poll `condition` every 0.05 s; the seconds it took. RuntimeError after `seconds`."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > seconds:
            raise RuntimeError(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def one_round(workdir: Path, replicas: int, args: argparse.Namespace) -> Round:
    harness: Any = importlib.import_module("tests.integration.cluster")  # at run time: keeps it out of mypy
    start_cluster = harness.start_cluster

    extra = {"queue.replicas": replicas, "cluster.readiness": "majority", "queue.failover_timeout": "0s",
             "log.console.level": "warning"}
    nodes = start_cluster(workdir, extra)
    a, _b, c = nodes
    try:
        asyncio.run(make_sessions(a.host, a.mqtt_port, args.sessions))
        pids = [n.pid for n in nodes]
        assert all(pid is not None for pid in pids)
        before = [cpu_seconds(pid) for pid in pids if pid is not None]
        seconds, latencies = asyncio.run(publish(a.host, a.mqtt_port, args.messages, args.sessions, args.window))
        after = [cpu_seconds(pid) for pid in pids if pid is not None]
        used = [end - start for start, end in zip(before, after, strict=True)]
        result = Round(replicas, args.messages, round(seconds, 3), round(args.messages / seconds, 1),
                       round(percentile(latencies, 0.5), 2), round(percentile(latencies, 0.99), 2),
                       round(used[0] / args.messages * 1e6, 1), round((used[1] + used[2]) / args.messages * 1e6, 1))
        if replicas >= 2 and not args.no_recovery:
            wait_for(lambda: metric(a, "queue_replica.operations_pending") == 0, SETTLE_S,
                     "the owner's replica operations acknowledged")
            killed = time.monotonic()
            a.kill9()
            shutil.rmtree(a.data_dir, ignore_errors=True)
            wait_for(lambda: not any(r["Node"] == a.name and r["Reachable"] for r in c.show()), SETTLE_S,
                     "C sees A unreachable")
            result.detect_s = round(time.monotonic() - killed, 2)
            recover_s, received = asyncio.run(drain(c.host, c.mqtt_port, args.sessions, args.messages))
            result.recover_s, result.recovered = round(recover_s, 2), received
        return result
    finally:
        for node in nodes:
            node.stop()


def summary(rounds: list[Round]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in (1, 2):
        mine = [x for x in rounds if x.replicas == r]
        if not mine:
            continue

        def med(field: str, rows: list[Round] = mine) -> float | None:
            values = [getattr(x, field) for x in rows if getattr(x, field) is not None]
            return round(statistics.median(values), 2) if values else None

        out[f"R={r}"] = {f: med(f) for f in ("rate", "p50_ms", "p99_ms", "owner_cpu_us", "replica_cpu_us",
                                              "detect_s", "recover_s", "recovered")}
    if "R=1" in out and "R=2" in out and out["R=1"]["rate"]:
        out["rate_ratio_r2_r1"] = round(out["R=2"]["rate"] / out["R=1"]["rate"], 2)
    return out


def table(rounds: list[Round], result: dict[str, Any]) -> str:
    lines = ["| round | R | msgs/s | PUBACK p50 / p99 ms | CPU us/msg owner | CPU us/msg replica side | "
             "detect s | recover s | recovered |", "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rounds):
        lines.append(f"| {i // 2 + 1} | {r.replicas} | {r.rate:,.0f} | {r.p50_ms} / {r.p99_ms} | {r.owner_cpu_us} | "
                     f"{r.replica_cpu_us} | {r.detect_s if r.detect_s is not None else '-'} | "
                     f"{r.recover_s if r.recover_s is not None else '-'} | "
                     f"{r.recovered if r.recovered is not None else '-'} |")
    for key, med in result.items():
        if isinstance(med, dict):
            lines.append(f"| median | {key[2:]} | {med['rate']:,.0f} | {med['p50_ms']} / {med['p99_ms']} | "
                         f"{med['owner_cpu_us']} | {med['replica_cpu_us']} | {med['detect_s'] or '-'} | "
                         f"{med['recover_s'] or '-'} | {med['recovered'] or '-'} |")
    if "rate_ratio_r2_r1" in result:
        lines.append(f"\nR=2 / R=1 msgs/s: {result['rate_ratio_r2_r1']} (target: at least 0.5)")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_replicas", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (R=1, R=2), interleaved")
    ap.add_argument("--messages", type=int, default=10_000, help="QoS 1 publishes per round (and queued to recover)")
    ap.add_argument("--sessions", type=int, default=100, help="persistent offline sessions on the owner")
    ap.add_argument("--window", type=int, default=100, help="unacknowledged publishes at most")
    ap.add_argument("--no-recovery", action="store_true", help="skip the owner-loss recovery of the R=2 rounds")
    ap.add_argument("--quick", action="store_true", help="1 round of 2,000 messages to 20 sessions")
    ap.add_argument("--out", type=Path, default=None, help="also write the rounds and medians as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.messages, args.sessions = 1, 2000, 20
    if args.rounds < 1 or args.sessions < 1 or args.window < 1 or args.messages < args.sessions:
        ap.error("--rounds, --sessions and --window must be positive and --messages at least --sessions")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    workdir = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    rounds: list[Round] = []
    try:
        for n in range(args.rounds):
            for replicas in (1, 2):
                r = one_round(workdir / f"r{n}-R{replicas}", replicas, args)
                print(f"round {n + 1} R={replicas}: {r.rate:,.0f} msgs/s, p50 {r.p50_ms} ms, p99 {r.p99_ms} ms, "
                      f"CPU/msg owner {r.owner_cpu_us} us, replica side {r.replica_cpu_us} us"
                      + (f", recovered {r.recovered} in {r.recover_s} s (detected after {r.detect_s} s)"
                         if r.recovered is not None else ""), flush=True)
                rounds.append(r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = summary(rounds)
    print(table(rounds, result))
    if args.out is not None:
        args.out.write_text(json.dumps({"rounds": [asdict(r) for r in rounds], "summary": result,
                                        "args": {k: str(v) for k, v in vars(args).items()}}, indent=1) + "\n")
    lost = [r for r in rounds if r.recovered is not None and r.recovered < r.messages]
    for r in lost:
        print(f"R={r.replicas}: only {r.recovered} of {r.messages} queued messages recovered", file=sys.stderr)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())


def suite_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """bench.suite's rows (bench.suite_report.row) from the medians of `summary`: one per R."""
    from bench.suite_report import row

    out = []
    for key in ("R=1", "R=2"):
        med = result.get(key)
        if not isinstance(med, dict):
            continue
        note = f"replica side {med['replica_cpu_us']} us/msg"
        if med.get("recover_s") is not None:
            note += f"; recovered {med['recovered']:,.0f} queued in {med['recover_s']} s after an owner loss"
        out.append(row(f"queue replicas {key} (QoS 1, offline sessions)", "vmqpy", rate=med["rate"],
                       ratio=result.get("rate_ratio_r2_r1") if key == "R=2" else None, cpu_us=med["owner_cpu_us"],
                       p50_ms=med["p50_ms"], p99_ms=med["p99_ms"], note=note))
    return out
