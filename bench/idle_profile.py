"""What one idle clean connection holds in a vmqpy node, and the floor under it (issue 21, "Memory").

Runs a real node in this process (uvloop, the node's own composition in vmqpy.node, a free loopback port, level
error), warms it with 200 connect/disconnects, then a child process opens N clean MQTT 3.1.1 connections and
keeps them open (the same client as bench/bench_idle.py). Reports the node's RSS growth per connection and, with
`--trace`, tracemalloc's difference over those N connections grouped by the line that allocated (largest first,
bytes per connection) and the objects the collector sees, by type. `--bare` serves the same clients with a bare
asyncio Protocol under uvloop that answers each CONNECT with a CONNACK and keeps only its transport: the floor that
uvloop's transport and the allocator put under any Python broker on this loop.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.idle_profile [--connections N] [--trace] [--bare]

tracemalloc's own bookkeeping inflates the RSS of a traced run: read the RSS figure of a run without `--trace`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from bench.bench_idle import open_connection
from bench.brokers import free_port, read_status

WARMUP = 200
SETTLE_S = 1.0
CLIENT_TIMEOUT_S = 120.0
CONNACK = b"\x20\x02\x00\x00"


def rss_kib() -> int:
    """This process's resident set size, KiB."""
    return int(read_status(os.getpid()).get("VmRSS", "0 kB").split()[0])


class BareProtocol(asyncio.Protocol):
    """The floor: keeps its transport, answers every chunk with a CONNACK (each client sends one CONNECT)."""

    __slots__ = ("transport",)

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(CONNACK)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def client_main(port: int, connections: int, tag: str) -> None:
    """The child: open `connections` connections, print "ready", hold them until stdin closes."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = [open_connection(port, f"{tag}-c{i}") for i in range(connections)]
    print("ready", flush=True)
    sys.stdin.read()
    for sock in held:
        sock.close()


async def hold(port: int, connections: int, tag: str) -> subprocess.Popen[str]:
    """Start the client child and wait (without blocking the loop) until it holds its connections."""
    child = subprocess.Popen([sys.executable, "-m", "bench.idle_profile", "--client", str(port), str(connections),
                              tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), CLIENT_TIMEOUT_S)
    if line.strip() != "ready":
        child.kill()
        raise RuntimeError(f"the client did not get its connections (exit {child.wait()})")
    return child


def release(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait(CLIENT_TIMEOUT_S)


async def warm_up(port: int) -> None:
    def connect_and_leave() -> None:
        for i in range(WARMUP):
            open_connection(port, f"warm-{i}").close()

    await asyncio.to_thread(connect_and_leave)


def live_objects() -> Counter[str]:
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        counts[type(obj).__qualname__] += 1
    return counts


async def measure(port: int, connections: int, trace: bool, top: int) -> None:
    await warm_up(port)
    await asyncio.sleep(SETTLE_S)
    gc.collect()
    before_rss = rss_kib()
    before_objects = live_objects() if trace else Counter()
    before = tracemalloc.take_snapshot() if trace else None
    child = await hold(port, connections, "idle")
    try:
        await asyncio.sleep(SETTLE_S)
        gc.collect()
        after_rss = rss_kib()
        print(f"RSS {before_rss} -> {after_rss} KiB: {(after_rss - before_rss) / connections:.2f} KiB per idle "
              f"connection ({connections} connections{', traced' if trace else ''})")
        if before is not None:
            after = tracemalloc.take_snapshot()
            report(before, after, before_objects, connections, top)
    finally:
        release(child)


def report(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, before_objects: Counter[str],
           connections: int, top: int) -> None:
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"tracemalloc: {total / connections:.0f} B per connection in all; largest first, B per connection:")
    for stat in stats[:top]:
        if stat.size_diff / connections < 8:
            break
        frame = stat.traceback[0]
        name = frame.filename.split("site-packages/")[-1].split("/wt/")[-1]
        print(f"  {stat.size_diff / connections:7.0f}  {stat.count_diff / connections:5.2f} blocks  "
              f"{name}:{frame.lineno}")
    grown = live_objects() - before_objects
    print("objects the collector sees, per connection (types with at least 0.5 each):")
    for name, count in grown.most_common(top):
        if count / connections < 0.5:
            break
        print(f"  {count / connections:5.2f}  {name}")


async def serve_bare(connections: int, trace: bool, top: int) -> None:
    loop = asyncio.get_running_loop()
    port = free_port()
    server = await loop.create_server(BareProtocol, "127.0.0.1", port, backlog=1024)
    try:
        await measure(port, connections, trace, top)
    finally:
        server.close()


async def serve_node(connections: int, trace: bool, top: int) -> None:
    from vmqpy import config, logconfig
    from vmqpy.node import Node, tune_garbage_collector

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="idle-profile-") as data_dir:
        cfg = config.load(None, environ={}, flags=[f"listener.tcp.default=127.0.0.1:{port}",
                                                     f"platform_data_dir={Path(data_dir)}", "allow_anonymous=on",
                                                     "log.console.level=error"])
        logconfig.configure(cfg.log_format, cfg.log_level, node=cfg.nodename, file=cfg.log_file,
                            max_size=cfg.log_file_max_size, count=cfg.log_file_count)
        async with Node(cfg).running():
            tune_garbage_collector()
            await measure(port, connections, trace, top)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--trace", action="store_true", help="tracemalloc and object counts (inflates the RSS)")
    parser.add_argument("--bare", action="store_true", help="a bare uvloop Protocol server instead of the node")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.connections + 100 > hard:
        parser.error(f"--connections {args.connections}: this process may open {hard} files at most")
    if args.trace:
        tracemalloc.start(1)
    import uvloop

    started = time.monotonic()
    uvloop.run(serve_bare(args.connections, args.trace, args.top) if args.bare
               else serve_node(args.connections, args.trace, args.top))
    print(f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
