"""Memory per offline persistent session, and memory handed back after a storm of clean clients (issue 21).

offline   For each size N (`--sizes`, default 10k,50k) and each broker, on a fresh broker: warm up with 200
          persistent sessions, wait `--settle` seconds, read RSS; then N clients (`--concurrency` at a time)
          connect with clean session false, subscribe to `--filters` topic filters of their own at QoS 1 and
          disconnect, leaving N offline sessions without queued messages; wait, read RSS again. Reported:
          (RSS after - RSS before) / N, per broker and size. Mosquitto runs with its persistence on.
handback  vmqpy (and Mosquitto): warm up with 200 clean connects, wait, read RSS ("before"); open `--clients`
          clean connections at once and hold them all (RSS "held"), then DISCONNECT them all, wait until the
          broker has closed every socket and `--settle` seconds more, read RSS ("after"). Reported: before, held,
          after and after / before (issue 21's target: at most 1.2).

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_sessions_memory [--only offline|handback]
        [--sizes 10k,50k] [--filters 1] [--clients 10000] [--kinds vmqpy,mosquitto] [--settle S]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.bench_storm import PersistentBroker, _loop_policy, in_parallel, raise_file_limit
from bench.brokers import KINDS, BrokerProcess
from bench.mqtt_raw import RawClient, close_client, open_client, subscribe_packet

TIMEOUT = 120.0  # any one wait of a client (a bound, not a measure)
WARMUP = 200
FD_MARGIN = 200


def parse_size(text: str) -> int:
    text = text.strip().lower()
    factor = 1_000 if text.endswith("k") else 1
    try:
        value = int(text.rstrip("k")) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 10000 or 10k)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be at least 1, not {text!r}")
    return value


async def leave_offline_session(port: int, client_id: str, filters: int) -> None:
    client = await open_client(port, client_id, False, TIMEOUT)
    for f in range(filters):
        client.suback = asyncio.get_running_loop().create_future()
        client.send(subscribe_packet(f + 1, f"fleet/{client_id}/{f}", 1))
        if await asyncio.wait_for(asyncio.shield(client.suback), TIMEOUT) != 1:
            raise RuntimeError(f"{client_id}: subscription {f} not granted at QoS 1")
    await close_client(client, TIMEOUT)


@dataclass(frozen=True, slots=True)
class OfflineResult:
    kind: str
    sessions: int
    rss_before_kib: int
    rss_after_kib: int

    @property
    def kib_per_session(self) -> float:
        return (self.rss_after_kib - self.rss_before_kib) / self.sessions


def measure_offline(kind: str, sessions: int, filters: int, concurrency: int, settle: float) -> OfflineResult:
    with PersistentBroker(kind) as broker:
        asyncio.run(in_parallel(WARMUP, concurrency,
                                lambda i: leave_offline_session(broker.port, f"w{i}", filters)))
        time.sleep(settle)
        before = broker.rss_kib()
        asyncio.run(in_parallel(sessions, concurrency,
                                lambda i: leave_offline_session(broker.port, f"o{i}", filters)))
        time.sleep(settle)
        if not broker.alive():
            raise RuntimeError(f"{kind} died:\n{broker.log_tail()}")
        return OfflineResult(kind, sessions, before, broker.rss_kib())


@dataclass(frozen=True, slots=True)
class HandbackResult:
    kind: str
    clients: int
    before_kib: int
    held_kib: int
    after_kib: int


async def hold_and_leave(port: int, clients: int, concurrency: int, settle: float,
                         rss: Callable[[], int]) -> int:
    """Connect `clients` clean clients and hold them; read `rss()` after `settle` s; disconnect them all."""
    held: list[RawClient] = []

    async def connect(i: int) -> None:
        held.append(await open_client(port, f"h{i}", True, TIMEOUT))

    try:
        await in_parallel(clients, concurrency, connect)
        await asyncio.sleep(settle)
        held_kib = rss()
        await asyncio.gather(*(close_client(c, TIMEOUT) for c in held))
    finally:
        for c in held:
            if c.transport is not None:
                c.transport.close()
    return held_kib


def measure_handback(kind: str, clients: int, concurrency: int, settle: float) -> HandbackResult:
    with BrokerProcess(kind) as broker:
        async def warm() -> None:
            await in_parallel(WARMUP, concurrency, lambda i: close_client_after_open(broker.port, f"w{i}"))

        asyncio.run(warm())
        time.sleep(settle)
        before = broker.rss_kib()
        held = asyncio.run(hold_and_leave(broker.port, clients, concurrency, settle, broker.rss_kib))
        time.sleep(settle)
        if not broker.alive():
            raise RuntimeError(f"{kind} died:\n{broker.log_tail()}")
        return HandbackResult(kind, clients, before, held, broker.rss_kib())


async def close_client_after_open(port: int, client_id: str) -> None:
    await close_client(await open_client(port, client_id, True, TIMEOUT), TIMEOUT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("offline", "handback"), default=None)
    parser.add_argument("--sizes", default="10k,50k", help="offline sessions per run, comma-separated")
    parser.add_argument("--filters", type=int, default=1, help="subscriptions per offline session")
    parser.add_argument("--clients", type=int, default=10_000, help="clean clients of the handback storm")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--settle", type=float, default=2.0, help="seconds to wait before reading RSS")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not sizes or not kinds or set(kinds) - set(KINDS):
        parser.error(f"--sizes needs at least one size and --kinds a subset of {', '.join(KINDS)}")
    if args.filters < 0 or args.clients < 1 or args.concurrency < 1 or args.settle < 0:
        parser.error("--filters must be >= 0, --clients and --concurrency >= 1, --settle >= 0")
    raise_file_limit(args.clients + FD_MARGIN)
    asyncio.set_event_loop_policy(_loop_policy())
    if args.only in (None, "offline"):
        offline = []
        for size in sizes:
            for kind in kinds:
                r = measure_offline(kind, size, args.filters, args.concurrency, args.settle)
                offline.append(r)
                print(f"{kind:9} {size:6} offline sessions: RSS {r.rss_before_kib / 1024:.1f} -> "
                      f"{r.rss_after_kib / 1024:.1f} MiB, {r.kib_per_session:.2f} KiB/session", flush=True)
        print(f"\nOffline persistent sessions, {args.filters} QoS 1 subscription(s) each, no queued messages:")
        print("| broker | sessions | RSS before | RSS after | RSS per offline session |")
        print("|---|---:|---:|---:|---:|")
        for r in offline:
            print(f"| {r.kind} | {r.sessions} | {r.rss_before_kib / 1024:.1f} MiB | {r.rss_after_kib / 1024:.1f} MiB "
                  f"| {r.kib_per_session:.2f} KiB |")
    if args.only in (None, "handback"):
        handback = [measure_handback(kind, args.clients, args.concurrency, args.settle) for kind in kinds]
        print(f"\n{args.clients} clean clients connected together, then all gone:")
        print("| broker | RSS before | with all connected | after they left | after / before |")
        print("|---|---:|---:|---:|---:|")
        for h in handback:
            print(f"| {h.kind} | {h.before_kib / 1024:.1f} MiB | {h.held_kib / 1024:.1f} MiB "
                  f"| {h.after_kib / 1024:.1f} MiB | {h.after_kib / h.before_kib:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
