"""Spark convergence report on synthetic replication logs: ``python -m bench.bench_spark [--events N ...]``.

For each size (default 1,000,000 and 10,000,000 events) it writes the replication logs of a five-node cluster
(one file per node, the format of docs/replication-log.md), then runs the whole report as an operator would:
``python -m spark_analytics report --logs DIR --out OUT --master local[2]`` in a fresh process, and times it
(wall clock, Spark start-up included; the analysis alone is `run.analysis_seconds` of summary.json).

The synthetic run: 2,000 writes per second on 10,000 retained-message keys, written by the five nodes in turn;
each write is applied by the four other nodes 1-30 ms later (broadcast). Between 40 % and 55 % of the run n5
is partitioned away (cluster_view lines on every node): writes on either side reach only their side; at the
heal, n5 repairs each key's newest version by anti-entropy within 2 s and the other nodes get n5's writes the
same way; keys written on both sides get siblings until the owner's write-back 0.5 s later. Every node runs
one anti-entropy exchange per second and a GC every 10 s. About 4.8 events per write: 2,000 writes/s make
9,600 events per second of run, so 10 M events are a run of about 1,040 s.

Prints a markdown table: events, run, load averages before and after the run, log size, generation time,
report wall time, analysis time, events/s; then the median wall time of the runs of each size (``--runs N``
repeats the report N times on the same generated logs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

NODES = [f"n{i}@127.0.0.{10 + i}" for i in range(1, 6)]
RIDS = [f"{n}#17953309{i}1170" for i, n in enumerate(NODES)]
KEYS = 10_000
WRITES_PER_S = 2_000
# One md_write and four md_apply, less the applies across the partition (15 % of the run), plus the repairs,
# exchanges and GC runs: about 4.8 lines per write.
LINES_PER_WRITE = 4.8
VALUE = "kpPPAAABogIBvZoArW4xQDEyNy4wLjAuMTGkMjIuNQ=="
T0_NS = 1_795_330_000_000_000_000
MS = 1_000_000
PARTITIONED = 4  # index of n5


def _write(out: IO[str], node: int, ts: int, key: int, counter: int, writeback: bool = False) -> None:
    wb = ',"writeback":true' if writeback else ""
    out.write(
        f'{{"schema":1,"ts":{ts},"node":"{NODES[node]}","hlc":[{ts // MS},0,"{RIDS[node]}"],"event":"md_write",'
        f'"prefix":"retain","key":["","sensors/{key}"],"dot":["{RIDS[node]}",{counter}],"op":"put",'
        f'"value":"{VALUE}","context":{{"{RIDS[node]}":{counter - 1}}}{wb}}}\n'
    )


def _apply(out: IO[str], node: int, ts: int, key: int, origin: int, counter: int, via: str, siblings: int) -> None:
    out.write(
        f'{{"schema":1,"ts":{ts},"node":"{NODES[node]}","hlc":[{ts // MS},0,"{RIDS[node]}"],"event":"md_apply",'
        f'"origin":"{RIDS[origin]}","prefix":"retain","key":["","sensors/{key}"],"dot":["{RIDS[origin]}",{counter}],'
        f'"via":"{via}","siblings":{siblings}}}\n'
    )


def _exchange(out: IO[str], node: int, ts: int, peer: int, received: int, repaired: int) -> None:
    hit = repaired / received if received else 0.0
    out.write(
        f'{{"schema":1,"ts":{ts},"node":"{NODES[node]}","hlc":[{ts // MS},0,"{RIDS[node]}"],"event":"md_exchange",'
        f'"peer":"{NODES[peer]}","result":"ok","rounds":{1 + received // 100},"dots_asked":{received},'
        f'"objects_received":{received},"repaired":{repaired},"gaps":0,"bytes_sent":{40 + 12 * received},'
        f'"bytes_received":{120 + 180 * received},"duration":{0.002 + received * 1e-5:.6f},"hit_ratio":{hit}}}\n'
    )


def _view(out: IO[str], node: int, ts: int, groups: list[list[int]]) -> None:
    mine = next(g for g in groups if node in g)
    members = json.dumps(NODES, separators=(",", ":"))
    reach = json.dumps([NODES[i] for i in mine], separators=(",", ":"))
    grps = json.dumps([[NODES[i] for i in g] for g in groups], separators=(",", ":"))
    out.write(
        f'{{"schema":1,"ts":{ts},"node":"{NODES[node]}","hlc":[{ts // MS},0,"{RIDS[node]}"],'
        f'"event":"cluster_view","members":{members},"reachable":{reach},"groups":{grps},'
        f'"ready":{"true" if len(groups) == 1 else "false"},"majority":{"true" if 2 * len(mine) > 5 else "false"}}}\n'
    )


def _gc(out: IO[str], node: int, ts: int, pruned: int) -> None:
    out.write(
        f'{{"schema":1,"ts":{ts},"node":"{NODES[node]}","hlc":[{ts // MS},1,"{RIDS[node]}"],"event":"md_gc",'
        f'"dots_pruned":{pruned},"keys_deleted":0}}\n'
    )


def generate(directory: Path, events: int, seed: int = 1) -> dict[str, Any]:
    """Write `events` (about) replication-log lines for five nodes under `directory`; returns the run's shape."""
    rng = random.Random(seed)
    writes = max(int(events / LINES_PER_WRITE), 100)
    duration_ns = writes * 1_000_000_000 // WRITES_PER_S
    split_at = T0_NS + duration_ns * 40 // 100
    heal_at = T0_NS + duration_ns * 55 // 100
    files = []
    for node in NODES:
        (directory / node.split("@")[0]).mkdir(parents=True, exist_ok=True)
        files.append(open(directory / node.split("@")[0] / "replication.log", "w", encoding="utf-8",
                          buffering=1 << 20))
    counters = [0] * 5
    ALL = [[0, 1, 2, 3, 4]]
    SPLIT = [[0, 1, 2, 3], [4]]
    for n in range(5):
        _view(files[n], n, T0_NS + n * MS, ALL)
    for n in range(5):  # the partition: n5 sees it first, the others within a second
        _view(files[n], n, split_at + (0 if n == PARTITIONED else rng.randrange(800, 1_000) * MS),
              [[4], [0, 1, 2, 3]] if n == PARTITIONED else SPLIT)
    for n in range(5):
        _view(files[n], n, heal_at + rng.randrange(0, 50) * MS, ALL)
    heal_done = heal_at + 50 * MS
    # the newest version of each key written on each side of the partition: (node, counter, ts)
    majority_newest: dict[int, tuple[int, int]] = {}
    minority_newest: dict[int, tuple[int, int]] = {}
    lag = rng.lognormvariate
    step = 1_000_000_000 // WRITES_PER_S
    for i in range(writes):
        ts = T0_NS + i * step + rng.randrange(step)
        node = i % 5
        key = rng.randrange(KEYS)
        counters[node] += 1
        c = counters[node]
        _write(files[node], node, ts, key, c)
        partitioned = split_at <= ts < heal_at
        for other in range(5):
            if other == node:
                continue
            if partitioned and (other == PARTITIONED) != (node == PARTITIONED):
                continue  # across the partition: repaired after the heal
            _apply(files[other], other, ts + int(min(lag(1.5, 0.6), 30.0) * MS), key, node, c, "broadcast", 1)
        if partitioned:
            (minority_newest if node == PARTITIONED else majority_newest)[key] = (node, c)
    # After the heal: anti-entropy brings each side the other's newest versions within 2 s; keys written on
    # both sides hold siblings until the owner (the smaller replica id: the majority's writer) writes back.
    repaired = [0] * 5
    for key, (node, c) in majority_newest.items():
        at = heal_done + rng.randrange(2_000) * MS
        both = key in minority_newest
        _apply(files[PARTITIONED], PARTITIONED, at, key, node, c, "exchange", 2 if both else 1)
        repaired[PARTITIONED] += 1
        if both:
            counters[node] += 1
            wb = counters[node]
            wb_at = at + 500 * MS
            _write(files[node], node, wb_at, key, wb, writeback=True)
            for other in range(5):
                if other != node:
                    _apply(files[other], other, wb_at + int(min(lag(1.5, 0.6), 30.0) * MS), key, node, wb,
                           "broadcast", 1)
    for key, (node, c) in minority_newest.items():
        both = key in majority_newest
        for other in range(4):
            at = heal_done + rng.randrange(2_000) * MS
            _apply(files[other], other, at, key, node, c, "exchange", 2 if both else 1)
            repaired[other] += 1
    end = T0_NS + duration_ns + 3_000_000_000
    for n in range(5):
        peer = (n + 1) % 5
        for s in range(0, (end - T0_NS) // 1_000_000_000):
            at = T0_NS + s * 1_000_000_000 + (n * 7 + 3) * MS
            got = repaired[n] if heal_done <= at < heal_done + 1_000_000_000 else 0
            _exchange(files[n], n, at, peer, got, got)
            if s % 10 == 9:
                _gc(files[n], n, at + MS, rng.randrange(1_000, 5_000))
    for f in files:
        f.close()
    size = sum(p.stat().st_size for p in directory.rglob("replication.log"))
    lines = sum(1 for p in directory.rglob("replication.log") for _ in open(p, "rb"))
    return {"events": lines, "bytes": size, "writes": writes, "duration_s": duration_ns / 1e9}


def run_report(logs: Path, out: Path, master: str, conf: list[str]) -> tuple[float, dict[str, Any]]:
    cmd = [sys.executable, "-m", "spark_analytics", "report", "--logs", str(logs), "--out", str(out),
           "--master", master]
    for c in conf:
        cmd += ["--conf", c]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"report failed with status {done.returncode}")
    return wall, json.loads((out / "summary.json").read_text())


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_spark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, action="append", help="log lines per run (repeatable; default 1M and 10M)")
    p.add_argument("--runs", type=int, default=1, help="reports per size on the same generated logs (default 1)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE",
                   help="Spark settings for the report (default: spark.driver.memory=4g)")
    p.add_argument("--dir", type=Path, help="where to write the logs (default: a temporary directory, removed)")
    p.add_argument("--keep", action="store_true", help="keep the generated logs and reports")
    args = p.parse_args(argv)
    sizes = args.events or [1_000_000, 10_000_000]
    conf = args.conf if args.conf is not None else ["spark.driver.memory=4g"]
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-spark-"))
    rows = []
    try:
        for n in sizes:
            logs = base / f"logs-{n}"
            shutil.rmtree(logs, ignore_errors=True)
            gen_s, shape = _timed(lambda n=n, logs=logs: generate(logs, n))
            for run in range(1, args.runs + 1):
                load_before = _load()
                wall, summary = run_report(logs, base / f"report-{n}", args.master, conf)
                load = f"{load_before} / {_load()}"
                rows.append((shape, gen_s, run, wall, summary, load))
                print(f"{shape['events']:,} events, run {run}: report in {wall:.1f} s (load before/after {load})",
                      file=sys.stderr)
            if not args.keep:
                shutil.rmtree(logs, ignore_errors=True)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    cpu = os.cpu_count()
    print(f"\nSpark report on synthetic 5-node logs, `--master {args.master}` ({cpu} CPUs visible), "
          f"conf {' '.join(conf) or '-'}\n")
    print("| events | run | load avg before / after | log size | run length | generate | report (wall, with start-up) "
          "| analysis | events/s | heal converged in | partition p99 lag |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape, gen_s, run, wall, s, load in rows:
        heal = s["convergence"]["heals"][0]["seconds_to_converge"] if s["convergence"]["heals"] else None
        p99 = s["visibility"]["lag"].get("partition", {}).get("p99_ms")
        print(f"| {shape['events']:,} | {run} | {load} | {shape['bytes'] / 1e6:,.0f} MB | {shape['duration_s']:,.0f} s "
              f"| {gen_s:.0f} s | {wall:.1f} s | {s['run']['analysis_seconds']:.1f} s | {shape['events'] / wall:,.0f} "
              f"| {heal} s | {'-' if p99 is None else f'{p99:,.0f}'} ms |")
    medians = {}
    for shape, *_ in rows:
        if shape["events"] not in medians:
            medians[shape["events"]] = _median([w for sh, _, _, w, _, _ in rows if sh["events"] == shape["events"]])
    print()
    for events, wall in medians.items():
        print(f"median of {args.runs} run(s), {events:,} events: {wall:.1f} s")
    if len(medians) >= 2:
        items = list(medians.items())
        (e0, w0), (e1, w1) = items[0], items[-1]
        growth = (w1 / w0) / (e1 / e0)
        print(f"\nTime (medians) grew {w1 / w0:.1f}x for {e1 / e0:.1f}x the events ({growth:.2f} of linear).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
