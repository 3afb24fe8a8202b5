"""Cost curve of retained messages (issue 21): RSS, restart time and a wildcard delivery as a node holds more.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_retained [--quick] [--sizes 1k,10k,100k,1M]

One vmqpy node with its data directory kept across restarts. For every size (a number of retained messages, in
increasing order) the bench grows the node's retained messages to that size through MQTT: `--publishers`
clients publish QoS 1 retained messages of 64 bytes, each keeping `--window` PUBLISHes awaiting PUBACK, to
`ret/<i // 100000>/<(i // 1000) % 100>/<i>`. Then, once the node is idle again:

- RSS (VmRSS) and the size of the data directory;
- restart: SIGTERM, then a new process on the same data directory; seconds from the spawn to the listener
  accepting connections (retained messages are loaded before it listens), the CPU seconds the node had used by
  then (`restart_cpu_s`: the same figure on a busy machine, where the seconds are not), RSS after it, and a
  check that a subscription to the last topic gets its retained message. With `--restarts N` the node is
  restarted N times and both figures are the medians (every round is in the JSON); `stop_s` is the first stop,
  of the node that created the messages;
- wildcard delivery: a probe client makes a QoS 1 round trip (PUBLISH to a topic it subscribes to, the PUBLISH
  back) every 10 ms; after a baseline of 2 s another client subscribes (QoS 1, PUBACKing every message) to
  `ret/0/#`, which matches min(size, 100,000) retained messages. Reported: seconds until all of them arrived
  (bounded: no progress for 30 s ends the wait), how many arrived, and the probe's p50/p99 round trip before
  and during the delivery (a stall of the other clients shows as a p99 or max far above the baseline).

Writes the figures as JSON (`--out`, default bench/results/retained.json) and, with `--plot`, the curve as a PNG
(default docs/images/curve-retained.png).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.brokers import HOST
from bench.curves_common import (
    IMAGES,
    RESULTS,
    Client,
    CurveNode,
    parse_publish,
    parse_sizes,
    percentile,
    plot,
    puback_frame,
    publish_frame,
    settle,
    slope,
    subscribe_frame,
    write_json,
)

FULL_SIZES = "1k,10k,100k,1M"
QUICK_SIZES = "1k,10k"
WILDCARD = "ret/0/#"
WILDCARD_MATCHES = 100_000
PROBE_TOPIC = "probe/rt"
PAYLOAD = bytes(64)
RESEND_AFTER = 5.0
MAX_STALLS = 60


def topic_of(i: int) -> str:
    return f"ret/{i // 100_000}/{(i // 1000) % 100}/{i}"


async def create_retained(port: int, first: int, last: int, publishers: int, window: int) -> None:
    """Retained QoS 1 messages first..last-1, spread over `publishers` clients, `window` in flight each."""
    await create_retained_on(HOST, port, first, last, publishers, window)


async def create_retained_on(host: str, port: int, first: int, last: int, publishers: int, window: int) -> None:
    """`create_retained` against a node listening on `host`. A publisher that gets no PUBACK for `RESEND_AFTER`
    seconds sends its unacknowledged PUBLISHes again (DUP set): a node may drop a QoS 1 PUBLISH without
    acknowledging it (while its cluster is split, for one); after `MAX_STALLS` such waits it gives up."""
    async def publisher(k: int) -> None:
        client = await Client.connect(port, f"ret-pub-{k}", host=host)
        todo = range(first + k, last, publishers)
        outstanding: dict[int, int] = {}  # packet id -> message index
        free_ids = collections.deque(range(1, window + 1))
        acked = asyncio.Event()

        async def acks() -> None:
            while True:
                kind, body = await client.read()
                pid = int.from_bytes(body[:2], "big")
                if kind >> 4 == 4 and outstanding.pop(pid, None) is not None:
                    free_ids.append(pid)
                    acked.set()

        reader = asyncio.create_task(acks())
        pos = stalls = 0
        try:
            while pos < len(todo) or outstanding:
                acked.clear()
                while free_ids and pos < len(todo):
                    pid = free_ids.popleft()
                    outstanding[pid] = todo[pos]
                    pos += 1
                    client.writer.write(publish_frame(topic_of(outstanding[pid]), PAYLOAD, 1, True, pid))
                await client.writer.drain()
                if not outstanding:
                    continue
                try:
                    await asyncio.wait_for(acked.wait(), RESEND_AFTER)
                except TimeoutError:
                    if reader.done():
                        reader.result()  # the connection's error
                        raise RuntimeError(f"ret-pub-{k}: connection closed") from None
                    stalls += 1
                    if stalls > MAX_STALLS:
                        raise RuntimeError(f"ret-pub-{k}: {len(outstanding)} PUBLISHes never acknowledged") from None
                    print(f"ret-pub-{k}: no PUBACK for {RESEND_AFTER:g} s, sending {len(outstanding)} again",
                          flush=True)
                    for pid, i in outstanding.items():
                        client.writer.write(publish_frame(topic_of(i), PAYLOAD, 1, True, pid, dup=True))
        finally:
            reader.cancel()
        await client.disconnect()

    await asyncio.gather(*(publisher(k) for k in range(publishers)))


async def retained_of(port: int, topic: str) -> bool:
    """Does a subscription to `topic` get a retained message within 30 s?"""
    client = await Client.connect(port, "ret-check")
    try:
        await client.subscribe([topic], qos=0)
        kind, body = await asyncio.wait_for(client.read(), 30)
        return kind >> 4 == 3 and bool(kind & 1) and parse_publish(kind, body)[0] == topic
    except TimeoutError:
        return False
    finally:
        await client.disconnect()


class Probe:
    """QoS 1 round trips through the node every 10 ms; records (sent at, round trip seconds)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.samples: list[tuple[float, float]] = []
        self.sent: dict[bytes, float] = {}
        self.tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(cls, port: int, host: str = HOST) -> Probe:
        client = await Client.connect(port, "probe-rt", host=host)
        await client.subscribe([PROBE_TOPIC], qos=1)
        probe = cls(client)
        probe.tasks = [asyncio.create_task(probe._send()), asyncio.create_task(probe._receive())]
        return probe

    async def _send(self) -> None:
        for n in range(1, 1_000_000):
            token = n.to_bytes(8, "big")
            self.sent[token] = time.monotonic()
            self.client.writer.write(publish_frame(PROBE_TOPIC, token, qos=1, packet_id=n % 65535 + 1))
            await asyncio.sleep(0.01)

    async def _receive(self) -> None:
        while True:
            kind, body = await self.client.read()
            if kind >> 4 == 3:
                _topic, pid, payload = parse_publish(kind, body)
                if pid:
                    self.client.writer.write(puback_frame(pid))
                t = self.sent.pop(payload, None)
                if t is not None:
                    self.samples.append((t, time.monotonic() - t))

    def between(self, t0: float, t1: float) -> dict[str, float | int | None]:
        rtts = [rtt * 1000 for t, rtt in self.samples if t0 <= t < t1]
        # a round trip still missing at t1 is counted as at least as long as it has been waiting
        rtts += [(t1 - t) * 1000 for t in self.sent.values() if t0 <= t < t1 - 0.5]
        return {"n": len(rtts), "p50_ms": percentile(rtts, 50), "p99_ms": percentile(rtts, 99),
                "max_ms": max(rtts, default=None)}

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await self.client.disconnect()


