"""Strangers on the cluster port (vmqpy.cluster.pending_links): sockets that never finish the handshake take at most
`cluster.max_pending_links_per_address` descriptors of one address and `cluster.max_pending_links` of the node, so
the node's descriptors stay within its budget, `/health` answers and real nodes still join during the flood: from
an address of their own while the stranger holds its address's cap, and while strangers on 40 addresses hold
every node-wide place (a member's address holds fewer places than the stranger's heaviest, so it takes one).

Node 1 runs under `prlimit --nofile=400:400` (fewer descriptors than the flood has sockets), its
`cluster.handshake_timeout` at 60 s so the stranger's sockets would stay for the whole test. Both nodes listen on
127.0.0.1 (free ports; node 2 dials from 127.0.0.1); the stranger's sockets come from 127.0.0.5 (one address),
then from 127.1.0.1-40 (many)."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_api import admin
from tests.integration.conftest import Broker, broker_kind, free_port, health, wait_until
from tests.integration.process_usage import descriptors

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's cluster port budget")]

NOFILE = 400
FLOOD = 600  # more sockets than node 1 has descriptors
STRANGER = "127.0.0.5"
MANY = [f"127.1.0.{i}" for i in range(1, 41)]
COOKIE = "strangers-test-cookie"


class ClusteredBroker(Broker):
    """A node with a cluster listener and an admin API on free ports of 127.0.0.1, under `prlimit` if `nofile`."""

    def __init__(self, workdir: Path, name: str, nofile: int | None, extra: dict[str, Any]) -> None:
        self.cluster_port, self.http_port = free_port(), free_port()
        self.name = f"{name}@127.0.0.1"
        super().__init__(broker_kind(), workdir, {
            "nodename": self.name, "distributed_cookie": COOKIE,
            "listener.vmq.clustering": f"127.0.0.1:{self.cluster_port}",
            "listener.http.default": f"127.0.0.1:{self.http_port}", **extra})
        self.nofile = nofile

    def command(self) -> list[str]:
        if self.nofile is None:
            return super().command()
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *super().command()]  # execs: same PID

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def descriptors(self) -> int:
        return descriptors(self.pid)

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real `vmq-admin ARGS` against this node."""
        return admin(self.url, self.data_dir, *args)

    def health(self) -> int | None:
        return health(self.url)

    def refused(self, reason: str) -> float:
        """vmqpy_cluster_connections_refused_total{reason=...} in the node's /metrics (metrics.public = on)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for line in text.splitlines():
            if line.startswith("vmqpy_cluster_connections_refused_total{") and f'reason="{reason}"' in line:
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"vmqpy_cluster_connections_refused_total{{reason={reason!r}}} not in /metrics")

    def sees(self, names: set[str]) -> bool:
        """`vmq-admin cluster show --json`: exactly `names`, each ready and reachable."""
        shown = self.admin("cluster", "show", "--json")
        if shown.returncode != 0:
            return False
        rows = json.loads(shown.stdout)
        return {r["Node"] for r in rows} == names and all(r["Ready"] and r["Reachable"] for r in rows)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Callable[..., ClusteredBroker]]:
    started: list[ClusteredBroker] = []

    def make(name: str, nofile: int | None = None, **extra: Any) -> ClusteredBroker:
        broker = ClusteredBroker(tmp_path / name, name, nofile, extra)
        started.append(broker)
        broker.start()
        wait_until(lambda: broker.health() == 200, 15, what=f"{name}'s admin API")
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture
def stranger() -> Iterator[list[socket.socket]]:
    """The stranger's sockets, all closed at the end."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def flood(sockets: list[socket.socket], sources: list[str], port: int, count: int) -> None:
    """`count` sockets to the cluster port on 127.0.0.1, from `sources` in turn, that never send a byte (a connect
    the node's full backlog does not take is not retried)."""
    for i in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(2)
        try:
            sock.bind((sources[i % len(sources)], 0))
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        sockets.append(sock)


def test_a_strangers_pending_sockets_leave_descriptors_health_and_joins_alone(
        nodes: Callable[..., ClusteredBroker], stranger: list[socket.socket]) -> None:
    settings = {"cluster.handshake_timeout": "60s", "metrics.public": "on"}
    one = nodes("n1", NOFILE, **settings)
    two = nodes("n2", **settings)
    before = one.descriptors()
    assert one.refused("pending_per_address") == 0 and one.refused("pending") == 0  # exported from the start

    # one address: it holds its 8 places, every other socket is closed at once
    flood(stranger, [STRANGER], one.cluster_port, FLOOD)
    wait_until(lambda: one.refused("pending_per_address") >= len(stranger) - 8, 20,
               what="the stranger's sockets over its address's cap refused")
    assert one.descriptors() <= before + 8 + 4  # its 8, and what the admin requests hold
    assert one.health() == 200
    joined = two.admin("cluster", "join", f"discovery-node={one.name}:{one.cluster_port}")
    assert joined.returncode == 0, joined.stderr
    wait_until(lambda: one.sees({one.name, two.name}) and two.sees({one.name, two.name}), 30,
               what="node 2 joined during the flood")

    # many addresses: the node-wide cap holds, /health still answers, and a member dialing from an address that
    # holds fewer places than the stranger's heaviest takes one of theirs: node 3 joins
    flood(stranger, MANY, one.cluster_port, FLOOD)
    wait_until(lambda: one.refused("pending") > 0, 20, what="sockets over the node-wide cap refused")
    assert one.descriptors() <= before + 64 + 4 + 4  # the node-wide 64, the links to node 2, the admin requests
    assert one.health() == 200
    assert one.sees({one.name, two.name})  # the established link is untouched
    three = nodes("n3", **settings)
    joined = three.admin("cluster", "join", f"discovery-node={one.name}:{one.cluster_port}")
    assert joined.returncode == 0, joined.stderr
    members = {one.name, two.name, three.name}
    wait_until(lambda: all(n.sees(members) for n in (one, two, three)), 30, what="node 3 joined during the flood")
    assert one.descriptors() <= before + 64 + 4 + 8
    assert "cluster connections refused: too many have not finished their handshake" in one.log_tail(400)
