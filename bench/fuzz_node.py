"""Fuzz a live node: `python -m bench.fuzz_node --cases N --seed S [--websocket] [--admin M]`.

Starts one real vmqpy node (chaos.node.Node: TCP, WebSocket and admin listeners on 127.0.0.1, stopped by its
PID), then sends mutated MQTT packets (bench/fuzz_cases.py, client packets of 3.1, 3.1.1 and 5.0) over many
concurrent connections: a CONNECT case is sent as the first bytes of a connection, any other after a valid
CONNECT. With `--websocket` the same bytes travel in binary frames of WebSocket connections (aiohttp's client,
subprotocol `mqtt`), one frame per read-sized chunk. Each connection is watched for `--window` seconds (what the
node answers, whether it closes) and then reset.

After every batch: the node process must still run (else: crash), and a well-behaved client (paho-mqtt, over TCP
and, with --websocket, over WebSocket) must connect, subscribe, publish at QoS 1 and receive its own message
within `--probe-timeout` seconds (else: hang). The node's RSS is sampled after a warm-up batch (the baseline),
after every batch, and at the end once the connections' sessions and wills have expired (`--settle`).
A DISCONNECT 0x80 (unspecified error: the node's catch-all for an exception of its own) and every
"internal error" line in the node's log count as crashes too. With `--admin M`, M hostile admin API requests
(bench/fuzz_admin.py) are sent after the MQTT cases.

Exit status 1 if a crash, a hang or an admin API failure was found. Hold the network lock for the whole run:
    flock /tmp/vmqpy-net.lock .venv/bin/python -m bench.fuzz_node --cases 100000 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from bench import fuzz_admin
from bench.brokers import _kib, read_status
from bench.fuzz_cases import SEEDS, Case, case_rng, chunked, mutate
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.errors import RemoteProtocolError
from vmqpy.mqtt.packets import Connack, Connect, Disconnect

HOST = "127.0.0.1"
CLIENT_SEEDS = tuple(s for s in SEEDS if s.to_server)
INTERNAL_ERROR_MARKS = ("internal error", "Traceback (most recent call last)")
UNSPECIFIED_ERROR = 0x80


@dataclass
class Target:
    """A running node to fuzz: its addresses, its process and its log."""

    port: int
    ws_port: int | None
    http_url: str | None
    api_key: str | None
    pid: int
    log_path: Path | None
    alive: Callable[[], bool]
    host: str = HOST

    def rss_kib(self) -> int:
        return _kib(read_status(self.pid).get("VmRSS"))

    def internal_errors(self) -> list[str]:
        """Lines of the node's log that show an exception the node caught in its own code."""
        if self.log_path is None:
            return []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if any(m in line for m in INTERNAL_ERROR_MARKS)]


def state_counts(target: Target) -> dict[str, int]:
    """How many sessions and retained messages the node keeps (state the cases made legitimately: clean-start-off
    sessions, retained PUBLISHes), read from the admin API; {} without one."""
    if not target.http_url or not target.api_key:
        return {}
    counts: dict[str, int] = {}
    for name, command in (("sessions", "session/show"), ("retained", "retain/show")):
        request = urllib.request.Request(f"{target.http_url}/api/v1/{command}", headers={"x-api-key": target.api_key})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                counts[name] = len(json.loads(answer.read()).get("table", []))
        except (OSError, ValueError):
            counts[name] = -1
    return counts


# -- cases as a client sends them --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeCase:
    index: int
    case: Case
    prefix: bytes  # a valid CONNECT before the mutant (b"" when the mutant is the CONNECT)

    @property
    def label(self) -> str:
        return f"v{self.case.seed.level}-{'connect' if not self.prefix else 'after-connect'}"


def node_case(run_seed: int, index: int) -> NodeCase:
    rng = case_rng(run_seed, index)
    seed = rng.choice(CLIENT_SEEDS)
    wire, names = mutate(rng, seed)
    prefix = b""
    if not seed.is_connect:
        name = "MQIsdp" if seed.level == 3 else "MQTT"
        client_id = f"fuzz-{index % 16}" if rng.random() < 0.1 else f"fuzz-{run_seed}-{index}"  # some take over
        prefix = encode(Connect(client_id, seed.level, name, True, 30), seed.level)
    return NodeCase(index, Case(seed, wire, chunked(rng, wire), 0, names), prefix)


