"""Cost curve of metadata keys on a three-node cluster (issue 21): anti-entropy at rest, and a fresh node's catch-up.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_keys [--quick] [--sizes 1k,10k,100k]

For every size N (in increasing order) a fresh cluster of three nodes on 127.0.0.11-13 (the test harness of
tests/integration/cluster.py: real processes joined with the real `vmq-admin cluster join`). N retained
messages (64 bytes) are published on node 1 through MQTT; each is one key of the replicated metadata store (the
`retain` prefix, /work/shared/DESIGN.md). Then:

- replicated: seconds until every node holds N retained messages (`/status.json` of the admin API);
- at rest: each node's CPU (utime + stime of /proc/PID/stat) over `--rest` seconds with no client and no
  write, as % of a core: the cost of anti-entropy and the other periodic work while nothing changes;
- catch-up: a fourth node, empty, is started and joined to node 1; seconds from the join command until it
  holds N retained messages, its CPU meanwhile, and the bytes of the anti-entropy exchanges it took part in
  (`bytes_received` and `bytes_sent` of the `md_exchange` events of its replication log);
- publish latency of the existing nodes while it catches up: a probe client on node 1 publishes a QoS 1
  message to a topic it subscribes to every 10 ms (bench_retained.Probe), from 3 s before the join until the
  fresh node caught up; p50/p99 of those round trips in the 3 s before (normal) and during the catch-up
  (target: p99 during at most 2x normal);
- silences: the `cluster peer silent` warnings and `event loop stalled` warnings in the nodes' logs.

The cluster is stopped (every node by its PID) before the next size. Writes the figures as JSON (`--out`, default
bench/results/keys.json) and, with `--plot`, the curves (default docs/images/curve-keys.png).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.bench_retained import Probe, create_retained_on
from bench.brokers import cpu_seconds
from bench.curves_common import IMAGES, RESULTS, parse_sizes, plot, write_json
from bench.keys_results import merged, result_of
from chaos.cluster import Cluster
from tests.integration.cluster import ClusterNode

FULL_SIZES = "1k,10k,100k"
QUICK_SIZES = "1k,10k"
WAIT_LIMIT = 900.0


def retained_held(node: ClusterNode) -> int | None:
    """How many retained messages `node` holds (None if it does not answer)."""
    try:
        request = urllib.request.Request(f"{node.url}/status.json", headers={"x-api-key": node.api_key()})
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = json.loads(answer.read())
    except (OSError, ValueError):
        return None
    for row in body.get("nodes", []):
        if row.get("node") == node.name:
            return int(row.get("retained", 0))
    return None


def wait_held(nodes: list[ClusterNode], n: int, limit: float = WAIT_LIMIT) -> float | None:
    """Seconds until every node holds `n` retained messages; None if not within `limit`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if all(retained_held(node) == n for node in nodes):
            return time.monotonic() - t0
        time.sleep(0.25)
    return None


def node_cpu(node: ClusterNode) -> float:
    return cpu_seconds(node.pid) if node.pid is not None else 0.0


def exchange_bytes(node: ClusterNode) -> tuple[int, int, int]:
    """(exchanges, bytes received, bytes sent) of the md_exchange events in `node`'s replication log."""
    count = received = sent = 0
    path = node.data_dir / "replication.log"
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return 0, 0, 0
    for line in lines:
        if '"md_exchange"' not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        count += 1
        received += int(event.get("bytes_received", 0))
        sent += int(event.get("bytes_sent", 0))
    return count, received, sent


class ProbeThread:
    """bench_retained.Probe on its own event loop in a thread, beside the bench's blocking steps."""

    def __init__(self, node: ClusterNode) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.probe: Probe = asyncio.run_coroutine_threadsafe(Probe.start(node.mqtt_port, node.host),
                                                             self.loop).result(30)

    def between(self, t0: float, t1: float) -> dict[str, float | int | None]:
        return asyncio.run_coroutine_threadsafe(self._between(t0, t1), self.loop).result(30)

    async def _between(self, t0: float, t1: float) -> dict[str, float | int | None]:
        return self.probe.between(t0, t1)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.probe.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            self.loop.close()


