"""Real vmqpy node processes for an experiment: one per loopback address, own data directory, joined with
`vmq-admin`, read through the HTTP admin API. Every process is stopped by its PID (never by name), also when the
harness exits on an error or a signal (`stop_all`)."""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")
NSS_WRAPPER_LIBS = ("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/lib/libnss_wrapper.so")
MODES = {"stop-serving": {}, "trade-consistency": {"trade_consistency": "on"},
         "majority": {"cluster.readiness": "majority"}}

_live: dict[int, subprocess.Popen[bytes]] = {}


class HarnessError(Exception):
    """The cluster could not be started, joined or read."""


def first_existing(paths: tuple[str, ...]) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None)


def loopback(address: str) -> str:
    if not ipaddress.ip_address(address).is_loopback:
        raise ValueError(f"{address} is not a loopback address: experiments only touch 127.0.0.0/8")
    return address


def host_of(base: str, index: int) -> str:
    return loopback(str(ipaddress.ip_address(base) + index))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free_on_all(port: int, hosts: list[str]) -> bool:
    for host in hosts:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Node:
    index: int
    host: str
    mqtt_port: int
    http_port: int
    cluster_port: int
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    cluster_host: str = ""  # what the node listens on and advertises for the cluster (default: its address)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    pids: list[int] = field(default_factory=list)  # every process started for this node
    owned: bool = True  # False: a node of an existing cluster (--attach), never started, stopped or signalled
    attached_name: str = ""
    attached_data: Path | None = None
    source: Path = REPO  # the vmqpy source tree the node runs (`--vmqpy-root`)

    @property
    def name(self) -> str:
        return self.attached_name or f"n{self.index + 1}@{self.cluster_host or self.host}"

    @property
    def short(self) -> str:
        return f"n{self.index + 1}"

    @property
    def data_dir(self) -> Path:
        return self.attached_data or self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "node.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def discovery(self) -> str:
        return f"{self.name}:{self.cluster_port}"

    @property
    def faketime_file(self) -> Path:
        return self.workdir / "faketime.rc"

    def config_text(self) -> str:
        conf = {
            "nodename": self.name,
            "platform_data_dir": str(self.data_dir),
            "listener.tcp.default": f"{self.host}:{self.mqtt_port}",
            "listener.http.default": f"{self.host}:{self.http_port}",
            "listener.vmq.clustering": f"{self.cluster_host or self.host}:{self.cluster_port}",
            "distributed_cookie": "chaos-cookie",
            "cluster.detect_timeout": "1s",
            "metadata.sync_interval": "1s",
            "allow_anonymous": "on",
            "log.console.level": "info",
        }
        conf.update(self.settings)
        return "".join(f"{k} = {v}\n" for k, v in conf.items())

    def _own(self, what: str) -> None:
        if not self.owned:
            raise HarnessError(f"cannot {what} {self.name}: it belongs to a cluster this harness did not start")

    def start(self, deadline_s: float = 30.0) -> None:
        self._own("start")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "vmqpy.conf"
        config.write_text(self.config_text())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VMQ", "LD_PRELOAD", "FAKETIME"))}
        env.update({"PYTHONPATH": str(self.source), "PYTHONUNBUFFERED": "1"})
        env.update(self.env)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vmqpy", "start", "--config", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(self.source), env=env,
                start_new_session=True,
            )
        _live[self.proc.pid] = self.proc
        self.pids.append(self.proc.pid)
        self.paused = False
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise HarnessError(f"{self.name} exited at start:\n{self.log_tail()}")
            if port_open(self.host, self.http_port) and (self.data_dir / "api.key").exists():
                return
            time.sleep(0.1)
        raise HarnessError(f"{self.name} did not listen within {deadline_s}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def signal(self, sig: signal.Signals) -> None:
        pid = self.pid
        if pid is not None:
            os.kill(pid, sig)

    def kill9(self) -> None:
        self._own("kill9")
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        self.proc.wait(10)
        _live.pop(self.proc.pid, None)
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        self._own("pause")
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self._own("resume")
        self.signal(signal.SIGCONT)
        self.paused = False

    def skew(self, seconds: float) -> None:
        """Offset the node's wall clock (libfaketime reads this file; monotonic time is left alone)."""
        self._own("skew")
        self.faketime_file.write_text(f"{seconds:+.0f}s\n" if seconds else "+0\n")

    def stop(self) -> None:
        if self.proc is None or not self.owned:
            return
        _stop(self.proc)
        self.proc = None

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    # ------------------------------------------------------------------------------------------ admin
    def api_key(self) -> str:
        return (self.data_dir / "api.key").read_text().strip()

    def api(self, command: str, params: dict[str, str] | None = None, method: str = "GET",
            timeout: float = 10.0) -> Any:
        """One admin API call; the answer's table or text. Raises HarnessError."""
        query = urllib.parse.urlencode(params or {}, safe="/+#$")
        url = f"{self.url}/api/v1/{command}" + (f"?{query}" if query else "")
        request = urllib.request.Request(url, method=method, headers={"x-api-key": self.api_key()})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body = json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HarnessError(f"{self.name}: {command}: {exc}") from None
        if body.get("type") == "table":
            return body["table"]
        return body.get("text")

    def admin_cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The real `vmq-admin` command line against this node."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VMQ", "LD_PRELOAD"))}
        env.update({"VMQ_ADMIN_URL": self.url, "VMQ_DATA_DIR": str(self.data_dir), "PYTHONPATH": str(self.source)})
        return subprocess.run([sys.executable, "-m", "admin.cli.main", *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=str(self.source))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT (a paused node cannot stop), SIGTERM, then SIGKILL: by PID only."""
    if proc.poll() is None:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                break
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    _live.pop(proc.pid, None)


def stop_all() -> None:
    """Stop every node process this harness started and still runs (by PID)."""
    for proc in list(_live.values()):
        try:
            _stop(proc)
        except (OSError, subprocess.SubprocessError):
            pass


atexit.register(stop_all)


@dataclass
class Cluster:
    nodes: list[Node]

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def join(self, deadline_s: float = 40.0) -> None:
        first = self.nodes[0]
        for node in self.nodes[1:]:
            answer = node.admin_cli("cluster", "join", f"discovery-node={first.discovery}")
            if answer.returncode != 0:
                raise HarnessError(f"join of {node.name} failed: {answer.stderr.strip()}\n{node.log_tail()}")
        if not self.wait_ready(deadline_s):
            raise HarnessError(f"the cluster was not ready within {deadline_s}s: {self.views()}")

    def ready(self) -> bool:
        names = set(self.names)
        for node in self.nodes:
            try:
                rows = node.api("cluster/show")
            except HarnessError:
                return False
            if {r["Node"] for r in rows} != names or not all(r["Ready"] and r["Reachable"] for r in rows):
                return False
        return True

    def wait_ready(self, deadline_s: float) -> bool:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.ready():
                return True
            time.sleep(0.3)
        return False

    def views(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for node in self.nodes:
            try:
                out[node.name] = node.api("cluster/show")
            except HarnessError as exc:
                out[node.name] = str(exc)
        return out

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def build(workdir: Path, nodes: int, base: str, mode: str, *, proxy: bool, skewable: bool,
          source: Path = REPO) -> Cluster:
    """The nodes of one experiment (not started). With `proxy`, every node's cluster address is the name
    `localhost`, which each node resolves (nss_wrapper) to its own address, where the fault proxy listens on
    every other node's cluster port."""
    hosts = [host_of(base, i) for i in range(nodes)]
    used: set[int] = set()
    out: list[Node] = []
    faketime = first_existing(FAKETIME_LIBS)
    nss = first_existing(NSS_WRAPPER_LIBS)
    if skewable and faketime is None:
        raise HarnessError("clock skew needs libfaketime (Debian package libfaketime)")
    if proxy and nss is None:
        raise HarnessError("the fault proxy needs nss_wrapper (Debian package libnss-wrapper)")
    cluster_ports: list[int] = []
    for host in hosts:
        for _ in range(50):
            candidate = free_port(host)
            if candidate not in used and port_free_on_all(candidate, hosts):
                cluster_ports.append(candidate)
                used.add(candidate)
                break
        else:
            raise HarnessError("no cluster port free on every node address")

    def other_port(host: str) -> int:
        for _ in range(50):
            port = free_port(host)
            if port not in used:
                used.add(port)
                return port
        raise HarnessError(f"no free port on {host}")

    for i, host in enumerate(hosts):
        node = Node(i, host, other_port(host), other_port(host), cluster_ports[i], workdir / f"n{i + 1}",
                    dict(MODES[mode]), source=source)
        node.workdir.mkdir(parents=True, exist_ok=True)
        preload: list[str] = []
        if skewable and faketime is not None:
            node.skew(0)
            preload.append(faketime)
            node.env.update({"FAKETIME_TIMESTAMP_FILE": str(node.faketime_file), "FAKETIME_CACHE_DURATION": "1",
                             "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        if proxy and nss is not None:
            hosts_file = node.workdir / "hosts"
            hosts_file.write_text(f"{host} localhost\n")
            preload.append(nss)
            node.env["NSS_WRAPPER_HOSTS"] = str(hosts_file)
            node.cluster_host = "localhost"
        if preload:
            node.env["LD_PRELOAD"] = " ".join(preload)
        out.append(node)
    return Cluster(out)


def read_config(path: Path) -> dict[str, str]:
    """`key = value` lines of a node's configuration file (comments and blank lines skipped)."""
    conf: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            conf[key.strip()] = value.strip()
    return conf


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return loopback(host.strip("[]")), int(port)


def attach(directory: Path) -> tuple[Cluster, str]:
    """The running cluster whose node configurations are `directory/*/vmqpy.conf` (the demo's layout), and the
    netsplit mode they are configured for. Its nodes are read and partitioned, never started or stopped."""
    nodes: list[Node] = []
    modes: set[str] = set()
    for i, path in enumerate(sorted(directory.glob("*/vmqpy.conf"))):
        conf = read_config(path)
        try:
            host, mqtt = _address(conf["listener.tcp.default"])
            _, http = _address(conf["listener.http.default"])
            _, cluster_port = _address(conf["listener.vmq.clustering"])
        except (KeyError, ValueError) as exc:
            raise HarnessError(f"{path}: cannot attach to this node: {exc}") from None
        data = Path(conf.get("platform_data_dir", "data"))
        if not data.is_absolute():
            data = next((c for c in (Path.cwd() / data, path.parent / data, REPO / data) if c.exists()), data)
        node = Node(i, host, mqtt, http, cluster_port, path.parent, owned=False,
                    attached_name=conf.get("nodename", f"n{i + 1}@{host}"), attached_data=data)
        nodes.append(node)
        if conf.get("trade_consistency", "off") == "on":
            modes.add("trade-consistency")
        elif conf.get("cluster.readiness", "all") == "majority":
            modes.add("majority")
        else:
            modes.add("stop-serving")
    if len(nodes) < 2:
        raise HarnessError(f"no cluster to attach to in {directory}: expected DIR/NODE/vmqpy.conf for 2 nodes or more")
    mode = modes.pop() if len(modes) == 1 else "mixed"
    return Cluster(nodes), mode
