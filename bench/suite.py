"""`make bench`: the whole bench set in one command, one table, one dated summary JSON.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.suite [--quick] [--skip compare,idle,...]

Steps, one after the other (each on its own fresh brokers; a failing step is reported and the others still run):

  compare        bench.compare: vmqpy, Mosquitto (and aedes when installed) side by side on the message scenarios:
                 QoS 0 and 1 on 10 pairs, fan-out 1 -> 10 and fan-in 10 -> 1 (3 runs x 8 s; quick: 1 run x 3 s)
  connects       bench.bench_connect: clean connects, 64 at a time, rate and broker CPU per connect, the same
                 brokers (5,000 connects x 3 rounds; quick: 1,000 x 1)
  idle           bench.bench_idle as a subprocess: RSS per idle connection and CPU per connect, both brokers
                 (2,000 connections x 3 rounds; quick: 300 x 1)
  subscriptions  bench.bench_subscriptions at 1k and 10k subscriptions (quick: 1k)
  retained       bench.bench_retained at 1k and 10k retained messages (quick: 1k)
  fleet          bench.bench_storm: persistent connects (new and resumed sessions) and a reconnect storm with
                 queued QoS 1 messages, both brokers (5,000 connects, 10,000 storm clients; quick: 1,000 / 2,000)
  cluster        bench.bench_cluster: two nodes (127.0.0.11-12), CPU of both nodes per message with the subscribers
                 on the publishers' node and on the other one, QoS 0 and 1 (3 runs x 5 s; quick: 1 x 2 s); its
                 ratio column is the CPU per message cross node / same node
  latency        bench.bench_latency: p50 and p99 at 50 % and 90 % of Mosquitto's saturation rate (QoS 0 and 1
                 pairs, QoS 1 fan-out and fan-in) and at 1,000 msgs/s QoS 1, both brokers interleaved (3 rounds
                 of 4 s; quick: QoS 1 pairs only, 1 round of 1.5 s); its ratio column is the p99 ratio
                 vmqpy/Mosquitto
  replicas       only with --replicas: bench.bench_replicas --quick, queue replicas R=1 vs R=2 on 3 nodes
                 (127.0.0.11-13); its ratio column is R=2/R=1 msgs/s

It prints two markdown tables, the headline (issue 38's: rate, broker CPU per message or connect and p50 of
Mosquitto, vmqpy and aedes side by side, from compare, latency and connects) and the whole one (rate,
vmqpy/Mosquitto ratio, broker CPU per message, p50/p99, RSS), and writes them,
with the machine's description (CPU model, cores, memory, kernel, Python, load average, git commit), to
`<out-dir>/<date>-summary.json` (default out-dir bench/results/); each step's raw output goes to
`<out-dir>/raw/` (git-ignored). Exit status 1 if a step failed or reported a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.suite_report import (
    Row,
    compare_rows,
    headline,
    idle_rows,
    machine,
    render,
    retained_rows,
    subscription_rows,
    write_summary,
)

REPO = Path(__file__).resolve().parents[1]
STEPS = ("compare", "connects", "idle", "subscriptions", "retained", "fleet", "cluster", "latency")
LATENCY_SCENARIOS = "qos0-pairs,qos1-pairs,qos1-fanout,qos1-fanin"
IDLE_TIMEOUT = 900.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes everywhere (about 2 minutes)")
    ap.add_argument("--skip", default="", help=f"comma-separated steps to leave out: {', '.join(STEPS)}")
    ap.add_argument("--idle-connections", type=int, default=None, help="bench_idle connections (2000; quick 300)")
    ap.add_argument("--idle-rounds", type=int, default=None, help="bench_idle rounds (3; quick 1)")
    ap.add_argument("--sub-sizes", default=None, help="bench_subscriptions sizes (1k,10k; quick 1k)")
    ap.add_argument("--ret-sizes", default=None, help="bench_retained sizes (1k,10k; quick 1k)")
    ap.add_argument("--replicas", action="store_true", help="also the queue-replica bench (bench.bench_replicas)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results",
                    help="where the dated summary goes (raw outputs in its raw/ directory)")
    args = ap.parse_args(argv)
    args.skipped = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skipped - set(STEPS)
    if unknown:
        ap.error(f"unknown step(s) in --skip: {', '.join(sorted(unknown))}; known: {', '.join(STEPS)}")
    args.idle_connections = args.idle_connections or (300 if args.quick else 2000)
    args.idle_rounds = args.idle_rounds or (1 if args.quick else 3)
    args.sub_sizes = args.sub_sizes or ("1k" if args.quick else "1k,10k")
    args.ret_sizes = args.ret_sizes or ("1k" if args.quick else "1k,10k")
    if args.idle_connections < 1 or args.idle_rounds < 1:
        ap.error("--idle-connections and --idle-rounds must be positive")
    return args


def step_compare(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import compare

    out = raw / "compare.md"
    code = compare.main((["--quick"] if args.quick else []) + ["--out", str(out)])
    data = json.loads(out.with_suffix(".json").read_text())
    return compare_rows(data["summary"]), {"exit": code, "raw": str(out.with_suffix(".json"))}


def step_connects(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_connect

    out = raw / "connects.json"
    sizes = ["--connects", "1000", "--rounds", "1"] if args.quick else ["--connects", "5000", "--rounds", "3"]
    code = bench_connect.main([*sizes, "--concurrency", "64", "--aedes", "--json", str(out)])
    return bench_connect.suite_rows(json.loads(out.read_text())), {"exit": code, "raw": str(out)}


def step_idle(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    cmd = [sys.executable, "-m", "bench.bench_idle", "--connections", str(args.idle_connections),
           "--rounds", str(args.idle_rounds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=IDLE_TIMEOUT, cwd=REPO)
    out = raw / "idle.txt"
    out.write_text(proc.stdout + proc.stderr)
    print(proc.stdout, end="", flush=True)
    rows = idle_rows(proc.stdout, args.idle_connections)
    code = proc.returncode if rows else (proc.returncode or 1)
    status: dict[str, Any] = {"exit": code, "raw": str(out)}
    if not rows:
        status["error"] = "no result table in bench_idle's output: " + (proc.stderr.strip().splitlines() or ["-"])[-1]
    return rows, status


def step_subscriptions(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_subscriptions

    out = raw / "subscriptions.json"
    code = bench_subscriptions.main(["--quick", "--sizes", args.sub_sizes, "--out", str(out)])
    return subscription_rows(json.loads(out.read_text())), {"exit": code, "raw": str(out)}


def step_retained(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_retained

    out = raw / "retained.json"
    code = bench_retained.main(["--quick", "--sizes", args.ret_sizes, "--out", str(out)])
    return retained_rows(json.loads(out.read_text())), {"exit": code, "raw": str(out)}


def step_fleet(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_storm

    out = raw / "fleet.json"
    sizes = ["--connects", "1000", "--clients", "2000"] if args.quick else []
    code = bench_storm.main([*sizes, "--json", str(out)])
    return bench_storm.suite_rows(json.loads(out.read_text())), {"exit": code, "raw": str(out)}


def step_cluster(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_cluster

    out = raw / "cluster.json"
    sizes = ["--runs", "1", "--duration", "2"] if args.quick else []
    bench_cluster.main([*sizes, "--json", str(out)])
    return bench_cluster.suite_rows(json.loads(out.read_text())), {"exit": 0, "raw": str(out)}


def step_latency(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_latency

    out = raw / "latency.json"
    scenarios = "qos1-pairs" if args.quick else LATENCY_SCENARIOS
    code = bench_latency.main((["--quick"] if args.quick else []) + ["--scenarios", scenarios, "--json", str(out)])
    return bench_latency.suite_rows(json.loads(out.read_text())), {"exit": code, "raw": str(out)}


def step_replicas(args: argparse.Namespace, raw: Path) -> tuple[list[Row], dict[str, Any]]:
    from bench import bench_replicas

    out = raw / "replicas.json"
    code = bench_replicas.main(["--quick", "--out", str(out)])
    return bench_replicas.suite_rows(json.loads(out.read_text())["summary"]), {"exit": code, "raw": str(out)}


RUNNERS: dict[str, Callable[[argparse.Namespace, Path], tuple[list[Row], dict[str, Any]]]] = {
    "compare": step_compare, "connects": step_connects, "idle": step_idle, "subscriptions": step_subscriptions,
    "retained": step_retained,
    "fleet": step_fleet, "cluster": step_cluster, "latency": step_latency, "replicas": step_replicas,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    desc = machine(REPO)
    raw: Path = args.out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    steps: dict[str, dict[str, Any]] = {}
    for name in (*STEPS, *(("replicas",) if args.replicas else ())):
        if name in args.skipped:
            steps[name] = {"skipped": True}
            continue
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            step_rows, status = RUNNERS[name](args, raw)
            rows += step_rows
        except Exception:
            status = {"exit": 1, "error": traceback.format_exc().strip().splitlines()[-1]}
            traceback.print_exc()
        status["seconds"] = round(time.monotonic() - t0, 1)
        steps[name] = status
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "-m", "bench.suite", *argv])
    path = write_summary(args.out_dir, started, command, desc, rows, steps)
    print(f"\n# vmqpy bench suite, {started:%Y-%m-%d %H:%M} UTC")
    print(", ".join(f"{k} {v}" for k, v in desc.items()))
    print()
    print(headline(rows))
    print(render(rows))
    for name, status in steps.items():
        if status.get("exit") or status.get("error"):
            print(f"step {name} FAILED: {status.get('error') or 'exit status ' + str(status['exit'])}")
    print(f"written: {path}")
    return 1 if any(s.get("exit") or s.get("error") for s in steps.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
