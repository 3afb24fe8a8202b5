"""Real vmqpy clusters for tests, on the chaos harness: node processes (chaos.node) on 127.0.0.11 upwards,
joined with the real vmq-admin (chaos.cluster), and partitions made with iptables DROP rules in the tests' own
chain VMQPY-TEST (chaos.iptables), always removed. Under pytest-xdist a worker's modules use its own address
block and chain instead (127.0.(N+1).11 upwards, VMQPY-TEST-(N+1): tests/lanes.py). What is added
here is only what the tests need: nodes numbered from 1 (n1 on the block's .11), MQTT clients stopped with their
node, and the nodes a test started (for the log tails of a failed test)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Self

from chaos.cluster import Cluster
from chaos.iptables import OUTPUT, Chain
from chaos.node import START_DEADLINE_S, Node
from chaos.ports import free_port, host_of, port_open
from tests.integration.clients import PahoClient
from tests.integration.conftest import wait_until
from tests.lanes import PLACEMENT

__all__ = ["STARTED", "ClusterNode", "cluster_ready", "cut", "heal", "join_all", "partition_chain",
           "port_open", "start_all", "start_cluster", "teardown_chain", "wait_seconds"]

JOIN_DEADLINE_S = 20.0

STARTED: list[ClusterNode] = []  # every node this test process started, for the log tails of a failed test


class ClusterNode(Node):
    """Node `index` (from 1) of a test cluster, in `workdir`/n{index}, with `extra` configuration keys."""

    def __init__(self, index: int, workdir: Path, extra: dict[str, Any] | None = None) -> None:
        host = host_of(PLACEMENT.first_host, index - 1)  # node 1 on the block's .11, node i on .(10 + i)
        settings = {"distributed_cookie": "test-cookie", **{k: str(v) for k, v in (extra or {}).items()}}
        super().__init__(index - 1, host, free_port(host), free_port(host), free_port(host), workdir / f"n{index}",
                         settings)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.clients: list[PahoClient] = []
        self.started_at = 0.0

    @property
    def log(self) -> Path:
        return self.log_path

    def start(self, deadline_s: float = START_DEADLINE_S) -> Self:
        self.started_at = time.monotonic()
        if self not in STARTED:
            STARTED.append(self)
        return super().start(deadline_s)

    def stop(self) -> None:
        for client in self.clients:
            client.stop()
        self.clients.clear()
        super().stop()

    def admin(self, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        """`vmq-admin ARGS` against this node (the tests' name for `admin_cli`)."""
        return self.admin_cli(*args, key=key)

    def show(self) -> list[dict[str, Any]]:
        """`vmq-admin cluster show --json` on this node; the command must succeed."""
        answer = self.admin("cluster", "show", "--json")
        assert answer.returncode == 0, answer.stderr
        rows: list[dict[str, Any]] = json.loads(answer.stdout)
        return rows

    def health(self) -> tuple[int, dict[str, Any]]:
        """`GET /health` on this node: the status and the JSON body (503 answers included)."""
        return self.get("/health")

    def get(self, path: str, key: str | None = None) -> tuple[int, Any]:
        """`GET path` on this node's HTTP API, with `key` in the x-api-key header: the status and the JSON body
        (error answers included)."""
        request = urllib.request.Request(self.url + path, headers={"x-api-key": key} if key else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read())

    def rows(self, *args: str) -> list[dict[str, Any]]:
        """The rows of `vmq-admin ARGS --json` against this node (the command must succeed)."""
        answer = self.admin(*args, "--json")
        assert answer.returncode == 0, answer.stderr
        found: list[dict[str, Any]] = json.loads(answer.stdout)
        return found

    def client(self, version: int = 5, client_id: str = "", **kw: Any) -> PahoClient:
        c = PahoClient(self.mqtt_port, version, client_id, host=self.host, **kw)
        self.clients.append(c)
        c.connect()
        return c


def cluster_ready(nodes: list[ClusterNode]) -> bool:
    return Cluster(list(nodes)).ready()


def join_all(nodes: list[ClusterNode]) -> None:
    Cluster(list(nodes)).join(JOIN_DEADLINE_S)


def start_all(nodes: list[ClusterNode]) -> None:
    """Start the nodes side by side (a node's start is mostly its interpreter importing vmqpy, ~0.6 s of CPU: the
    cores share that work instead of waiting for each node in turn). Every start is waited for; the first error is
    raised then, and the nodes that did start are left running for the caller to stop."""
    for node in nodes:  # in order, for the log tails of a failed test
        if node not in STARTED:
            STARTED.append(node)
    with ThreadPoolExecutor(max_workers=max(1, len(nodes)), thread_name_prefix="node-start") as pool:
        starts = [pool.submit(node.start) for node in nodes]
    errors = [exc for exc in (start.exception() for start in starts) if exc is not None]
    if errors:
        raise errors[0]


def start_cluster(workdir: Path, extra: dict[str, Any] | None = None, count: int = 3) -> list[ClusterNode]:
    """`count` nodes on 127.0.0.11 upwards, joined; every node started is stopped again if joining fails."""
    nodes = [ClusterNode(i, workdir, extra) for i in range(1, count + 1)]
    cluster = Cluster(list(nodes))
    try:
        start_all(nodes)
        cluster.join(JOIN_DEADLINE_S)
    except BaseException:
        cluster.stop()
        raise
    return nodes


def partitions() -> Chain:
    """The chain of the module now running (VMQPY-TEST, or its worker's own), jumped to from OUTPUT for loopback
    traffic; not the chaos experiments' chain: neither removes the other's rules."""
    return Chain(PLACEMENT.chain, (OUTPUT,))


def partition_chain() -> AbstractContextManager[Chain]:
    """Our own chain, flushed and removed on the way out."""
    return partitions().installed()


def teardown_chain() -> None:
    partitions().remove()


def cut(a: Node, b: Node) -> None:
    """Drop every packet between the two nodes' addresses, both ways."""
    partitions().drop_between(a.host, b.host)


def heal() -> None:
    partitions().flush()


def wait_seconds(condition: Any, timeout: float) -> float:
    start = time.monotonic()
    wait_until(condition, timeout, interval=0.1)
    return time.monotonic() - start
