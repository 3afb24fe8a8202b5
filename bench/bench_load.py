"""What a node's start costs before it listens, in one process and without sockets (issue 21, "Restart").

    .venv/bin/python -m bench.bench_load make DIR N      # a data directory holding N retained messages
    .venv/bin/python -m bench.bench_load load DIR [--profile OUT]
    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_load node DIR [--rounds 3]

`make` builds a node the way `vmqpy start` does (storage, metadata store, broker; no listener, no cluster) on
DIR/data and publishes retained QoS 1 messages of 64 bytes on bench.bench_retained's topics through
`Broker.publish` until the node holds N (a directory made before is grown, not rebuilt). `load` opens that
directory as a restarting node does and prints the CPU and wall-clock seconds of `MetadataService.start` and of
`Broker.load`: everything a node does with its data before its listener opens. With `--profile`, the load runs
under cProfile and the profile is written to OUT and summarised. No socket is opened: this runs without the
network lock (the restart figure with a real node and its listener is bench.bench_retained's).

`node` measures that real restart on DIR without publishing anything: each round copies DIR/data into a fresh
work directory, spawns `vmqpy start` on it (bench.curves_common.CurveNode, a free port on 127.0.0.1) and reports
the seconds from the spawn to the listener accepting a connection, the CPU seconds the node had used then
(interpreter start and imports included) and its RSS; then stops it by its PID. It opens a socket: run it
under the network lock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import pstats
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.bench_retained import PAYLOAD, topic_of
from bench.curves_common import CurveNode
from vmqpy import config as config_module
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.membership import load_incarnation
from vmqpy.node import Node
from vmqpy.sessions.message import Message

SYNC_EVERY = 20_000


def config_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vmqpy.conf"
    # the listener is never opened: a node object needs one configured
    path.write_text(f"listener.tcp.default = 127.0.0.1:1883\nplatform_data_dir = {directory / 'data'}\n"
                    "allow_anonymous = on\nsystree_enabled = off\nlog.console.level = error\n")
    return path


async def open_node(directory: Path, grow_to: int) -> dict[str, float]:
    """Load the node on `directory` (the timed part); then publish retained messages until it holds `grow_to`."""
    node = Node(config_module.load(config_file(directory)))
    async with contextlib.AsyncExitStack() as stack:
        c0, t0 = time.process_time(), time.monotonic()
        storage = await stack.enter_async_context(node._storage())
        metadata = await stack.enter_async_context(
            node._metadata(storage, load_incarnation(node.config.data_dir), None))
        c1, t1 = time.process_time(), time.monotonic()
        broker = Broker(node.config, SessionStore(storage), metadata, policy=node.policy)
        broker.load(time.time())
        c2, t2 = time.process_time(), time.monotonic()
        held = len(broker.retained)
        for i in range(held, grow_to):
            broker.publish(Message(topic_of(i), PAYLOAD, 1, True, "bench-load"), time.time())
            if i % SYNC_EVERY == 0:
                await storage.sync()  # bounded write queue
        await storage.sync()
    return {"retained_loaded": held, "metadata_cpu_s": c1 - c0, "metadata_s": t1 - t0,
            "broker_cpu_s": c2 - c1, "broker_s": t2 - t1}


def report(figures: dict[str, float]) -> str:
    return (f"{figures['retained_loaded']:,.0f} retained: metadata store {figures['metadata_cpu_s']:.2f} CPU s "
            f"({figures['metadata_s']:.2f} s), broker {figures['broker_cpu_s']:.2f} CPU s "
            f"({figures['broker_s']:.2f} s), total {figures['metadata_cpu_s'] + figures['broker_cpu_s']:.2f} CPU s")


def node_restart(directory: Path) -> dict[str, float]:
    """One real node's start on a copy of `directory`/data: seconds and CPU seconds to listening, RSS then."""
    node = CurveNode()
    try:
        shutil.copytree(directory / "data", node.data_dir, dirs_exist_ok=True)
        seconds = node.start()
        return {"restart_s": seconds, "restart_cpu_s": node.start_cpu, "rss_mib": node.rss_kib() / 1024}
    finally:
        node.close()


def node_report(rounds: list[dict[str, float]]) -> str:
    wall = statistics.median(r["restart_s"] for r in rounds)
    cpu = statistics.median(r["restart_cpu_s"] for r in rounds)
    each = ", ".join(f"{r['restart_s']:.2f} s ({r['restart_cpu_s']:.2f} CPU s, {r['rss_mib']:,.0f} MiB)"
                     for r in rounds)
    return f"spawn to listening, median of {len(rounds)}: {wall:.2f} s ({cpu:.2f} CPU s); rounds: {each}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_load", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make", help="grow DIR's node to N retained messages")
    make.add_argument("directory", type=Path)
    make.add_argument("retained", type=int)
    load = sub.add_parser("load", help="time the load of DIR's node")
    load.add_argument("directory", type=Path)
    load.add_argument("--profile", type=Path, default=None, help="write a cProfile of the load here")
    node = sub.add_parser("node", help="time a real node's start (vmqpy start) on a copy of DIR (network lock)")
    node.add_argument("directory", type=Path)
    node.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if args.command == "make":
        if args.retained < 0:
            ap.error("N must be >= 0")
        t0 = time.monotonic()
        figures = asyncio.run(open_node(args.directory, args.retained))
        print(f"{report(figures)}; grown to {args.retained:,} in {time.monotonic() - t0:.1f} s")
        return 0
    if not (args.directory / "data").is_dir():
        ap.error(f"{args.directory}/data does not exist: make it first")
    if args.command == "node":
        if args.rounds < 1:
            ap.error("--rounds must be >= 1")
        rounds = []
        for i in range(args.rounds):
            rounds.append(node_restart(args.directory))
            print(f"round {i + 1}: {node_report(rounds[-1:])}", flush=True)
        print(node_report(rounds))
        return 0
    if args.profile is None:
        print(report(asyncio.run(open_node(args.directory, 0))))
        return 0
    profiler = cProfile.Profile()
    figures = profiler.runcall(asyncio.run, open_node(args.directory, 0))
    profiler.dump_stats(str(args.profile))
    print(report(figures) + " (under cProfile)")
    pstats.Stats(str(args.profile)).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
