"""Shared parts of the cost-curve benches (bench_subscriptions, bench_retained): a vmqpy node that keeps its data
directory across restarts, a small asyncio MQTT 3.1.1 client, settling, fitting and plotting.

The node runs as `<venv python> -m vmqpy start --config F` with the bench settings of `bench.brokers` plus
`systree_enabled = off` (the $SYS publisher would add its own periodic CPU to every figure), and is stopped by
its PID (SIGTERM, then SIGKILL after a bounded wait). Every wait below is bounded in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.brokers import HOST, REPO, cpu_seconds, free_port, port_open, read_status, vmqpy_config
from bench.mqtt_raw import mqtt_string, remaining_length

RESULTS = REPO / "bench" / "results"
IMAGES = REPO / "docs" / "images"


class CurveNode:
    """One vmqpy node whose data directory survives `restart()`; removed by `close()`."""

    def __init__(self, extra_config: str = "", start_timeout: float = 900.0, stop_timeout: float = 300.0) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-curves-"))
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir()
        self.port = free_port()
        self.config_file = self.workdir / "vmqpy.conf"
        self.config_file.write_text(vmqpy_config(self.port, self.data_dir) + "systree_enabled = off\n" + extra_config)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed = False  # True when a stop needed SIGKILL
        self.start_cpu = 0.0  # CPU seconds the node had used when its listener opened (the last start)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("node not running")
        return self.proc.pid

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join((self.workdir / "node.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    def start(self) -> float:
        """Start the node; the seconds from the spawn to its MQTT listener accepting a connection."""
        if self.proc is not None:
            raise RuntimeError("node already running")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        t0 = time.monotonic()
        with open(self.workdir / "node.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "vmqpy", "start", "--config", str(self.config_file)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=str(self.workdir), env=env, start_new_session=True)
        deadline = t0 + self.start_timeout
        while not port_open(self.port):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"vmqpy exited with {code} before listening:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                self.stop()
                raise RuntimeError(f"vmqpy did not listen within {self.start_timeout}s:\n{self.log_tail()}")
            time.sleep(0.02)
        took = time.monotonic() - t0
        self.start_cpu = cpu_seconds(self.proc.pid)
        return took

    def stop(self) -> float:
        """SIGTERM to our PID, wait, SIGKILL to our PID if needed; the seconds it took."""
        proc, self.proc = self.proc, None
        t0 = time.monotonic()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                proc.kill()
                proc.wait(30)
        return time.monotonic() - t0

    def restart(self) -> tuple[float, float]:
        """(seconds to stop, seconds from the new spawn to listening)."""
        stopped = self.stop()
        return stopped, self.start()

    def rss_kib(self) -> int:
        value = read_status(self.pid).get("VmRSS", "0 kB")
        return int(value.split()[0])

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data_dir.rglob("*") if p.is_file())

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> CurveNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def thread_cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of the main thread, CPU seconds of every other thread) of process `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        used = (int(fields[11]) + int(fields[12])) / tick
        if task.name == str(pid):
            main += used
        else:
            others += used
    return main, others


def settle(node: CurveNode, step: float = 1.0, limit: float = 300.0) -> float:
    """Wait until the node's background work after a burst is done: its other threads (the storage writer) idle
    and its event loop's CPU share steady (within 25 % or 2 points of the step before; a node may have periodic
    work that grows with what it holds, so "idle" cannot mean "near zero"); at most `limit` seconds. Returns the
    seconds waited."""
    t0 = time.monotonic()
    main0, others0 = thread_cpu(node.pid)
    previous: float | None = None
    while time.monotonic() - t0 < limit:
        time.sleep(step)
        main1, others1 = thread_cpu(node.pid)
        share, background = (main1 - main0) / step, (others1 - others0) / step
        main0, others0 = main1, others1
        if background < 0.02 and previous is not None and abs(share - previous) <= max(0.25 * previous, 0.02):
            break
        previous = share
    return time.monotonic() - t0


# ----------------------------------------------------------------------------- a minimal MQTT 3.1.1 client

def frame(first: int, body: bytes) -> bytes:
    return bytes([first]) + remaining_length(len(body)) + body


def connect_frame(client_id: str, clean: bool, keepalive: int = 600) -> bytes:
    return frame(0x10, b"\x00\x04MQTT\x04" + bytes([0x02 if clean else 0x00]) + keepalive.to_bytes(2, "big")
                 + mqtt_string(client_id))


def subscribe_frame(packet_id: int, filters: Sequence[str], qos: int) -> bytes:
    return frame(0x82, packet_id.to_bytes(2, "big") + b"".join(mqtt_string(f) + bytes([qos]) for f in filters))


def publish_frame(topic: str, payload: bytes, qos: int = 0, retain: bool = False, packet_id: int = 0,
                  dup: bool = False) -> bytes:
    head = mqtt_string(topic) + (packet_id.to_bytes(2, "big") if qos else b"")
    return frame(0x30 | (0x08 if dup else 0) | (qos << 1) | (1 if retain else 0), head + payload)


def puback_frame(packet_id: int) -> bytes:
    return frame(0x40, packet_id.to_bytes(2, "big"))


DISCONNECT = b"\xe0\x00"


class MqttError(Exception):
    """The broker refused or closed a bench client."""


class Client:
    """One MQTT 3.1.1 connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session_present: bool) -> None:
        self.reader = reader
        self.writer = writer
        self.session_present = session_present

    @classmethod
    async def connect(cls, port: int, client_id: str, clean: bool = True, timeout: float = 30.0,
                      host: str = HOST) -> Client:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(connect_frame(client_id, clean))
        client = cls(reader, writer, False)
        try:
            kind, body = await asyncio.wait_for(client.read(), timeout)
        except BaseException:
            writer.close()
            raise
        if kind != 0x20 or len(body) != 2 or body[1] != 0:
            writer.close()
            raise MqttError(f"{client_id}: CONNACK refused ({kind:#x} {body.hex()})")
        client.session_present = bool(body[0] & 1)
        return client

    async def read(self) -> tuple[int, bytes]:
        """The next packet: (first byte, body)."""
        head = await self.reader.readexactly(1)
        length, shift = 0, 0
        for _ in range(4):
            b = (await self.reader.readexactly(1))[0]
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        return head[0], (await self.reader.readexactly(length)) if length else b""

    async def subscribe(self, filters: Sequence[str], qos: int = 1, packet_id: int = 1,
                        timeout: float = 60.0) -> None:
        self.writer.write(subscribe_frame(packet_id, filters, qos))
        kind, body = await asyncio.wait_for(self.read(), timeout)
        if kind != 0x90 or len(body) != 2 + len(filters) or 0x80 in body[2:]:
            raise MqttError(f"SUBACK refused: {kind:#x} {body.hex()}")

    async def disconnect(self) -> None:
        try:
            self.writer.write(DISCONNECT)
            await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 10)
        except (TimeoutError, ConnectionError, OSError):
            pass


