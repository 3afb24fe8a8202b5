"""Clean connects per second and broker CPU per connect, vmqpy and Mosquitto side by side (issue 21, "Scale").

Each round and each broker, interleaved: start the broker on a free loopback port, warm it up, then let
`--concurrency` clients connect, one after the other each, `--connects` times in all: TCP connect, CONNECT
(MQTT 3.1.1, clean session), wait for CONNACK, DISCONNECT, wait for the broker to close the socket. Reported
per broker, medians over the rounds: connects per second (wall clock, the client's own speed included) and
microseconds of broker CPU per connect (utime + stime of the broker process over the run, /proc/PID/stat),
which does not depend on the client's speed.

    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.bench_connect [--connects N] [--rounds R]
        [--concurrency C] [--log-level error|info] [--aedes] [--json PATH]

`--log-level info` runs both brokers with their connect and disconnect lines logged (vmqpy
`log.console.level = info`, Mosquitto `log_type all`), to a file; `error` (the default) logs neither.
`--pure` adds vmqpy on its pure-Python modules (VMQPY_PURE=1) beside the compiled build; `--floor` adds
bench.connect_floor, a uvloop server that only accepts, answers the CONNECT and closes: the event loop's and the
kernel's share of a connect, which no broker on uvloop avoids.
`--baseline REV` adds a third broker, vmqpy at git revision REV (exported to a temporary directory), so that a
change is measured before and after in the same run. `--aedes` adds aedes when it is installed (`make
bench-deps`). `--json PATH` writes every round and the arguments (what `make bench` reads, `suite_rows`).
`--port P` drives a broker that is already running on 127.0.0.1:P instead (for profiling it), one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.brokers import HOST, KINDS, BrokerProcess, aedes_missing, export_revision

WARMUP = 500
CONNECT_TIMEOUT = 10.0
DISCONNECT = b"\xe0\x00"


def connect_packet(client_id: str) -> bytes:
    """CONNECT, MQTT 3.1.1, clean session, keep alive 60 s."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


class OneConnect(asyncio.Protocol):
    """CONNECT on connection, DISCONNECT after a successful CONNACK; `done` when the broker closed the socket."""

    def __init__(self, client_id: str, done: asyncio.Future[None]) -> None:
        self.client_id = client_id
        self.done = done
        self.received = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(connect_packet(self.client_id))  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.received += data
        if len(self.received) >= 4 and self.transport is not None:
            if self.received[:4] != b"\x20\x02\x00\x00":
                self._finish(RuntimeError(f"{self.client_id}: refused, CONNACK {self.received[:4].hex()}"))
                self.transport.close()
                return
            self.transport.write(DISCONNECT)

    def connection_lost(self, exc: Exception | None) -> None:
        if len(self.received) < 4:
            self._finish(RuntimeError(f"{self.client_id}: closed before CONNACK ({exc})"))
        self._finish(None)

    def _finish(self, error: Exception | None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)


async def connect_once(port: int, client_id: str) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    transport, _protocol = await asyncio.wait_for(
        loop.create_connection(lambda: OneConnect(client_id, done), HOST, port), CONNECT_TIMEOUT)
    try:
        await asyncio.wait_for(done, CONNECT_TIMEOUT)
    finally:
        transport.close()


async def connect_many(port: int, connects: int, concurrency: int, tag: str) -> None:
    """`connects` clean connects by `concurrency` clients, each one connect after the other."""
    per_client, extra = divmod(connects, concurrency)

    async def client(index: int) -> None:
        for i in range(per_client + (1 if index < extra else 0)):
            await connect_once(port, f"{tag}-{index}-{i}")

    await asyncio.gather(*(client(index) for index in range(concurrency)))


@dataclass(frozen=True, slots=True)
class Round:
    connects_per_s: float
    us_per_connect: float


def drive(port: int, cpu: Callable[[], float] | None, connects: int, concurrency: int, tag: str) -> Round:
    """Warm up, then run the connects against `port`; `cpu` reads the broker's CPU seconds (or None: not known)."""
    read_cpu = cpu if cpu is not None else (lambda: 0.0)
    asyncio.run(connect_many(port, WARMUP, concurrency, f"{tag}w"))
    cpu_before, started = read_cpu(), time.monotonic()
    asyncio.run(connect_many(port, connects, concurrency, tag))
    elapsed, cpu_after = time.monotonic() - started, read_cpu()
    return Round(connects / elapsed, (cpu_after - cpu_before) / connects * 1e6)


class LoggingBroker(BrokerProcess):
    """A BrokerProcess whose config asks for the connect/disconnect lines (written to its log file)."""

    def command(self, config_file: Path) -> list[str]:
        text = config_file.read_text()
        if self.kind.startswith("vmqpy"):
            text = text.replace("log.console.level = error", "log.console.level = info")
        else:
            text += "log_type all\n"
        config_file.write_text(text)
        return super().command(config_file)


