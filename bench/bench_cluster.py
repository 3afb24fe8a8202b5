"""Cluster benchmarks: cross-node vs same-node delivery, and how long a partition takes to be detected.

Run: ``.venv/bin/python -m bench.bench_cluster [--runs 3] [--duration 5]`` (as root: the partition figure uses
iptables DROP rules in the project's own chain, removed at the end). Starts two vmqpy nodes on 127.0.0.11 and
127.0.0.12, joins them with vmq-admin, then alternates runs: publishers and subscribers on node 1 (same node)
and publishers on node 1 with subscribers on node 2 (cross node). Medians of the runs and of per-run ratios.

``--tls-cost``: what cluster links over TLS cost (docs/performance.md). Alternates rounds of a two-node cluster
with plain links and one with TLS links (``cluster.tls.*``, certificates made with trustme in the temporary
directory); each round runs the cross-node scenarios (QoS 0 and 1) and reads both nodes' CPU seconds
(/proc/PID/stat) around the measurement window: node CPU per delivered message = CPU seconds / deliveries.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.loadgen import Scenario, run
from bench.loadgen.results import RunResult
from tests.integration.cluster import ClusterNode, cut, heal, join_all, partition_chain

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(nodes: list[ClusterNode]) -> float:
    """User + system CPU seconds of the node processes so far."""
    total = 0.0
    for node in nodes:
        assert node.proc is not None
        fields = Path(f"/proc/{node.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)
    return total


def cpu_per_message(result: RunResult) -> float:
    """The nodes' CPU seconds per message delivered in the measurement window (a `run` given a `probe`)."""
    return (result.broker_cpu or 0.0) / 100 * result.window_s / max(1, result.delivered_in_window)


def tls_keys(directory: Path) -> dict[str, str]:
    """cluster.tls.* for every node of the bench cluster: one CA, one certificate (made here, thrown away)."""
    import trustme  # a test extra: only this mode needs it

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("vmqpy-bench")
    paths = {"cafile": directory / "ca.pem", "certfile": directory / "cert.pem", "keyfile": directory / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["cafile"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["certfile"]))
    cert.private_key_pem.write_to_path(str(paths["keyfile"]))
    return {f"cluster.tls.{option}": str(path) for option, path in paths.items()}


def tls_cost(runs: int, duration: float, pairs: int) -> None:
    """Cross-node msg/s and node CPU per message, plain links vs TLS links, alternating rounds."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-tls-"))
    keys = tls_keys(tmp / "certs")
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    try:
        for round_no in range(runs):
            for mode in ("plain", "tls"):
                extra = {"log.console.level": "warning", **(keys if mode == "tls" else {})}
                nodes = [ClusterNode(i, tmp / f"{mode}{round_no}", extra) for i in (1, 2)]
                try:
                    for node in nodes:
                        node.start()
                    join_all(nodes)
                    n1, n2 = nodes

                    def probe(nodes: list[ClusterNode] = nodes) -> float:
                        return cpu_seconds(nodes)

                    for qos in (0, 1):
                        scenario = Scenario(f"qos{qos}-pairs{pairs}", "pairs", pairs, qos)
                        result = run(n1.host, n1.mqtt_port, scenario, duration=duration,
                                     sub_addr=(n2.host, n2.mqtt_port), probe=probe)
                        results.setdefault((mode, qos), []).append((result.rate, cpu_per_message(result)))
                finally:
                    for node in nodes:
                        node.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# cluster links plain vs TLS: 2 nodes, {pairs} pairs cross node (publishers on node 1, subscribers on "
          f"node 2), 64-byte payloads, medians of {runs} alternating rounds of {duration:g} s\n")
    print("| links | QoS | delivered msg/s | node CPU per message (both nodes) | rounds (msg/s) |")
    print("|---|---|---:|---:|---|")
    for (mode, qos), values in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
        rate = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        shown = ", ".join(f"{v[0]:,.0f}" for v in values)
        print(f"| {mode} | {qos} | {rate:,.0f} | {cpu * 1e6:.0f} us | {shown} |")


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
    parser.add_argument("--tls-cost", action="store_true", help="plain vs TLS cluster links, cross node only")
    args = parser.parse_args()
    if args.tls_cost:
        tls_cost(args.runs, args.duration, args.pairs)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    nodes = [ClusterNode(i, tmp, {"log.console.level": "warning"}) for i in (1, 2)]
    try:
        for node in nodes:
            node.start()
        join_all(nodes)
        n1, n2 = nodes
        detection = [detection_time(n1, n2) for _ in range(5)] if shutil.which("iptables") else []
        rows: dict[str, list[tuple[float, float | None, float]]] = {}
        ratios: dict[str, list[float]] = {}
        cpu_ratios: dict[str, list[float]] = {}

        def probe() -> float:
            return cpu_seconds(nodes)

        for qos in () if args.runs_only_detection else (0, 1):
            scenario = Scenario(f"qos{qos}-pairs{args.pairs}", "pairs", args.pairs, qos)
            for _ in range(args.runs):
                same = run(n1.host, n1.mqtt_port, scenario, duration=args.duration, probe=probe)
                cross = run(n1.host, n1.mqtt_port, scenario, duration=args.duration,
                            sub_addr=(n2.host, n2.mqtt_port), probe=probe)
                same_cpu, cross_cpu = cpu_per_message(same), cpu_per_message(cross)
                rows.setdefault(f"{scenario.name} same node", []).append((same.rate, same.p99_ms, same_cpu))
                rows.setdefault(f"{scenario.name} cross node", []).append((cross.rate, cross.p99_ms, cross_cpu))
                ratios.setdefault(scenario.name, []).append(cross.rate / same.rate if same.rate else 0.0)
                cpu_ratios.setdefault(scenario.name, []).append(cross_cpu / same_cpu if same_cpu else 0.0)
                if qos and cross.acked_lost:
                    print(f"!! {cross.acked_lost} acknowledged QoS 1 messages lost cross-node")
        print(f"# vmqpy cluster: 2 nodes, {args.pairs} pairs, 64-byte payloads, {args.runs} runs of "
              f"{args.duration:g} s\n")
        print("| scenario | delivered msg/s (median) | p99 ms (median) | CPU of both nodes per message (median) |")
        print("|---|---:|---:|---:|")
        for name, values in rows.items():
            rate = statistics.median(v[0] for v in values)
            p99s = [v[1] for v in values if v[1] is not None]
            p99 = f"{statistics.median(p99s):.1f}" if p99s else "-"
            cpu = statistics.median(v[2] for v in values)
            print(f"| {name} | {rate:,.0f} | {p99} | {cpu * 1e6:.1f} us |")
        print()
        for name, values in ratios.items():
            print(f"cross-node / same-node, {name}: {statistics.median(values):.2f}x (target >= 0.7x)")
        for name, values in cpu_ratios.items():
            shown = ", ".join(f"{v:.2f}" for v in values)
            print(f"CPU per message cross-node / same-node, {name}: {statistics.median(values):.2f}x of [{shown}] "
                  f"(issue 21 target <= 1.3x)")
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
