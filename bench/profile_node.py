"""Where a broker's CPU goes per message: `perf record` on the broker process while the load generator runs a
scenario, the CPU time per delivered message split by what ran it (the kernel, the interpreter, uvloop, vmqpy's
compiled rooms, the C library, Mosquitto's own code), and the functions that took the most.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.profile_node [--scenario qos1-pairs10] [--rate R]
        [--brokers vmqpy,mosquitto] [--seconds 4] [--top 15]

For each broker in turn: a fresh broker (`bench.brokers.BrokerProcess`, the limits of `bench.compare`), the
scenario for warmup + `--seconds` + 2 s (closed loop, or `--rate` msgs/s delivered, open loop as
`bench.bench_latency` runs it), and `perf record -F 1999 -g` on the broker for `--seconds` inside the window. The
broker's CPU per message is its CPU time over the window (/proc) divided by the deliveries in it; the shares are
perf's samples by shared object. With `--rate`, a broker's CPU per message falls as the rate rises when its cost
is per wake-up rather than per message (each message alone in a read at low rates). `--idle` measures instead
each broker's CPU with no client at all, per thread, from /proc/PID/task/*/schedstat (time on CPU and the times
it was scheduled): what an idle node spends on its timers.

The machine has no hardware counters (a virtual machine: `perf stat` reports no cycles or instructions), so perf
samples on the CPU clock; a sample in `finish_task_switch` is the cost of being woken and switched in.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import loadgen
from bench.brokers import KINDS, BrokerProcess

PERF_HZ = 1999
_SHARE = re.compile(r"^\s*([0-9.]+)%\s+(\S.*?)\s*$")
_SYMBOL = re.compile(r"^\s*([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$")


def category(dso: str) -> str:
    """What ran a sample, from its shared object's name."""
    if dso.startswith("[kernel"):
        return "kernel"
    if dso.startswith("libpython"):
        return "interpreter"
    if dso.startswith("loop.cpython"):
        return "uvloop"
    if "__mypyc" in dso:
        return "vmqpy compiled"
    if dso.startswith("libc.so"):
        return "libc"
    if dso in ("mosquitto",):
        return "mosquitto"
    return "other"


def dso_shares(report: str) -> dict[str, float]:
    """`perf report --sort dso --stdio -g none` as {category: percent of the samples} (pure; unit-tested)."""
    out: dict[str, float] = {}
    for line in report.splitlines():
        m = _SHARE.match(line)
        if m:
            cat = category(m.group(2))
            out[cat] = out.get(cat, 0.0) + float(m.group(1))
    return out


def top_symbols(report: str, n: int) -> list[tuple[float, str, str]]:
    """`perf report --sort dso,sym --stdio -g none` as its first `n` (percent, shared object, symbol)."""
    out = []
    for line in report.splitlines():
        m = _SYMBOL.match(line)
        if m:
            out.append((float(m.group(1)), m.group(2), m.group(3)))
            if len(out) == n:
                break
    return out


def perf_report(data: Path, sort: str) -> str:
    return subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g",
                           "none"], capture_output=True, text=True, timeout=120).stdout


def profile(kind: str, sc: loadgen.Scenario, rate: float | None, seconds: float, tmp: Path, top: int) -> None:
    data = tmp / f"{kind}.perf"
    with BrokerProcess(kind) as broker:
        def record() -> None:
            time.sleep(1.5)  # the clients connect, the warmup (1 s) begins
            subprocess.run(["perf", "record", "-F", str(PERF_HZ), "-g", "-o", str(data), "-p", str(broker.pid),
                            "--", "sleep", str(seconds)], capture_output=True, timeout=seconds + 60)

        recorder = threading.Thread(target=record)
        recorder.start()
        res = loadgen.run(broker.host, broker.port, sc, seconds + 2, 1.0, 3.0, 2, probe=broker.cpu_seconds, rate=rate)
        recorder.join()
    if not data.exists() or res.broker_cpu is None or not res.rate:
        print(f"{kind}: no profile (perf not allowed, or nothing delivered: {res.errors[:2]})")
        return
    per_msg = res.broker_cpu / 100 / res.rate * 1e6
    shares = dso_shares(perf_report(data, "dso"))
    split = ", ".join(f"{cat} {share / 100 * per_msg:.1f} ({share:.0f} %)"
                      for cat, share in sorted(shares.items(), key=lambda kv: -kv[1]))
    print(f"\n{kind}: {res.rate:,.0f} msgs/s delivered, {per_msg:.1f} us of CPU per message: {split}", flush=True)
    for pct, dso, sym in top_symbols(perf_report(data, "dso,sym"), top):
        print(f"  {pct:5.2f} %  {pct / 100 * per_msg:5.1f} us  {dso}  {sym}")


def thread_times(pid: int) -> dict[str, tuple[int, int]]:
    """Per thread id: (ns on CPU, times scheduled) from /proc/PID/task/TID/schedstat."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        run_ns, _wait, slices = (int(v) for v in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        out[tid] = (run_ns, slices)
    return out


def idle(kind: str, seconds: float) -> None:
    with BrokerProcess(kind) as broker:
        time.sleep(3.0)
        before = thread_times(broker.pid)
        time.sleep(seconds)
        after = thread_times(broker.pid)
    total = 0.0
    for tid, (run_ns, slices) in after.items():
        ran = (run_ns - before.get(tid, (0, 0))[0]) / seconds / 1e6
        woke = (slices - before.get(tid, (0, 0))[1]) / seconds
        total += ran
        if woke:
            print(f"{kind} thread {tid}: {ran:.1f} ms of CPU per s, scheduled {woke:.0f} times per s, "
                  f"{ran / woke * 1e3:.0f} us each")
    print(f"{kind}: {total:.1f} ms of CPU per s idle", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_node", description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="qos1-pairs10", help="a bench.compare scenario (default qos1-pairs10)")
    ap.add_argument("--rate", type=float, default=None, help="fixed rate, delivered msgs/s (default: closed loop)")
    ap.add_argument("--brokers", default=",".join(KINDS), help="comma-separated (default vmqpy,mosquitto)")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds recorded (default 4)")
    ap.add_argument("--top", type=int, default=15, help="functions listed per broker (default 15)")
    ap.add_argument("--idle", action="store_true", help="CPU of each broker with no client, per thread")
    args = ap.parse_args(argv)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if args.idle:
        for kind in brokers:
            idle(kind, max(args.seconds, 10.0))
        return 0
    known = {s.name: s for s in loadgen.default_scenarios()}
    if args.scenario not in known:
        ap.error(f"--scenario: one of {', '.join(known)}")
    with tempfile.TemporaryDirectory(prefix="profile-node-") as tmp:
        for kind in brokers:
            profile(kind, known[args.scenario], args.rate, args.seconds, Path(tmp), args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