def run_rounds(sources: dict[str, tuple[str, Path | None]], rounds: int, connects: int, concurrency: int,
               log_level: str) -> dict[str, list[Round]]:
    """Interleaved rounds over `sources` (label -> broker kind, vmqpy source directory or None: this checkout)."""
    broker_class = LoggingBroker if log_level == "info" else BrokerProcess
    results: dict[str, list[Round]] = {label: [] for label in sources}
    for r in range(rounds):
        for label, (kind, source) in sources.items():
            server_class = BrokerProcess if kind == "floor" else broker_class  # the floor logs nothing
            with server_class(kind, source=source) as broker:
                result = drive(broker.port, broker.cpu_seconds, connects, concurrency, f"r{r}")
            results[label].append(result)
            print(f"round {r + 1} {label:15} {result.connects_per_s:8.0f} connects/s "
                  f"{result.us_per_connect:6.1f} us CPU/connect", flush=True)
    return results


def suite_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """bench.suite's rows (bench.suite_report.row) from the file `--json` writes: medians per broker."""
    from bench.suite_report import row

    args = result.get("args", {})
    scenario = f"clean connects ({args.get('connects', 0):,}, {args.get('concurrency', 0)} at a time)"
    rates = {kind: statistics.median(r["connects_per_s"] for r in rounds)
             for kind, rounds in result.get("rounds", {}).items() if rounds}
    mosquitto = rates.get("mosquitto")
    return [row(scenario, kind, rate=rate, ratio=rate / mosquitto if mosquitto and kind.startswith("vmqpy") else None,
                cpu_us=statistics.median(r["us_per_connect"] for r in result["rounds"][kind]), unit="connect")
            for kind, rate in rates.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_connect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--connects", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--log-level", choices=("error", "info"), default="error")
    parser.add_argument("--baseline", default="", help="also run vmqpy at this git revision")
    parser.add_argument("--pure", action="store_true", help="also run vmqpy on its pure modules (VMQPY_PURE=1)")
    parser.add_argument("--floor", action="store_true",
                        help="also run bench.connect_floor: uvloop's accept/CONNACK/close alone, no broker")
    parser.add_argument("--aedes", action="store_true", help="also run aedes, when installed (make bench-deps)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write every round here")
    parser.add_argument("--port", type=int, default=0, help="drive a broker already listening on this port")
    args = parser.parse_args(argv)
    if args.connects < 1 or args.concurrency < 1 or args.rounds < 1:
        parser.error("--connects, --concurrency and --rounds must be at least 1")
    if args.port:
        result = drive(args.port, None, args.connects, args.concurrency, "c")
        print(f"{result.connects_per_s:.0f} connects/s")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        sources: dict[str, tuple[str, Path | None]] = {kind: (kind, None) for kind in KINDS}
        if args.baseline:
            commit = export_revision(args.baseline, Path(tmp))
            sources = {"vmqpy": ("vmqpy", None), f"vmqpy@{commit[:7]}": ("vmqpy", Path(tmp)),
                       "mosquitto": ("mosquitto", None)}
        if args.pure:
            sources = {"vmqpy": sources.pop("vmqpy"), "vmqpy-pure": ("vmqpy-pure", None), **sources}
        if args.aedes:
            missing = aedes_missing()
            if missing:
                print(f"note: {missing}", flush=True)
            else:
                sources["aedes"] = ("aedes", None)
        if args.floor:
            sources["uvloop floor"] = ("floor", None)
        results = run_rounds(sources, args.rounds, args.connects, args.concurrency, args.log_level)
    print(f"\n{args.connects} clean 3.1.1 connects, {args.concurrency} concurrent, log level {args.log_level}, "
          f"median of {args.rounds} rounds:")
    print("| broker | connects/s | broker CPU per connect |")
    print("|---|---:|---:|")
    rate = {kind: statistics.median(r.connects_per_s for r in results[kind]) for kind in results}
    for kind in results:
        us = statistics.median(r.us_per_connect for r in results[kind])
        print(f"| {kind} | {rate[kind]:.0f} | {us:.0f} us |")
    print(f"vmqpy / Mosquitto connect rate: {rate['vmqpy'] / rate['mosquitto']:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "args": {"connects": args.connects, "concurrency": args.concurrency, "rounds": args.rounds,
                     "log_level": args.log_level},
            "rounds": {kind: [{"connects_per_s": r.connects_per_s, "us_per_connect": r.us_per_connect}
                              for r in rounds] for kind, rounds in results.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
