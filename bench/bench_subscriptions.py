"""Cost curve of subscriptions (issue 21): publish cost, RSS and restart time as a node holds more of them.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_subscriptions [--quick] [--sizes 1k,10k,100k,1M]

One vmqpy node with its data directory kept across restarts. For every size (a number of subscriptions, in
increasing order) the bench grows the node's subscriptions to that size through MQTT: persistent clients
(clean session false) connect, SUBSCRIBE to ten filters (eight with `+` or `#`, see `filters_of`) and
disconnect, leaving their sessions and subscriptions on the node. Then, once the node is idle again:

- RSS (VmRSS) and the size of the data directory;
- publish cost: three online subscribers on `dev/probe/load`, `dev/+/load`, `dev/probe/#` and one QoS 0
  publisher sending `--rate` messages/s to `dev/probe/load` for `--seconds`; the node's CPU (utime + stime of
  /proc/PID/stat) during that window, minus its idle CPU over the same time, per publish (each publish is
  delivered three times). None of the persistent filters matches the probe topic;
- restart: SIGTERM, then a new process on the same data directory; seconds from the spawn to the listener
  accepting connections (the node loads its sessions and subscriptions before it listens), the CPU seconds the
  node had used by then (`restart_cpu_s`: the same figure on a busy machine, where the seconds are not), and RSS
  after it;
  and a check that the first and the last persistent client get `session present` back.

Writes the figures as JSON (`--out`, default bench/results/subscriptions.json) and, with `--plot`, the curve as a
PNG (default docs/images/curve-subscriptions.png).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench.curves_common import (
    IMAGES,
    RESULTS,
    Client,
    CurveNode,
    parse_sizes,
    plot,
    publish_frame,
    settle,
    slope,
    write_json,
)

FILTERS_PER_CLIENT = 10
PROBE_TOPIC = "dev/probe/load"
PROBE_FILTERS = ("dev/probe/load", "dev/+/load", "dev/probe/#")
FULL_SIZES = "1k,10k,100k,1M"
QUICK_SIZES = "1k,10k"


def filters_of(i: int) -> list[str]:
    """The ten filters of persistent client i: literal, `+` at several depths (also first), `#`."""
    return [
        f"dev/{i}/cmd",
        f"dev/{i}/cfg/+",
        f"dev/{i}/#",
        f"fleet/{i % 100}/dev/{i}/+",
        f"+/{i}/status",
        f"alerts/+/{i}",
        f"site/{i % 1000}/+/temp/{i}",
        f"dev/{i}/ota/+/chunk",
        f"groups/{i % 10}/+/{i}/#",
        f"cmd/{i}",
    ]


def client_id(i: int) -> str:
    return f"sub-{i}"


async def create_clients(port: int, first: int, last: int, concurrency: int) -> None:
    """Persistent clients first..last-1: connect, subscribe to their filters, disconnect."""
    ids = iter(range(first, last))

    async def worker() -> None:
        for i in ids:
            client = await Client.connect(port, client_id(i), clean=False)
            await client.subscribe(filters_of(i), qos=1)
            await client.disconnect()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def publish_cost(node: CurveNode, rate: int, seconds: float) -> dict[str, Any]:
    """Broker CPU per QoS 0 publish with three matching online subscribers (see the module docstring)."""
    subs = [await Client.connect(node.port, f"probe-sub-{k}") for k in range(len(PROBE_FILTERS))]
    for sub, flt in zip(subs, PROBE_FILTERS, strict=True):
        await sub.subscribe([flt], qos=0)
    received = [0]

    async def count(sub: Client) -> None:
        try:
            while True:
                kind, _ = await sub.read()
                if kind >> 4 == 3:
                    received[0] += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    readers = [asyncio.create_task(count(s)) for s in subs]
    pub = await Client.connect(node.port, "probe-pub")
    try:
        await asyncio.sleep(0.5)
        c0, t0 = node.cpu(), time.monotonic()
        await asyncio.sleep(min(seconds, 2.0))
        idle_per_s = (node.cpu() - c0) / (time.monotonic() - t0)
        frame = publish_frame(PROBE_TOPIC, bytes(64))
        per_tick = max(1, rate // 100)
        sent = 0
        c0, t0 = node.cpu(), time.monotonic()
        for tick in itertools.count():
            if time.monotonic() - t0 >= seconds:
                break
            pub.writer.write(frame * per_tick)
            sent += per_tick
            await pub.writer.drain()
            await asyncio.sleep(max(0.0, t0 + (tick + 1) * 0.01 - time.monotonic()))
        expected = sent * len(subs)
        deadline = time.monotonic() + 10
        while received[0] < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - t0
        busy = node.cpu() - c0
    finally:
        for r in readers:
            r.cancel()
        for c in (pub, *subs):
            await c.disconnect()
    return {"sent": sent, "delivered": received[0], "expected": expected, "window_s": elapsed,
            "idle_cpu_pct": 100 * idle_per_s, "cpu_pct": 100 * busy / elapsed,
            "us_per_publish": max(0.0, busy - idle_per_s * elapsed) / sent * 1e6 if sent else None}


async def session_present(port: int, i: int) -> bool:
    client = await Client.connect(port, client_id(i), clean=False)
    present = client.session_present
    await client.disconnect()
    return present


def measure_point(node: CurveNode, size: int, made: int, args: argparse.Namespace, base_rss: int) -> dict[str, Any]:
    clients = size // FILTERS_PER_CLIENT
    t0 = time.monotonic()
    asyncio.run(create_clients(node.port, made, clients, args.concurrency))
    create_s = time.monotonic() - t0
    settled_s = settle(node)
    rss = node.rss_kib()
    cost = asyncio.run(publish_cost(node, args.rate, args.seconds))
    stop_s, start_s = node.restart()
    start_cpu_s = node.start_cpu
    settle(node)
    rss_restart = node.rss_kib()
    present = asyncio.run(session_present(node.port, 0)) and asyncio.run(session_present(node.port, clients - 1))
    added = (clients - made) * FILTERS_PER_CLIENT
    return {
        "subscriptions": clients * FILTERS_PER_CLIENT, "clients": clients,
        "create_s": create_s, "create_per_s": added / create_s if create_s else None, "settle_s": settled_s,
        "rss_kib": rss, "rss_bytes_per_subscription": (rss - base_rss) * 1024 / (clients * FILTERS_PER_CLIENT),
        "disk_bytes": node.disk_bytes(), **cost,
        "stop_s": stop_s, "killed": node.killed, "restart_s": start_s, "restart_cpu_s": start_cpu_s,
        "rss_after_restart_kib": rss_restart,
        "sessions_present_after_restart": present,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    started = time.monotonic()
    with CurveNode() as node:
        settle(node)
        base_rss = node.rss_kib()
        made = 0
        for size in args.size_list:
            if time.monotonic() - started > args.budget:
                print(f"subscriptions: stopped before {size:,}: over the --budget of {args.budget:g} s", flush=True)
                break
            point = measure_point(node, size, made, args, base_rss)
            made = point["clients"]
            points.append(point)
            print(f"subscriptions {point['subscriptions']:>9,}: created at {point['create_per_s']:,.0f}/s, "
                  f"RSS {point['rss_kib'] / 1024:,.0f} MiB ({point['rss_bytes_per_subscription']:,.0f} B/sub), "
                  f"{point['us_per_publish']:.1f} us CPU/publish (idle {point['idle_cpu_pct']:.1f}%), "
                  f"delivered {point['delivered']:,}/{point['expected']:,}, restart {point['restart_s']:.2f} s "
                  f"({point['restart_cpu_s']:.2f} CPU s), "
                  f"sessions present {point['sessions_present_after_restart']}", flush=True)
    xs = [p["subscriptions"] for p in points]
    return {"bench": "subscriptions", "base_rss_kib": base_rss, "rate": args.rate, "seconds": args.seconds,
            "points": points,
            "slopes": {
                "us_per_publish_per_million_subscriptions":
                    _per_million(slope(xs, [p["us_per_publish"] for p in points])),
                "rss_bytes_per_subscription": _kib_to_bytes(slope(xs, [p["rss_kib"] for p in points])),
                "restart_s_per_million_subscriptions": _per_million(slope(xs, [p["restart_s"] for p in points])),
            }}


def _per_million(s: float | None) -> float | None:
    return None if s is None else s * 1e6


def _kib_to_bytes(s: float | None) -> float | None:
    return None if s is None else s * 1024


def draw(result: dict[str, Any], path: Path) -> None:
    pts = result["points"]
    xs = [float(p["subscriptions"]) for p in pts]
    plot(path, "vmqpy: cost vs number of subscriptions (persistent, 10 filters per client)", "subscriptions", [
        ("broker CPU per QoS 0 publish (us)", xs, [p["us_per_publish"] for p in pts]),
        ("RSS (MiB)", xs, [p["rss_kib"] / 1024 for p in pts]),
        ("restart to listening (s)", xs, [p["restart_s"] for p in pts]),
        ("node CPU at rest (% of a core)", xs, [p["idle_cpu_pct"] for p in pts]),
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_subscriptions", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 2 s publish windows")
    ap.add_argument("--sizes", default=None, help=f"subscriptions, increasing (default {FULL_SIZES})")
    ap.add_argument("--rate", type=int, default=2000, help="probe publishes per second (default 2000)")
    ap.add_argument("--seconds", type=float, default=None, help="publish window (default 5; quick 2)")
    ap.add_argument("--concurrency", type=int, default=32, help="clients being created at once (default 32)")
    ap.add_argument("--budget", type=float, default=3600.0,
                    help="start no new size after this many seconds (default 3600)")
    ap.add_argument("--out", type=Path, default=RESULTS / "subscriptions.json")
    ap.add_argument("--plot", type=Path, nargs="?", const=IMAGES / "curve-subscriptions.png", default=None,
                    help="write the curve as a PNG (default path docs/images/curve-subscriptions.png)")
    args = ap.parse_args(argv)
    try:
        args.size_list = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    except ValueError as e:
        ap.error(str(e))
    if any(s < FILTERS_PER_CLIENT for s in args.size_list):
        ap.error(f"every size must be at least {FILTERS_PER_CLIENT} (one client)")
    args.seconds = args.seconds if args.seconds is not None else (2.0 if args.quick else 5.0)
    if args.rate < 1 or args.seconds <= 0 or args.concurrency < 1:
        ap.error("--rate, --seconds and --concurrency must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result = run(args)
    write_json(args.out, result)
    if args.plot:
        draw(result, args.plot)
    print(f"written: {args.out}" + (f" and {args.plot}" if args.plot else ""))
    ok = all(p["sessions_present_after_restart"] and p["delivered"] == p["expected"] for p in result["points"])
    return 0 if ok and result["points"] else 1


if __name__ == "__main__":
    sys.exit(main())
