"""Memory per idle connection and CPU per connect, vmqpy and Mosquitto side by side (issue 21, "Scale").

For each round and each broker, interleaved: start the broker on a free loopback port, read its RSS 2 s later
(the empty broker, nothing connected yet), warm it up with 200 connect/disconnects, read its RSS, open N clean
MQTT 3.1.1 connections one after the other (CONNECT, wait for CONNACK) and keep them open, wait one second, read
its RSS again and the CPU time it spent on the N connects. Reported per broker, medians over the rounds: KiB of
RSS per idle connection ((RSS after - RSS before) / N), microseconds of broker CPU per connect, and the empty
broker's RSS. The client is one process, the same for both brokers; the broker's figures do not depend on its
speed.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_idle [--connections N] [--rounds R] [--baseline REV]
        [--no-mosquitto]

`--baseline REV` adds vmqpy at git revision REV (exported to a temporary directory) to every round, between this
checkout's vmqpy and Mosquitto, so that a change is measured against its base in the same run. The client holds
N + 100 file descriptors: N can go up to the process's hard limit less 100 (each broker is its own process).

Both brokers log at error level only; vmqpy runs with its defaults otherwise (clean sessions never touch the
disk, but every connect writes and every disconnect deletes an owner record in the metadata store).
"""

from __future__ import annotations

import argparse
import resource
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import KINDS, BrokerProcess, export_revision

WARMUP = 200
SETTLE_S = 1.0
EMPTY_AFTER_S = 2.0  # from the broker's port answering to the empty broker's RSS read


def connect_packet(client_id: str) -> bytes:
    """CONNECT, MQTT 3.1.1, clean session, keep alive 600 s."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x02\x58" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


def open_connection(port: int, client_id: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(connect_packet(client_id))
    connack = b""
    while len(connack) < 4:
        chunk = sock.recv(4 - len(connack))
        if not chunk:
            raise RuntimeError(f"{client_id}: connection closed before CONNACK")
        connack += chunk
    if connack[0] != 0x20 or connack[3] != 0:
        raise RuntimeError(f"{client_id}: refused, CONNACK {connack.hex()}")
    return sock


@dataclass(frozen=True, slots=True)
class Round:
    kib_per_connection: float
    us_per_connect: float
    empty_kib: int


def measure(kind: str, connections: int, tag: str, source: Path | None = None) -> Round:
    with BrokerProcess(kind, source=source) as broker:
        time.sleep(EMPTY_AFTER_S)
        empty_kib = broker.rss_kib()
        for i in range(WARMUP):
            open_connection(broker.port, f"{tag}-w{i}").close()
        time.sleep(SETTLE_S)
        rss_before, cpu_before = broker.rss_kib(), broker.cpu_seconds()
        held = []
        try:
            for i in range(connections):
                held.append(open_connection(broker.port, f"{tag}-c{i}"))
            cpu_after = broker.cpu_seconds()
            time.sleep(SETTLE_S)
            rss_after = broker.rss_kib()
        finally:
            for sock in held:
                sock.close()
        return Round((rss_after - rss_before) / connections, (cpu_after - cpu_before) / connections * 1e6,
                     empty_kib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="", help="also run vmqpy at this git revision")
    parser.add_argument("--no-mosquitto", action="store_true", help="vmqpy only (and its baseline)")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.connections + 100 > hard:
        parser.error(f"--connections {args.connections}: this process may open {hard} files at most")
    with tempfile.TemporaryDirectory(prefix="bench-idle-base-") as tmp:
        sources: dict[str, tuple[str, Path | None]] = {"vmqpy": ("vmqpy", None)}
        if args.baseline:
            commit = export_revision(args.baseline, Path(tmp))
            sources[f"vmqpy@{commit[:7]}"] = ("vmqpy", Path(tmp))
        if not args.no_mosquitto:
            sources.update({kind: (kind, None) for kind in KINDS if kind != "vmqpy"})
        results = run_rounds(sources, args.connections, args.rounds)
    print(f"\n{args.connections} idle clean 3.1.1 connections, median of {args.rounds} rounds:")
    print("| broker | RSS per idle connection | broker CPU per connect | RSS of the empty broker |")
    print("|---|---:|---:|---:|")
    for label, rounds in results.items():
        kib = statistics.median(r.kib_per_connection for r in rounds)
        us = statistics.median(r.us_per_connect for r in rounds)
        empty = statistics.median(r.empty_kib for r in rounds)
        print(f"| {label} | {kib:.2f} KiB | {us:.0f} us | {empty:,.0f} KiB |")


def run_rounds(sources: dict[str, tuple[str, Path | None]], connections: int, rounds: int) -> dict[str, list[Round]]:
    """Interleaved rounds over `sources` (label -> broker kind, vmqpy source directory or None: this checkout)."""
    results: dict[str, list[Round]] = {label: [] for label in sources}
    for r in range(rounds):
        for label, (kind, source) in sources.items():
            results[label].append(measure(kind, connections, f"idle{r}", source))
            last = results[label][-1]
            print(f"round {r + 1} {label:15} {last.kib_per_connection:6.2f} KiB/connection "
                  f"{last.us_per_connect:6.1f} us CPU/connect, empty {last.empty_kib:,} KiB", flush=True)
    return results


if __name__ == "__main__":
    main()
