"""Real vmqpy clusters for tests: one process per node on 127.0.0.11 upwards, joined with the real vmq-admin,
and partitions made with iptables DROP rules in a chain of the project's own (always removed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.integration.clients import PahoClient
from tests.integration.conftest import REPO, free_port, wait_until

CHAIN = "VMQPY-TEST"

STARTED: list[ClusterNode] = []  # every node this test process started, for the log tails of a failed test


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class ClusterNode:
    """One vmqpy node process with its MQTT, HTTP admin and cluster listeners on its own loopback address."""

    def __init__(self, index: int, workdir: Path, extra: dict[str, Any] | None = None) -> None:
        self.index = index
        self.host = f"127.0.0.{10 + index}"
        self.name = f"n{index}@{self.host}"
        self.mqtt_port, self.http_port, self.cluster_port = (free_port(self.host) for _ in range(3))
        self.workdir = workdir / f"n{index}"
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.workdir / "node.log"
        self.extra = dict(extra or {})
        self.env: dict[str, str] = {}  # added to the process environment (e.g. libfaketime's LD_PRELOAD)
        self.proc: subprocess.Popen[bytes] | None = None
        self.clients: list[PahoClient] = []
        self.started_at = 0.0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def discovery(self) -> str:
        return f"{self.name}:{self.cluster_port}"

    def config_text(self) -> str:
        conf = {
            "nodename": self.name,
            "platform_data_dir": str(self.data_dir),
            "listener.tcp.default": f"{self.host}:{self.mqtt_port}",
            "listener.http.default": f"{self.host}:{self.http_port}",
            "listener.vmq.clustering": f"{self.host}:{self.cluster_port}",
            "distributed_cookie": "test-cookie",
            "cluster.detect_timeout": "1s",
            "metadata.sync_interval": "1s",
            "log.console.level": "info",
        }
        conf.update({k: str(v) for k, v in self.extra.items()})
        return "".join(f"{k} = {v}\n" for k, v in conf.items())

    def start(self) -> ClusterNode:
        (self.workdir / "vmqpy.conf").write_text(self.config_text())
        self.started_at = time.monotonic()
        if self not in STARTED:
            STARTED.append(self)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vmqpy", "start", "--config", str(self.workdir / "vmqpy.conf")],
                stdout=logf, stderr=subprocess.STDOUT, cwd=str(REPO), env=env, start_new_session=True,
            )
        wait_until(lambda: port_open(self.host, self.http_port) or self.proc.poll() is not None, 20,  # type: ignore[union-attr]
                   what=f"{self.name} listening")
        assert self.proc.poll() is None, f"{self.name} exited:\n{self.log_tail()}"
        return self

    def stop(self) -> None:
        for client in self.clients:
            client.stop()
        self.clients.clear()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    def admin(self, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VMQ")}
        env.update({"VMQ_ADMIN_URL": self.url, "VMQ_DATA_DIR": str(self.data_dir), "PYTHONPATH": str(REPO)})
        if key is not None:
            env["VMQ_API_KEY"] = key
        return subprocess.run([sys.executable, "-m", "admin.cli.main", *args], capture_output=True, text=True,
                              timeout=30, env=env, cwd=str(REPO))

    def show(self) -> list[dict[str, Any]]:
        answer = self.admin("cluster", "show", "--json")
        assert answer.returncode == 0, answer.stderr
        rows: list[dict[str, Any]] = json.loads(answer.stdout)
        return rows

    def client(self, version: int = 5, client_id: str = "", **kw: Any) -> PahoClient:
        c = PahoClient(self.mqtt_port, version, client_id, host=self.host, **kw)
        self.clients.append(c)
        c.connect()
        return c


def cluster_ready(nodes: list[ClusterNode]) -> bool:
    names = {n.name for n in nodes}
    for node in nodes:
        rows = node.show()
        if {r["Node"] for r in rows} != names or not all(r["Ready"] and r["Reachable"] for r in rows):
            return False
    return True


def join_all(nodes: list[ClusterNode]) -> None:
    for node in nodes[1:]:
        answer = node.admin("cluster", "join", f"discovery-node={nodes[0].discovery}")
        assert answer.returncode == 0, f"join failed: {answer.stderr}\n{node.log_tail()}"
    wait_until(lambda: cluster_ready(nodes), 20, interval=0.2, what="every node sees every node ready")


def start_cluster(workdir: Path, extra: dict[str, Any] | None = None, count: int = 3) -> list[ClusterNode]:
    """`count` nodes on 127.0.0.11 upwards, joined; every node started is stopped again if joining fails."""
    nodes: list[ClusterNode] = []
    try:
        for i in range(1, count + 1):
            nodes.append(ClusterNode(i, workdir, extra).start())
        join_all(nodes)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, timeout=20, check=check)


@contextmanager
def partition_chain() -> Iterator[None]:
    """Our own chain, jumped to from OUTPUT for loopback traffic; flushed and removed on the way out."""
    teardown_chain()
    _iptables("-N", CHAIN)
    _iptables("-I", "OUTPUT", "-o", "lo", "-j", CHAIN)
    try:
        yield
    finally:
        teardown_chain()


def teardown_chain() -> None:
    for _ in range(10):
        if _iptables("-D", "OUTPUT", "-o", "lo", "-j", CHAIN, check=False).returncode != 0:
            break
    _iptables("-F", CHAIN, check=False)
    _iptables("-X", CHAIN, check=False)


def cut(a: ClusterNode, b: ClusterNode) -> None:
    """Drop every packet between the two nodes' addresses, both ways."""
    for src, dst in ((a.host, b.host), (b.host, a.host)):
        _iptables("-A", CHAIN, "-s", src, "-d", dst, "-j", "DROP")


def heal() -> None:
    _iptables("-F", CHAIN)


def wait_seconds(condition: Any, timeout: float) -> float:
    start = time.monotonic()
    wait_until(condition, timeout, interval=0.1)
    return time.monotonic() - start