def log_warnings(nodes: list[ClusterNode], event: str) -> int:
    """How many lines of the nodes' logs carry `event`."""
    count = 0
    for node in nodes:
        try:
            count += node.log.read_text(errors="replace").count(event)
        except OSError:
            pass
    return count


WARNINGS = ("cluster peer silent", "event loop stalled")


def warnings_by_phase(nodes: list[ClusterNode], marks: list[tuple[str, float]]) -> list[dict[str, Any]]:
    """Every silent/stall warning line of the nodes' logs, with its node and the phase of the bench it fell in
    (`marks`: (phase, wall-clock start), in order; a line's time is the ISO stamp that starts it)."""
    found = []
    for node in nodes:
        try:
            lines = node.log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if not any(w in line for w in WARNINGS):
                continue
            try:
                at = datetime.fromisoformat(line.split(" ", 1)[0]).timestamp()
            except ValueError:
                at = None
            phase = "?" if at is None else next((name for name, t in reversed(marks) if at >= t), "start")
            found.append({"node": node.name, "phase": phase, "line": line.strip()[:300]})
    return found


def measure_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-keys-") as tmp:
        nodes = [ClusterNode(i, Path(tmp)) for i in (1, 2, 3)]
        fresh = ClusterNode(4, Path(tmp))
        cluster = Cluster(list(nodes))
        try:
            cluster.start()
            cluster.join()
            marks = [("publish", time.time())]
            t0 = time.monotonic()
            asyncio.run(create_retained_on(nodes[0].host, nodes[0].mqtt_port, 0, size, 4, 50))
            publish_s = time.monotonic() - t0
            marks.append(("replicate", time.time()))
            replicated = wait_held(nodes, size)
            if replicated is None:
                raise RuntimeError(f"{size} retained messages not on every node within {WAIT_LIMIT} s")
            marks.append(("rest", time.time()))
            time.sleep(2.0)  # the last exchanges after the writes
            before = [node_cpu(n) for n in nodes]
            time.sleep(args.rest)
            rest = [100 * (node_cpu(n) - b) / args.rest for n, b in zip(nodes, before, strict=True)]
            fresh.start()
            probe = ProbeThread(nodes[0])
            try:
                time.sleep(3.0)
                c0, t0 = node_cpu(fresh), time.monotonic()
                normal = probe.between(t0 - 3.0, t0)
                marks.append(("join", time.time()))
                answer = fresh.admin_cli("cluster", "join", f"discovery-node={nodes[0].discovery}")
                if answer.returncode != 0:
                    raise RuntimeError(f"join failed: {answer.stderr.strip()}")
                caught = wait_held([fresh], size)
                t1 = time.monotonic()
                marks.append(("after", time.time()))
                during = probe.between(t0, t1)
            finally:
                probe.stop()
            join_s = None if caught is None else t1 - t0
            join_cpu = node_cpu(fresh) - c0
            time.sleep(2.0)  # an exchange is logged when it ends, which may be just after the last key arrived
            exchanges, received, sent = exchange_bytes(fresh)
        finally:
            Cluster([*nodes, fresh]).stop()
            silences = log_warnings([*nodes, fresh], "cluster peer silent")
            stalls = log_warnings([*nodes, fresh], "event loop stalled")
            warnings = warnings_by_phase([*nodes, fresh], marks)
    return {"keys": size, "probe_normal": normal, "probe_during_join": during, "peer_silent_warnings": silences,
            "loop_stall_warnings": stalls, "warnings": warnings, "publish_s": publish_s,
            "replicated_s": publish_s + replicated,
            "rest_cpu_pct": rest, "rest_cpu_pct_max": max(rest), "join_s": join_s, "join_cpu_s": join_cpu,
            "exchanges": exchanges, "exchange_bytes_received": received, "exchange_bytes_sent": sent}