async def wildcard_delivery(node: CurveNode, matches: int) -> dict[str, Any]:
    probe = await Probe.start(node.port)
    try:
        await asyncio.sleep(2.0)
        t_sub = time.monotonic()
        before = probe.between(t_sub - 2.0, t_sub)
        c0 = node.cpu()
        sub = await Client.connect(node.port, "ret-wildcard")
        sub.writer.write(subscribe_frame(1, [WILDCARD], qos=1))
        got, last_progress = 0, time.monotonic()
        while got < matches and time.monotonic() - last_progress < 30 and time.monotonic() - t_sub < 1800:
            try:
                kind, body = await asyncio.wait_for(sub.read(), 1.0)
            except TimeoutError:
                continue
            if kind >> 4 == 3:
                got += 1
                last_progress = time.monotonic()
                _topic, pid, _payload = parse_publish(kind, body)
                if pid:
                    sub.writer.write(puback_frame(pid))
        t_done = time.monotonic() if got >= matches else last_progress
        cpu = node.cpu() - c0
        await sub.disconnect()
        during = probe.between(t_sub, max(t_done, t_sub + 0.5))
    finally:
        await probe.stop()
    took = t_done - t_sub
    return {"matches": matches, "delivered": got, "deliver_s": took, "deliver_per_s": got / took if took else None,
            "deliver_cpu_s": cpu, "probe_before": before, "probe_during": during}


