"""Cluster benchmarks: cross-node vs same-node delivery, and how long a partition takes to be detected.

Run: ``.venv/bin/python -m bench.bench_cluster [--runs 3] [--duration 5]`` (as root: the partition figure uses
iptables DROP rules in the project's own chain, removed at the end). Starts two vmqpy nodes on 127.0.0.11 and
127.0.0.12, joins them with vmq-admin, then alternates runs: publishers and subscribers on node 1 (same node)
and publishers on node 1 with subscribers on node 2 (cross node). Medians of the runs and of per-run ratios.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.loadgen import Scenario, run
from tests.integration.cluster import ClusterNode, cut, heal, join_all, partition_chain


def detection_time(a: ClusterNode, b: ClusterNode, timeout: float = 30.0) -> float:
    """Seconds from the DROP rules until node a's `cluster show` reports b unreachable."""
    with partition_chain():
        start = time.monotonic()
        cut(a, b)
        while time.monotonic() - start < timeout:
            rows = {r["Node"]: r for r in a.show()}
            if not rows[b.name]["Reachable"]:
                elapsed = time.monotonic() - start
                break
            time.sleep(0.05)
        else:
            elapsed = float("nan")
        heal()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(r["Reachable"] for r in a.show()):
        time.sleep(0.1)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--runs-only-detection", action="store_true", help="skip the load runs")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    nodes = [ClusterNode(i, tmp, {"log.console.level": "warning"}) for i in (1, 2)]
    try:
        for node in nodes:
            node.start()
        join_all(nodes)
        n1, n2 = nodes
        detection = [detection_time(n1, n2) for _ in range(5)] if shutil.which("iptables") else []
        rows: dict[str, list[tuple[float, float | None]]] = {}
        ratios: dict[str, list[float]] = {}
        for qos in () if args.runs_only_detection else (0, 1):
            scenario = Scenario(f"qos{qos}-pairs{args.pairs}", "pairs", args.pairs, qos)
            for _ in range(args.runs):
                same = run(n1.host, n1.mqtt_port, scenario, duration=args.duration)
                cross = run(n1.host, n1.mqtt_port, scenario, duration=args.duration,
                            sub_addr=(n2.host, n2.mqtt_port))
                rows.setdefault(f"{scenario.name} same node", []).append((same.rate, same.p99_ms))
                rows.setdefault(f"{scenario.name} cross node", []).append((cross.rate, cross.p99_ms))
                ratios.setdefault(scenario.name, []).append(cross.rate / same.rate if same.rate else 0.0)
                if qos and cross.acked_lost:
                    print(f"!! {cross.acked_lost} acknowledged QoS 1 messages lost cross-node")
        print(f"# vmqpy cluster: 2 nodes, {args.pairs} pairs, 64-byte payloads, {args.runs} runs of "
              f"{args.duration:g} s\n")
        print("| scenario | delivered msg/s (median) | p99 ms (median) |")
        print("|---|---:|---:|")
        for name, values in rows.items():
            rate = statistics.median(v[0] for v in values)
            p99s = [v[1] for v in values if v[1] is not None]
            p99 = f"{statistics.median(p99s):.1f}" if p99s else "-"
            print(f"| {name} | {rate:,.0f} | {p99} |")
        print()
        for name, values in ratios.items():
            print(f"cross-node / same-node, {name}: {statistics.median(values):.2f}x (target >= 0.7x)")
        if detection:
            shown = ", ".join(f"{t:.2f}" for t in detection)
            print(f"\npartition detection (iptables DROP until `cluster show` says unreachable, measured before the "
                  f"load runs), cluster.detect_timeout 1 s: median {statistics.median(detection):.2f} s of [{shown}] "
                  f"(target < 1.5 s)")
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
