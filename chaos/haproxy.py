"""The real HAProxy in front of a cluster, with the shipped configuration (deploy/haproxy/haproxy.cfg): `render`
turns that file into one for given node addresses (pure), `Balancer` runs it in the foreground (started and
stopped by PID) and reads its runtime API. The chaos experiments that send their clients through HAProxy
(`rolling-restart`, `--via haproxy`), the HAProxy integration tests and bench/bench_balancer.py all use it."""

from __future__ import annotations

import csv
import io
import re
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from chaos import processes
from chaos.errors import HarnessError
from chaos.node import REPO
from chaos.ports import free_port, port_open
from chaos.zygote import NodeProcess

HAPROXY = Path("/usr/sbin/haproxy")
SHIPPED = REPO / "deploy" / "haproxy" / "haproxy.cfg"
BACKEND = "mqtt"


@dataclass(frozen=True)
class Server:
    """One node as HAProxy sees it: its server name, where it takes MQTT and where /health answers."""

    name: str
    host: str
    mqtt_port: int
    http_port: int


def render(shipped: str, frontend: tuple[str, int], servers: Sequence[Server], stats_socket: Path,
           proxy_protocol: bool, maxconn: int | None = None, sticky: bool = True) -> str:
    """The shipped configuration for these servers: the frontend on `frontend`, one server line per node (its MQTT
    address, its admin port for the health check), the runtime API at `stats_socket`, in the foreground as this
    user, logging to stderr, the shipped `maxconn` (it fits the documented descriptor limit: tests/integration/
    test_deploy.py) unless `maxconn` is given, without `send-proxy-v2` unless `proxy_protocol`, and
    without the stick table and its rules unless `sticky` (bench/bench_balancer.py measures the difference).
    ValueError when the shipped text has no server or bind line, or no servers are given."""
    if not servers:
        raise ValueError("HAProxy needs at least one server")
    out: list[str] = []
    servers_written = bind_written = False
    for line in shipped.splitlines():
        words = line.split()
        first = words[0] if words else ""
        if first in ("daemon", "chroot", "user", "group"):
            continue
        if not sticky and (first in ("stick-table", "stick") or words[:2] == ["acl", "has_client_id"]):
            continue
        if line.startswith("    log /dev/log"):
            line = "    log stderr format raw local0"
        elif first == "maxconn" and maxconn is not None:
            line = f"    maxconn {maxconn}"
        elif first == "stats" and words[1:2] == ["socket"]:
            line = f"    stats socket {stats_socket} mode 600 level admin"
        elif first == "bind":
            bind_written = True
            line = f"    bind {frontend[0]}:{frontend[1]}"
        elif first == "server":
            if servers_written:
                continue
            servers_written = True
            out.extend(f"    server {s.name} {s.host}:{s.mqtt_port} check port {s.http_port}" for s in servers)
            continue
        elif first == "default-server" and not proxy_protocol:
            line = line.replace(" send-proxy-v2", "")
        out.append(line)
    if not servers_written or not bind_written:
        raise ValueError("the shipped configuration has no server or no bind line")
    return "\n".join(out) + "\n"


class Balancer:
    """The real HAProxy in the foreground on `host`:`port` (a free port when not given), in `workdir`."""

    def __init__(self, workdir: Path, servers: Sequence[Server], proxy_protocol: bool = True,
                 host: str = "127.0.0.1", port: int | None = None, maxconn: int | None = None,
                 sticky: bool = True) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.servers = list(servers)
        self.workdir = workdir
        self.socket = workdir / "haproxy.sock"
        self.config = workdir / "haproxy.cfg"
        self.log = workdir / "haproxy.log"
        self.proxy_protocol = proxy_protocol
        self.maxconn = maxconn
        self.sticky = sticky
        self.proc: NodeProcess | None = None

    @staticmethod
    def missing() -> str | None:
        """Why HAProxy cannot run here, or None."""
        return None if HAPROXY.exists() else f"HAProxy is not installed ({HAPROXY}; scripts/debian-deps.sh)"

    def start(self, deadline_s: float = 15.0) -> Self:
        """Write the configuration, check it (`haproxy -c`), start HAProxy and wait until it listens and every
        server is UP. HarnessError otherwise (HAProxy stopped again)."""
        if (why := self.missing()) is not None:
            raise HarnessError(why)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(render(SHIPPED.read_text(), (self.host, self.port), self.servers, self.socket,
                                      self.proxy_protocol, self.maxconn, self.sticky))
        check = subprocess.run([str(HAPROXY), "-c", "-f", str(self.config)], capture_output=True, text=True,
                               timeout=30)
        if check.returncode != 0:
            raise HarnessError(f"haproxy -c refused {self.config}: {check.stdout}{check.stderr}")
        self.proc = processes.spawn([str(HAPROXY), "-db", "-f", str(self.config)], self.log, self.workdir, {})
        try:
            self._wait(lambda: port_open(self.host, self.port) and self.socket.exists(), deadline_s,
                       "HAProxy listening")
            for server in self.servers:
                self.wait_status(server.name, up=True, deadline_s=deadline_s)
        except HarnessError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc)
            self.proc = None

    def _wait(self, cond: Callable[[], object], deadline_s: float, what: str) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise HarnessError(f"HAProxy exited while waiting for {what}: see {self.log}")
            if cond():
                return
            time.sleep(0.1)
        raise HarnessError(f"timed out after {deadline_s}s waiting for {what}")

    def command(self, line: str) -> str:
        """One runtime API command; its whole answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5.0)
            sock.connect(str(self.socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_status(self) -> dict[str, str]:
        """Server name -> UP, DOWN, MAINT, ... (`show stat`); empty when the runtime API does not answer."""
        try:
            text = self.command("show stat").lstrip("# ")
        except OSError:
            return {}
        rows = csv.DictReader(io.StringIO(text))
        return {r["svname"]: (r["status"] or "?").split()[0] for r in rows
                if r["pxname"] == BACKEND and r["svname"] not in ("BACKEND", "FRONTEND")}

    def wait_status(self, name: str, *, up: bool, deadline_s: float) -> None:
        """Until HAProxy has server `name` UP (`up`) or anything but UP; HarnessError at the deadline."""
        state = "UP" if up else "out of the pool"
        self._wait(lambda: (self.server_status().get(name) == "UP") == up, deadline_s,
                   f"server {name} {state} in HAProxy")

    def stick_table(self) -> dict[str, str]:
        """Client id -> the server name its entry names (`show table mqtt`)."""
        by_id = {str(i + 1): s.name for i, s in enumerate(self.servers)}
        entries = {}
        for line in self.command(f"show table {BACKEND}").splitlines():
            key = re.search(r" key=(\S+)", line)
            server = re.search(r" server_id=(\d+)", line)
            if key and server and server.group(1) in by_id:
                entries[key.group(1)] = by_id[server.group(1)]
        return entries