def parse_publish(first: int, body: bytes) -> tuple[str, int, bytes]:
    """(topic, packet id or 0, payload) of a PUBLISH body."""
    tlen = int.from_bytes(body[:2], "big")
    topic = body[2:2 + tlen].decode()
    if (first >> 1) & 3:
        return topic, int.from_bytes(body[2 + tlen:4 + tlen], "big"), body[4 + tlen:]
    return topic, 0, body[2 + tlen:]


# ----------------------------------------------------------------------------- figures

def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys over xs (None with fewer than two distinct xs)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def parse_sizes(text: str) -> list[int]:
    """"1000,10k,1M" -> [1000, 10000, 1000000]; ValueError with the bad item otherwise."""
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        mult = {"k": 1000, "m": 1_000_000}.get(item[-1], 1)
        digits = item[:-1] if mult > 1 else item
        if not digits.isdigit() or int(digits) * mult <= 0:
            raise ValueError(f"not a positive size: {item!r}")
        out.append(int(digits) * mult)
    if not out or out != sorted(out):
        raise ValueError(f"sizes must be given in increasing order: {text!r}")
    return out


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str))


def plot(path: Path, title: str, xlabel: str, panels: list[tuple[str, list[float], list[float | None]]]) -> None:
    """One PNG, one panel per (y label, xs, ys), log-scaled x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (ylabel, xs, ys) in zip(axes[0], panels, strict=True):
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
