"""One worker against two: `vmqpy start --workers 1` and `--workers 2` on one MQTT port, rounds alternating
(issue 38, "Every core"; docs/scaling.md).

Each round runs the load generator (bench.loadgen, pairs, 64-byte payloads) against the supervisor's one port: with
two workers the kernel (SO_REUSEPORT) puts each client on either worker, so about half of the pairs cross the
local cluster. Reported per layout, medians of the rounds: delivered msgs/s; the workers' CPU per delivered message
(utime + stime of every worker process, /proc/PID/stat); the load generator's share of the machine (its worker
processes' CPU); the machine's idle share; and the share of messages that crossed (the workers'
`cluster.forward_entries_received` over the messages delivered). The crossing hop's cost is what a crossing
message costs beyond a same-worker one: (CPU per message with two workers - with one) / crossed share, as a
multiple of the one-worker cost.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_workers [--rounds R] [--duration S] [--pairs P]
        [--qos 0 1] [--generators G]

`--generators` is the load generator's process count (default 1: a light generator that leaves the second core
to the brokers; the scenario's windows, not the generator, limit a closed-loop run then).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import HOST, NO_ADDRESS_LIMITS, cpu_seconds, free_port, port_open
from bench.loadgen import Scenario, run
from chaos import processes
from chaos.ports import consecutive_ports
from vmqpy.workers.supervisor import started_pids

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0


@dataclass
class Supervised:
    """`vmqpy start --workers N` in a work directory of its own."""

    count: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    http_port: int = 0

    def start(self) -> Supervised:
        self.port = free_port()
        cluster = consecutive_ports(HOST, self.count)
        self.http_port = consecutive_ports(HOST, self.count)
        config = self.workdir / "workers.conf"
        config.write_text(
            f"nodename = bench@{HOST}\n"
            f"listener.tcp.default = {HOST}:{self.port}\n"
            f"listener.vmq.clustering = {HOST}:{cluster}\n"
            f"listener.http.default = {HOST}:{self.http_port}\n"
            f"platform_data_dir = {self.workdir / 'data'}\n"
            "allow_anonymous = on\n"
            "distributed_cookie = bench-workers-cookie-a-long-random-secret-0123456789\n"
            "log.console.level = error\n" + NO_ADDRESS_LIMITS)
        with open(self.workdir / "supervisor.log", "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vmqpy", "start", "--config", str(config), "--workers", str(self.count)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        deadline = time.monotonic() + START_TIMEOUT
        while not (port_open(self.port) and len(self.pids()) == self.count and self.joined()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"--workers {self.count} did not start:\n{self.log()[-3000:]}")
            time.sleep(0.3)
        return self

    def log(self) -> str:
        return (self.workdir / "supervisor.log").read_text(errors="replace")

    def pids(self) -> list[int]:
        return list(started_pids(self.log()).values())

    def admin(self, worker: int, *args: str) -> list[dict[str, object]]:
        """`vmq-admin --json ARGS` against worker `worker` (from 1)."""
        data_dir = self.workdir / ("data" if worker == 1 else f"data-w{worker}")
        url = f"http://{HOST}:{self.http_port + worker - 1}"
        done = subprocess.run([sys.executable, "-m", "admin.cli.main", "--url", url, "--data-dir", str(data_dir),
                               "--json", *args],
                              capture_output=True, text=True, timeout=30, cwd=REPO, check=False)
        if done.returncode != 0:
            return []
        rows: list[dict[str, object]] = json.loads(done.stdout)
        return rows

    def joined(self) -> bool:
        if self.count == 1:
            return True
        rows = self.admin(1, "cluster", "show")
        return len(rows) == self.count and all(row.get("Ready") for row in rows)

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids())

    def forwarded(self) -> float:
        """The messages the workers received from one another so far (`cluster.forward_entries_received`)."""
        return sum(float(str(row["Value"])) for worker in range(1, self.count + 1)
                   for row in self.admin(worker, "metrics", "show")
                   if row["Metric"] == "cluster.forward_entries_received")

    def stop(self) -> None:
        if self.process is not None:
            processes.stop(self.process)  # SIGTERM to the supervisor's PID: it stops its workers by theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--qos", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--generators", type=int, default=1)
    args = parser.parse_args()
    rows: dict[tuple[int, int], list[tuple[float, float, float, float, float]]] = {}
    lost = 0
    for round_number in range(args.rounds):
        for count in ((1, 2) if round_number % 2 == 0 else (2, 1)):
            workdir = Path(tempfile.mkdtemp(prefix=f"bench-workers{count}-"))
            supervised = Supervised(count, workdir)
            try:
                supervised.start()
                for qos in args.qos:
                    scenario = Scenario(f"qos{qos}-pairs{args.pairs}", "pairs", args.pairs, qos)
                    f0 = supervised.forwarded()
                    result = run(HOST, supervised.port, scenario, duration=args.duration, warmup=1.0, drain=5.0,
                                 procs=args.generators, probe=supervised.cpu)
                    crossed = (supervised.forwarded() - f0) / max(1, result.delivered_total)
                    lost += result.acked_lost
                    cpu_us = (result.broker_cpu or 0.0) / 100.0 * args.duration / max(1, result.delivered_in_window)
                    generator = sum(result.loadgen_cpu)
                    idle = 100.0 * (os.cpu_count() or 1) - (result.machine_cpu or 0.0)
                    rows.setdefault((qos, count), []).append(
                        (result.rate, cpu_us * 1e6, generator, idle, crossed))
            finally:
                supervised.stop()
                shutil.rmtree(workdir, ignore_errors=True)
    print(f"# vmqpy start --workers 1 vs 2 on {os.cpu_count()} cores: {args.pairs} pairs, 64-byte payloads, "
          f"{args.generators} load generator process(es); medians of {args.rounds} alternating rounds of "
          f"{args.duration:g} s\n")
    print("| QoS | workers | delivered msgs/s | workers' CPU per message | generator CPU | machine idle "
          "| crossed | rounds (msgs/s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for (qos, count), values in sorted(rows.items()):
        med = [statistics.median(v[i] for v in values) for i in range(5)]
        shown = ", ".join(f"{v[0]:,.0f}" for v in values)
        print(f"| {qos} | {count} | {med[0]:,.0f} | {med[1]:.1f} us | {med[2]:.0f} % | {med[3]:.0f} % "
              f"| {med[4]:.0%} | {shown} |")
    for qos in args.qos:
        one, two = rows.get((qos, 1), []), rows.get((qos, 2), [])
        # per round (the crossed share differs from round to round: the kernel places the clients), then the median
        hops = [(b[1] - a[1]) / b[4] for a, b in zip(one, two, strict=False) if b[4] > 0]
        if hops:
            hop, cpu1 = statistics.median(hops), statistics.median(v[1] for v in one)
            print(f"\nQoS {qos}: a crossing message costs {hop:.1f} us more than a same-worker one "
                  f"({(cpu1 + hop) / cpu1:.2f}x the one-worker CPU per message; rounds: "
                  f"{', '.join(f'{h:.1f}' for h in hops)} us)")
    if lost:
        print(f"\n!! {lost} acknowledged QoS 1 messages lost")


if __name__ == "__main__":
    main()