def run(args: argparse.Namespace) -> dict[str, Any]:
    points = []
    started = time.monotonic()
    for size in args.size_list:
        if time.monotonic() - started > args.budget:
            print(f"keys: stopped before {size:,}: over the --budget of {args.budget:g} s", flush=True)
            break
        p = measure_size(size, args)
        points.append(p)
        join = "did not catch up" if p["join_s"] is None else f"{p['join_s']:.1f} s"
        print(f"keys {size:>9,}: on 3 nodes after {p['replicated_s']:.1f} s; at rest "
              f"{'/'.join(f'{c:.1f}' for c in p['rest_cpu_pct'])} % CPU; fresh node caught up: {join}, "
              f"{p['join_cpu_s']:.1f} CPU s, {p['exchanges']} exchanges, {p['exchange_bytes_received']:,} B in / "
              f"{p['exchange_bytes_sent']:,} B out; probe p50/p99 normal {_ms(p['probe_normal'])}, during the "
              f"join {_ms(p['probe_during_join'])}; {p['peer_silent_warnings']} peer-silent and "
              f"{p['loop_stall_warnings']} loop-stall warnings", flush=True)
        for w in p["warnings"]:
            print(f"  {w['phase']:>9} {w['node']}: {w['line']}", flush=True)
    return result_of(points, args.rest)


def _ms(probe: dict[str, Any]) -> str:
    p50, p99 = probe.get("p50_ms"), probe.get("p99_ms")
    return "-" if p50 is None or p99 is None else f"{p50:.1f}/{p99:.1f} ms"


def draw(result: dict[str, Any], path: Path) -> None:
    pts = result["points"]
    xs = [float(p["keys"]) for p in pts]
    plot(path, "vmqpy, three-node cluster: cost vs number of metadata keys (retained messages)", "keys", [
        ("busiest node's CPU at rest (% of a core)", xs, [p["rest_cpu_pct_max"] for p in pts]),
        ("fresh node: join to caught up (s)", xs, [p["join_s"] for p in pts]),
        ("fresh node: exchange bytes in (MiB)", xs, [p["exchange_bytes_received"] / 2**20 for p in pts]),
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_keys", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 5 s at rest")
    ap.add_argument("--sizes", default=None, help=f"keys, increasing (default {FULL_SIZES})")
    ap.add_argument("--rest", type=float, default=None, help="seconds of CPU measured at rest (default 20; quick 5)")
    ap.add_argument("--budget", type=float, default=3600.0,
                    help="start no new size after this many seconds (default 3600)")
    ap.add_argument("--out", type=Path, default=RESULTS / "keys.json")
    ap.add_argument("--plot", type=Path, nargs="?", const=IMAGES / "curve-keys.png", default=None,
                    help="write the curves as a PNG (default path docs/images/curve-keys.png)")
    ap.add_argument("--from-json", default=None, metavar="A.json,B.json",
                    help="measure nothing: merge the points of these earlier runs (a size in several: the later "
                         "file's), write them with their slopes to --out and draw them with --plot")
    args = ap.parse_args(argv)
    args.from_json = [Path(p) for p in args.from_json.split(",") if p] if args.from_json else None
    try:
        args.size_list = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    except ValueError as e:
        ap.error(str(e))
    args.rest = args.rest if args.rest is not None else (5.0 if args.quick else 20.0)
    if args.rest <= 0:
        ap.error("--rest must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = merged(args.from_json) if args.from_json else run(args)
    write_json(args.out, result)
    if args.plot:
        draw(result, args.plot)
    print(f"written: {args.out}" + (f" and {args.plot}" if args.plot else ""))
    return 0 if result["points"] and all(p["join_s"] is not None for p in result["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
