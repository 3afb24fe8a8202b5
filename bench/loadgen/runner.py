"""The controller of a run, in the calling process: starts the worker processes (`worker`), drives them through
the timeline over pipes, measures CPU during the window and summarizes; and `main`, the command line
(`python -m bench.loadgen`).

Closed loop (the default): publishers send as fast as their windows allow. Fixed rate (`rate=R`): a total of R
msgs/s split over the publishers, each on its schedule (`schedule`, `paced`), latency from the due time.

Timeline of a run:
  connect and subscribe (subscribers first), all workers report ready
  t0 = now + 0.3 s       publishers start
  w0 = t0 + warmup       measurement window opens (deliveries and latencies count from here)
  w1 = w0 + duration     window closes, publishers stop sending; QoS 1 publishers wait for their PUBACKs
  drain                  subscribers wait until every sent message arrived, or the drain time is up
                         (QoS 0: also stop after 1 s without any delivery)
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import time
from collections.abc import Callable
from typing import Any

from bench.loadgen.clients import monotonic_ns
from bench.loadgen.results import PubResult, RunResult, SubResult, summarize
from bench.loadgen.scenarios import SHAPES, Scenario
from bench.loadgen.schedule import rate_milli
from bench.loadgen.worker import READY_TIMEOUT, run_worker

START_DELAY_NS = 300_000_000


def machine_busy_seconds() -> float:
    """CPU seconds all processors of the machine spent busy since boot (/proc/stat: all but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0.0
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


_tags = iter(range(1, 1 << 30))


def _recv_all(conns: list[multiprocessing.connection.Connection], expect: str, deadline: float) -> list[Any]:
    """One message of kind `expect` from every connection, by the monotonic `deadline`."""
    got: dict[int, Any] = {}
    for _ in range(100_000):  # bounded by the deadline
        if len(got) == len(conns):
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"workers did not report {expect!r} in time ({len(got)}/{len(conns)})")
        for c in multiprocessing.connection.wait([c for i, c in enumerate(conns) if i not in got], remaining):
            i = conns.index(c)  # type: ignore[arg-type]
            try:
                msg = conns[i].recv()
            except EOFError as e:
                raise RuntimeError(f"load generator worker {i} exited without reporting {expect!r}") from e
            if msg[0] == "error":
                raise RuntimeError(f"load generator worker {i} failed:\n{msg[1]}")
            if msg[0] != expect:
                raise RuntimeError(f"worker {i} sent {msg[0]!r}, expected {expect!r}")
            got[i] = msg
    return [got[i] for i in range(len(conns))]


def run(host: str, port: int, scenario: Scenario, duration: float = 5.0, warmup: float = 1.0, drain: float = 5.0,
        procs: int = 2, probe: Callable[[], float] | None = None,
        sub_addr: tuple[str, int] | None = None, rate: float | None = None) -> RunResult:
    """One run of `scenario` against the broker at host:port, with its clients in `procs` worker processes.

    `probe`, if given, returns the broker's CPU seconds; it is read at the start and at the end of the window.
    `sub_addr`, if given, is where the subscribers connect (another node of a cluster); publishers use host:port.
    `rate`, if given: fixed-rate mode, a total of `rate` msgs/s (`schedule`); ValueError if out of range.
    Worker processes are started with the "spawn" method: a script calling this needs the
    `if __name__ == "__main__":` guard.
    """
    if duration <= 0 or warmup < 0 or drain < 0:
        raise ValueError("duration must be > 0, warmup and drain >= 0")
    if rate is not None:
        rate_milli(rate)  # ValueError on a rate out of range, before any process starts
    tag = f"bench/{os.getpid()}x{next(_tags)}"
    plan = scenario.plan(tag, procs, rate)
    ctx = multiprocessing.get_context("spawn")
    feedback = ctx.RawArray("q", scenario.clients)  # per publisher: messages its subscriber received
    workers = []
    conns: list[multiprocessing.connection.Connection] = []
    try:
        for pubs, subs in plan:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=run_worker, args=(child, host, port, pubs, subs, feedback, sub_addr,
                                                                rate is not None), daemon=True)
            proc.start()
            child.close()
            workers.append(proc)
            conns.append(parent)
        _recv_all(conns, "ready", time.monotonic() + READY_TIMEOUT)
        t0 = monotonic_ns() + START_DELAY_NS
        w0 = t0 + int(warmup * 1e9)
        w1 = w0 + int(duration * 1e9)
        for c in conns:
            c.send(("start", t0, w0, w1, drain))
        time.sleep(max(0.0, (w0 - monotonic_ns()) / 1e9))
        b0 = probe() if probe is not None else 0.0
        m0 = machine_busy_seconds()
        time.sleep(max(0.0, (w1 - monotonic_ns()) / 1e9))
        b1 = probe() if probe is not None else 0.0
        m1 = machine_busy_seconds()
        broker_cpu = 100.0 * (b1 - b0) / duration if probe is not None else None
        machine_cpu = 100.0 * (m1 - m0) / duration
        done = _recv_all(conns, "pubs_done", time.monotonic() + warmup + duration + drain + 30)
        pub_results: list[PubResult] = [r for msg in done for r in msg[1]]
        sent_in_window = sum(msg[2] for msg in done)
        expected = {r.pub_id: r.sent for r in pub_results}
        for c in conns:
            c.send(("expected", expected))
        final = _recv_all(conns, "result", time.monotonic() + drain + 30)
        sub_results: list[SubResult] = [r for msg in final for r in msg[1]]
        cpus = [msg[2] for msg in final]
        return summarize(scenario.name, scenario.qos, duration, pub_results, sub_results, sent_in_window, cpus,
                         broker_cpu, machine_cpu, target_rate=rate)
    finally:
        for c in conns:
            c.close()
        for proc in workers:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()  # SIGTERM to this worker's PID
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.loadgen --port P [...]`: one run against a broker that is already running; JSON out."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.loadgen",
                                 description="one load generator run against a running MQTT broker")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--shape", choices=list(SHAPES), default="pairs")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--qos", type=int, choices=[0, 1], default=0)
    ap.add_argument("--window", type=int, default=20, help="QoS 1 PUBLISHes awaiting PUBACK per publisher")
    ap.add_argument("--qos0-window", type=int, default=200, help="QoS 0 messages on their way (0 = flood)")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--drain", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rate", type=float, default=None,
                    help="fixed-rate mode: total msgs/s over the publishers, latency from each message's due time "
                         "(default: closed loop, as fast as the windows allow)")
    args = ap.parse_args(argv)
    sc = Scenario(f"qos{args.qos}-{args.shape}{args.clients}", args.shape, args.clients, args.qos, args.window,
                  args.qos0_window)
    try:
        res = run(args.host, args.port, sc, args.duration, args.warmup, args.drain, args.procs, rate=args.rate)
    except ValueError as e:
        ap.error(str(e))
    out = res.to_dict()
    print(json.dumps(out, indent=1))
    return 0