def answer_label(level: int, data: bytes, closed: bool) -> tuple[str, int | None]:
    """What the node answered: the packet types (with reason codes of CONNACK/DISCONNECT) and whether it closed;
    and the DISCONNECT reason code, if any."""
    parts: list[str] = []
    disconnect: int | None = None
    decoder = Decoder(server=False, protocol_level=level if level in (3, 4, 5) else 4)
    decoder.receive_data(data)
    try:
        for _ in range(64):  # bounded: the label needs the first few packets only
            packet = decoder.next_packet()
            if packet is NEED_DATA:
                break
            if isinstance(packet, Connack):
                parts.append(f"CONNACK {packet.reason_code:#04x}")
            elif isinstance(packet, Disconnect):
                parts.append(f"DISCONNECT {packet.reason_code:#04x}")
                disconnect = packet.reason_code
            else:
                parts.append(type(packet).__name__.upper())
    except RemoteProtocolError:
        parts.append("(unparsed)")
    parts.append("closed" if closed else "open")
    compact = [p for i, p in enumerate(parts) if i == 0 or p != parts[i - 1]]
    return " ".join(compact), disconnect


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0): no TIME_WAIT on our side, so 100,000 connections do not run out of ports."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def run_tcp(target: Target, nc: NodeCase, window: float) -> tuple[bytes, bool]:
    """Send one case over a new TCP connection; (bytes answered within `window`, closed by the node)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(target.host, target.port), 10)
    data = bytearray()
    closed = False
    try:
        with contextlib.suppress(ConnectionError):
            for chunk in ((nc.prefix,) if nc.prefix else ()) + nc.case.chunks:
                writer.write(chunk)
                await writer.drain()
        deadline = asyncio.get_running_loop().time() + window
        while len(data) < 65536:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                got = await asyncio.wait_for(reader.read(65536), left)
            except TimeoutError:
                break
            except ConnectionError:
                closed = True
                break
            if not got:
                closed = True
                break
            data += got
    finally:
        _reset(writer)
    return bytes(data), closed


async def run_ws(session: aiohttp.ClientSession, target: Target, nc: NodeCase, window: float) -> tuple[bytes, bool]:
    """Send one case over a new WebSocket connection, one binary frame per chunk."""
    url = f"http://{target.host}:{target.ws_port}/mqtt"
    data = bytearray()
    closed = False
    ws = await asyncio.wait_for(session.ws_connect(url, protocols=("mqtt",), autoclose=False, max_msg_size=0), 10)
    try:
        with contextlib.suppress(ConnectionError):
            for chunk in ((nc.prefix,) if nc.prefix else ()) + nc.case.chunks:
                await ws.send_bytes(chunk)
        deadline = asyncio.get_running_loop().time() + window
        while len(data) < 65536:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                msg = await ws.receive(timeout=left)
            except TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.BINARY:
                data += msg.data
            else:  # CLOSE, CLOSING, CLOSED, ERROR (a text frame from the node would be a bug: counted by label)
                closed = msg.type != aiohttp.WSMsgType.TEXT
                if not closed:
                    data += b"<text frame>"
                break
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 2)
    return bytes(data), closed


# -- the well-behaved client ------------------------------------------------------------------------------------
class ProbeFailed(Exception):
    pass


def probe(target: Target, version: int, websocket: bool, timeout: float) -> float:
    """paho-mqtt connects, subscribes, publishes at QoS 1 and receives its message; seconds it took.
    ProbeFailed naming the step that did not finish within `timeout`."""
    started = time.monotonic()
    client_id = f"probe-{version}-{'ws' if websocket else 'tcp'}-{random.randrange(1 << 30)}"
    topic = f"fuzz/probe/{client_id}"
    events = {name: threading.Event() for name in ("connected", "subscribed", "received")}
    refused: list[str] = []
    protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                         transport="websockets" if websocket else "tcp")
    if websocket:
        client.ws_set_options(path="/mqtt")

    def on_connect(c: paho.Client, userdata: object, flags: object, reason: object, props: object) -> None:
        if getattr(reason, "is_failure", False):
            refused.append(str(reason))
        events["connected"].set()

    def on_subscribe(c: paho.Client, userdata: object, mid: int, reasons: object, props: object) -> None:
        events["subscribed"].set()

    def on_message(c: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        if message.topic == topic and message.payload == b"still serving":
            events["received"].set()

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    deadline = started + timeout
    try:
        port = target.ws_port if websocket else target.port
        if port is None:
            raise ProbeFailed("no WebSocket listener to probe")
        client.connect(target.host, port, keepalive=30)
        client.loop_start()

        def wait(step: str) -> None:
            if not events[step].wait(max(0.0, deadline - time.monotonic())):
                raise ProbeFailed(f"probe v{version} {'ws' if websocket else 'tcp'}: not {step} within {timeout} s")

        wait("connected")
        if refused:
            raise ProbeFailed(f"probe refused: {refused[0]}")
        client.subscribe(topic, qos=1)
        wait("subscribed")
        client.publish(topic, b"still serving", qos=1)
        wait("received")
    except OSError as e:
        raise ProbeFailed(f"probe v{version}: {e}") from e
    finally:
        with contextlib.suppress(Exception):
            client.disconnect()
        client.loop_stop()
    return time.monotonic() - started


# -- the run -----------------------------------------------------------------------------------------------------
@dataclass
class NodeReport:
    run_seed: int
    transport: str
    cases: int = 0
    seconds: float = 0.0
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    disconnect_codes: Counter[int] = field(default_factory=Counter)
    client_errors: Counter[str] = field(default_factory=Counter)  # our side could not even send (refused, ...)
    probes: int = 0
    slowest_probe: float = 0.0
    rss_start_kib: int = 0
    rss_baseline_kib: int = 0
    rss_peak_kib: int = 0
    rss_end_kib: int = 0
    rss_before_admin_kib: int = 0
    rss_after_admin_kib: int = 0
    state_end: dict[str, int] = field(default_factory=dict)
    admin: fuzz_admin.AdminReport | None = None

    @property
    def failed(self) -> bool:
        return bool(self.crashes or self.hangs or (self.admin is not None and self.admin.failed))

    def text(self) -> str:
        rate = self.cases / self.seconds if self.seconds else 0.0
        lines = [
            f"seed {self.run_seed}, {self.transport}: {self.cases} cases in {self.seconds:.1f} s ({rate:,.0f}/s)",
            f"crashes (node exited, DISCONNECT 0x80, internal errors logged): {len(self.crashes)}",
            f"hangs (a well-behaved probe not served in time): {len(self.hangs)}",
            f"probes: {self.probes} passed, slowest {self.slowest_probe:.2f} s",
            f"RSS: {self.rss_start_kib / 1024:.1f} MiB at start, {self.rss_baseline_kib / 1024:.1f} MiB after the "
            f"warm-up batch (baseline), {self.rss_peak_kib / 1024:.1f} MiB peak, {self.rss_end_kib / 1024:.1f} MiB "
            f"at the end" + (f" (the node then kept {self.state_end.get('sessions')} sessions and "
                             f"{self.state_end.get('retained')} retained messages)" if self.state_end else ""),
            "DISCONNECT reason codes: " + ", ".join(f"{k:#04x} x{v}" for k, v in sorted(self.disconnect_codes.items())),
            "our side failed to send: " + (", ".join(f"{k} x{v}" for k, v in self.client_errors.items()) or "0"),
            "answers (top 12):",
            *(f"  {v:7d}  {k}" for k, v in self.answers.most_common(12)),
        ]
        lines += [f"CRASH {c}" for c in self.crashes[:10]] + [f"HANG {h}" for h in self.hangs[:10]]
        if self.admin is not None:
            lines.append(self.admin.text())
            lines.append(f"  RSS {self.rss_before_admin_kib / 1024:.1f} MiB before the admin requests, "
                         f"{self.rss_after_admin_kib / 1024:.1f} MiB after")
        return "\n".join(lines)


async def run_batch(target: Target, report: NodeReport, run_seed: int, indices: range, websocket: bool,
                    concurrency: int, window: float) -> None:
    limit = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(index: int) -> None:
            nc = node_case(run_seed, index)
            async with limit:
                try:
                    if websocket:
                        data, closed = await run_ws(session, target, nc, window)
                    else:
                        data, closed = await run_tcp(target, nc, window)
                except (OSError, aiohttp.ClientError, TimeoutError) as e:
                    report.client_errors[type(e).__name__] += 1
                    return
            label, code = answer_label(nc.case.seed.level, data, closed)
            report.answers[f"{nc.label}: {label}"] += 1
            if code is not None:
                report.disconnect_codes[code] += 1
                if code == UNSPECIFIED_ERROR:
                    report.crashes.append(f"case {nc.index} ({nc.case.seed.name}, "
                                          f"{'+'.join(nc.case.mutators)}): DISCONNECT 0x80 for "
                                          f"{(nc.prefix + nc.case.wire)[:96].hex()}")

        await asyncio.gather(*(one(i) for i in indices))


def fuzz_node(target: Target, cases: int, run_seed: int, *, websocket: bool = False, batch: int = 1000,
              concurrency: int = 48, window: float = 0.25, probe_timeout: float = 10.0, settle: float = 0.0,
              admin_cases: int = 0, progress: bool = True) -> NodeReport:
    """Run `cases` cases against `target` in batches, probing after each; see the module docstring."""
    report = NodeReport(run_seed, "websocket" if websocket else "tcp")
    report.rss_start_kib = target.rss_kib()
    known_errors = len(target.internal_errors())
    started = time.monotonic()
    for b in range(math.ceil(cases / batch)):
        indices = range(b * batch, min(cases, (b + 1) * batch))
        asyncio.run(run_batch(target, report, run_seed, indices, websocket, concurrency, window))
        report.cases = indices.stop
        if not target.alive():
            report.crashes.append(f"the node exited during cases {indices.start}..{indices.stop - 1}")
            break
        for version, ws in ((5, False), (4, websocket)):
            try:
                took = probe(target, version, ws, probe_timeout)
            except ProbeFailed as e:
                report.hangs.append(f"after case {indices.stop - 1}: {e}")
            else:
                report.probes += 1
                report.slowest_probe = max(report.slowest_probe, took)
        rss = target.rss_kib()
        if b == 0:
            report.rss_baseline_kib = rss
        report.rss_peak_kib = max(report.rss_peak_kib, rss)
        if progress and (b % 10 == 0 or indices.stop == cases):
            elapsed = time.monotonic() - started
            print(f"  {indices.stop} cases, {indices.stop / elapsed:,.0f}/s, RSS {rss / 1024:.1f} MiB, "
                  f"crashes {len(report.crashes)}, hangs {len(report.hangs)}", flush=True)
        if report.hangs:
            break
    report.seconds = time.monotonic() - started
    if admin_cases and target.http_url and target.alive():
        report.rss_before_admin_kib = target.rss_kib()
        report.admin = fuzz_admin.fuzz_admin(target.http_url, target.api_key, admin_cases, run_seed,
                                             alive=target.alive)
        report.rss_after_admin_kib = target.rss_kib() if target.alive() else 0
    report.crashes += [f"node log: {line.strip()[:200]}" for line in target.internal_errors()[known_errors:]]
    if settle and target.alive():
        time.sleep(settle)
    if target.alive():
        report.rss_end_kib = target.rss_kib()
        report.state_end = state_counts(target)
        try:
            probe(target, 5, False, probe_timeout)
            report.probes += 1
        except ProbeFailed as e:
            report.hangs.append(f"at the end: {e}")
    elif not any("exited" in c for c in report.crashes):
        report.crashes.append("the node exited")
    return report


def main(argv: list[str] | None = None) -> int:
    from chaos.node import Node
    from chaos.ports import free_port

    parser = argparse.ArgumentParser(prog="python -m bench.fuzz_node", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None, help="run seed (default: random, printed)")
    parser.add_argument("--websocket", action="store_true", help="send the cases in WebSocket binary frames")
    parser.add_argument("--admin", type=int, default=0, metavar="M", help="also send M hostile admin requests")
    parser.add_argument("--batch", type=int, default=1000, help="cases between two probes (default 1000)")
    parser.add_argument("--concurrency", type=int, default=48, help="connections open at once (default 48)")
    parser.add_argument("--window", type=float, default=0.25, help="seconds each connection is watched")
    parser.add_argument("--probe-timeout", type=float, default=10.0)
    parser.add_argument("--settle", type=float, default=40.0,
                        help="seconds to wait before the last RSS reading (5.0 sessions of the cases expire "
                             "after 30 s, wills after 5 s)")
    parser.add_argument("--keep", action="store_true", help="keep the node's directory (config, data, log)")
    args = parser.parse_args(argv)
    run_seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-node-"))
    ws_port = free_port(HOST)
    node = Node(0, HOST, free_port(HOST), free_port(HOST), free_port(HOST), workdir, {
        "listener.ws.default": f"{HOST}:{ws_port}",
        "log.console.level": "warning",
    })
    print(f"fuzz_node: seed {run_seed}, {args.cases} cases over {'WebSocket' if args.websocket else 'TCP'}, "
          f"batches of {args.batch}, {args.concurrency} connections at once, node in {workdir}", flush=True)
    node.start()
    try:
        proc = node.proc
        assert proc is not None
        target = Target(node.mqtt_port, ws_port, node.url, node.api_key(), proc.pid, node.log_path,
                        lambda: proc.poll() is None)
        report = fuzz_node(target, args.cases, run_seed, websocket=args.websocket, batch=args.batch,
                           concurrency=args.concurrency, window=args.window, probe_timeout=args.probe_timeout,
                           settle=args.settle, admin_cases=args.admin)
        print(report.text())
        if report.failed:
            print(f"node log tail:\n{node.log_tail(40)}")
    finally:
        node.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