def measure_point(node: CurveNode, size: int, made: int, args: argparse.Namespace, base_rss: int) -> dict[str, Any]:
    t0 = time.monotonic()
    asyncio.run(create_retained(node.port, made, size, args.publishers, args.window))
    create_s = time.monotonic() - t0
    settled_s = settle(node)
    rss = node.rss_kib()
    disk = node.disk_bytes()
    stop_s, start_s = node.restart()
    rounds_s, rounds_cpu_s = [start_s], [node.start_cpu]
    for _ in range(args.restarts - 1):  # restarts of a restarted node: the median is the figure
        rounds_s.append(node.restart()[1])
        rounds_cpu_s.append(node.start_cpu)
    settle(node)
    rss_restart = node.rss_kib()
    present = asyncio.run(retained_of(node.port, topic_of(size - 1)))
    delivery = asyncio.run(wildcard_delivery(node, min(size, WILDCARD_MATCHES)))
    return {"retained": size, "create_s": create_s, "create_per_s": (size - made) / create_s if create_s else None,
            "settle_s": settled_s, "rss_kib": rss, "rss_bytes_per_retained": (rss - base_rss) * 1024 / size,
            "disk_bytes": disk, "stop_s": stop_s, "killed": node.killed, "restart_s": statistics.median(rounds_s),
            "restart_cpu_s": statistics.median(rounds_cpu_s), "restart_rounds_s": rounds_s,
            "restart_rounds_cpu_s": rounds_cpu_s,
            "rss_after_restart_kib": rss_restart, "retained_after_restart": present, **delivery}


def run(args: argparse.Namespace) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    started = time.monotonic()
    with CurveNode() as node:
        settle(node)
        base_rss = node.rss_kib()
        made = 0
        for size in args.size_list:
            if time.monotonic() - started > args.budget:
                print(f"retained: stopped before {size:,}: over the --budget of {args.budget:g} s", flush=True)
                break
            p = measure_point(node, size, made, args, base_rss)
            made = size
            points.append(p)
            b, d = p["probe_before"], p["probe_during"]
            print(f"retained {size:>9,}: created at {p['create_per_s']:,.0f}/s, RSS {p['rss_kib'] / 1024:,.0f} MiB "
                  f"({p['rss_bytes_per_retained']:,.0f} B/msg), restart {p['restart_s']:.2f} s "
                  f"({p['restart_cpu_s']:.2f} CPU s), stop {p['stop_s']:.2f} s "
                  f"(found after restart: {p['retained_after_restart']}); wildcard: {p['delivered']:,}/"
                  f"{p['matches']:,} in {p['deliver_s']:.2f} s; probe p99 {_ms(b['p99_ms'])} -> {_ms(d['p99_ms'])}"
                  f" ms (max {_ms(d['max_ms'])})", flush=True)
    xs = [p["retained"] for p in points]
    return {"bench": "retained", "base_rss_kib": base_rss, "points": points,
            "slopes": {"rss_bytes_per_retained": _scale(slope(xs, [p["rss_kib"] for p in points]), 1024),
                       "restart_s_per_million": _scale(slope(xs, [p["restart_s"] for p in points]), 1e6)}}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _scale(v: float | None, k: float) -> float | None:
    return None if v is None else v * k


def draw(result: dict[str, Any], path: Path) -> None:
    pts = result["points"]
    xs = [float(p["retained"]) for p in pts]
    plot(path, "vmqpy: cost vs number of retained messages", "retained messages", [
        ("RSS (MiB)", xs, [p["rss_kib"] / 1024 for p in pts]),
        ("restart to listening (s)", xs, [p["restart_s"] for p in pts]),
        ("ret/0/# delivery (s)", xs, [p["deliver_s"] for p in pts]),
        ("probe p99 during delivery (ms)", xs, [p["probe_during"]["p99_ms"] for p in pts]),
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_retained", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}")
    ap.add_argument("--sizes", default=None, help=f"retained messages, increasing (default {FULL_SIZES})")
    ap.add_argument("--publishers", type=int, default=4, help="clients creating retained messages (default 4)")
    ap.add_argument("--window", type=int, default=50, help="QoS 1 PUBLISHes in flight per publisher (default 50)")
    ap.add_argument("--restarts", type=int, default=1,
                    help="restarts at each size; restart_s and restart_cpu_s are their medians (default 1)")
    ap.add_argument("--budget", type=float, default=3600.0,
                    help="start no new size after this many seconds (default 3600)")
    ap.add_argument("--out", type=Path, default=RESULTS / "retained.json")
    ap.add_argument("--plot", type=Path, nargs="?", const=IMAGES / "curve-retained.png", default=None,
                    help="write the curve as a PNG (default path docs/images/curve-retained.png)")
    args = ap.parse_args(argv)
    try:
        args.size_list = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES))
    except ValueError as e:
        ap.error(str(e))
    if args.publishers < 1 or not 1 <= args.window <= 65535:
        ap.error("--publishers must be positive and --window between 1 and 65535")
    if args.restarts < 1:
        ap.error("--restarts must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    write_json(args.out, result)
    if args.plot:
        draw(result, args.plot)
    print(f"written: {args.out}" + (f" and {args.plot}" if args.plot else ""))
    ok = all(p["retained_after_restart"] and p["delivered"] == p["matches"] for p in result["points"])
    return 0 if ok and result["points"] else 1


if __name__ == "__main__":
    sys.exit(main())
