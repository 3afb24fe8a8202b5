"""Cluster benchmarks: cross-node vs same-node delivery, and how long a partition takes to be detected.

Run: ``.venv/bin/python -m bench.bench_cluster [--runs 3] [--duration 5]`` (as root: the partition figure uses
iptables DROP rules in the project's own chain, removed at the end). Starts two vmqpy nodes on 127.0.0.11 and
127.0.0.12, joins them with vmq-admin, then alternates runs: publishers and subscribers on node 1 (same node)
and publishers on node 1 with subscribers on node 2 (cross node). Medians of the runs and of per-run ratios.

``--baseline DIR``: CPU per message (same node, cross node) of this tree and of another checkout side by side
(two clusters, alternating runs): ``git worktree add /tmp/base REV`` then ``--baseline /tmp/base``.

``--tls-cost``: what cluster links over TLS cost (docs/performance.md). Alternates rounds of a two-node cluster
with plain links and one with TLS links (``cluster.tls.*``, certificates made with trustme in the temporary
directory); each round runs the cross-node scenarios (QoS 0 and 1) and reads both nodes' CPU seconds
(/proc/PID/stat) around the measurement window: node CPU per delivered message = CPU seconds / deliveries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


def compare_trees(baseline: Path, runs: int, duration: float, pairs: int, qos_levels: tuple[int, ...] = (0, 1)) -> None:
    """CPU of both nodes per message, same node and cross node, of this source tree and of `baseline` (another
    checkout of vmqpy, e.g. `git worktree add /tmp/base REV`): two clusters side by side (this tree on 127.0.0.11
    and .12, the baseline on .13 and .14), the runs alternating between them, so that both see the same load of
    the machine. Prints the medians and the per-run ratios cross / same of each tree."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-trees-"))
    trees = {"this tree": Path.cwd(), "baseline": baseline.resolve()}
    clusters: dict[str, list[ClusterNode]] = {}
    try:
        for offset, (tree, source) in enumerate(trees.items()):
            nodes = [ClusterNode(2 * offset + i, tmp / f"t{offset}", {"log.console.level": "warning"}) for i in (1, 2)]
            for node in nodes:
                node.source = source
            clusters[tree] = nodes
            for node in nodes:
                node.start()
            join_all(nodes)
        cpu: dict[tuple[str, int, str], list[float]] = {}
        ratios: dict[tuple[str, int], list[float]] = {}
        p99: dict[tuple[str, int, str], list[float]] = {}
        for qos in qos_levels:
            scenario = Scenario(f"qos{qos}-pairs{pairs}", "pairs", pairs, qos)
            for run_no in range(runs):
                order = list(clusters.items()) if run_no % 2 == 0 else list(reversed(clusters.items()))
                for tree, nodes in order:
                    n1, n2 = nodes

                    def probe(nodes: list[ClusterNode] = nodes) -> float:
                        return cpu_seconds(nodes)

                    same = run(n1.host, n1.mqtt_port, scenario, duration=duration, probe=probe)
                    cross = run(n1.host, n1.mqtt_port, scenario, duration=duration,
                                sub_addr=(n2.host, n2.mqtt_port), probe=probe)
                    same_cpu, cross_cpu = cpu_per_message(same), cpu_per_message(cross)
                    for name, result in (("same", same), ("cross", cross)):
                        if result.p99_ms is not None:
                            p99.setdefault((tree, qos, name), []).append(result.p99_ms)
                    cpu.setdefault((tree, qos, "same"), []).append(same_cpu)
                    cpu.setdefault((tree, qos, "cross"), []).append(cross_cpu)
                    ratios.setdefault((tree, qos), []).append(cross_cpu / same_cpu if same_cpu else 0.0)
                    if qos and cross.acked_lost:
                        print(f"!! {tree}: {cross.acked_lost} acknowledged QoS 1 messages lost cross-node")
    finally:
        for nodes in clusters.values():
            for node in nodes:
                node.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# CPU of both nodes per delivered message: this tree ({trees['this tree']}) and the baseline "
          f"({trees['baseline']}), {pairs} pairs, 64-byte payloads, {runs} alternating runs of {duration:g} s\n")
    print("| tree | QoS | same node | cross node | cross / same (median of the runs) | runs | p99 ms same / cross |")
    print("|---|---|---:|---:|---:|---|---|")
    for (tree, qos), values in ratios.items():
        same_us = statistics.median(cpu[(tree, qos, "same")]) * 1e6
        cross_us = statistics.median(cpu[(tree, qos, "cross")]) * 1e6
        shown = ", ".join(f"{v:.2f}" for v in values)
        lat = " / ".join(f"{statistics.median(p99[(tree, qos, n)]):.1f}" if p99.get((tree, qos, n)) else "-"
                         for n in ("same", "cross"))
        print(f"| {tree} | {qos} | {same_us:.1f} us | {cross_us:.1f} us | {statistics.median(values):.2f}x | {shown} "
              f"| {lat} |")


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


def suite_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """bench.suite's rows (bench.suite_report.row) from the file `--json` writes: one per scenario; the ratio
    column is the CPU per message cross node / same node (issue 21 target at most 1.3x)."""
    from bench.suite_report import row

    out = []
    for name, r in result["rows"].items():
        ratio = result["cpu_ratios"].get(name.rsplit(" ", 2)[0]) if name.endswith("cross node") else None
        out.append(row(f"cluster {name}", "vmqpy", rate=r["rate"], ratio=ratio, cpu_us=r["cpu_us"],
                       p99_ms=r["p99_ms"], note="CPU of both nodes; ratio = CPU per message cross / same node"
                       if ratio is not None else "CPU of both nodes"))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--runs-only-detection", action="store_true", help="skip the load runs")
    parser.add_argument("--tls-cost", action="store_true", help="plain vs TLS cluster links, cross node only")
    parser.add_argument("--qos", type=int, nargs="+", choices=(0, 1), default=[0, 1], help="with --baseline")
    parser.add_argument("--baseline", type=Path, help="another vmqpy checkout: compare CPU per message with it")
    parser.add_argument("--json", type=Path, default=None, help="also write the medians here (bench.suite)")
    args = parser.parse_args(argv)
    if args.baseline is not None:
        compare_trees(args.baseline, args.runs, args.duration, args.pairs, tuple(args.qos))
        return
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
        if args.json is not None:
            summary: dict[str, Any] = {
                "rows": {}, "cpu_ratios": {k: statistics.median(v) for k, v in cpu_ratios.items()},
                "rate_ratios": {k: statistics.median(v) for k, v in ratios.items()}, "detection_s": detection}
            for name, values in rows.items():
                p99s = [v[1] for v in values if v[1] is not None]
                summary["rows"][name] = {"rate": statistics.median(v[0] for v in values),
                                         "p99_ms": statistics.median(p99s) if p99s else None,
                                         "cpu_us": statistics.median(v[2] for v in values) * 1e6}
            args.json.write_text(json.dumps(summary, indent=1))
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
