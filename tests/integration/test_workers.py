"""`vmqpy start --workers 2` as an operator runs it: one command, one MQTT port, two nodes joined as one local
cluster that `vmq-admin` on worker 1 shows whole; a worker killed with SIGKILL is started again and rejoins; a
SIGTERM to the supervisor stops every worker (docs/scaling.md, "One command: vmqpy start --workers N")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos import processes
from chaos.ports import consecutive_ports, free_port
from tests.integration.clients import PahoClient
from tests.integration.cluster import port_open
from tests.integration.conftest import wait_until
from tests.lanes import PLACEMENT
from vmqpy.workers.supervisor import started_pids

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy workers")]

REPO = Path(__file__).resolve().parents[2]
COOKIE = "workers-test-cookie-a-long-random-secret-0123456789"
MAX_CLIENTS = 64  # clients connected until both workers hold one: the kernel spreads them (2^-63 to miss)


class Workers:
    """The supervisor process of `vmqpy start --workers 2`, its stderr in a file."""

    def __init__(self, workdir: Path, host: str) -> None:
        self.host = host
        self.mqtt_port = free_port(host)
        self.cluster_port = consecutive_ports(host, 2)  # worker 2 takes P + 1
        self.http_port = consecutive_ports(host, 2)
        self.config = workdir / "workers.conf"
        self.config.write_text(
            f"nodename = wk@{host}\n"
            f"listener.tcp.default = {host}:{self.mqtt_port}\n"
            f"listener.vmq.clustering = {host}:{self.cluster_port}\n"
            f"listener.http.default = {host}:{self.http_port}\n"
            f"platform_data_dir = {workdir / 'data'}\n"
            "allow_anonymous = on\n"
            f"distributed_cookie = {COOKIE}\n"
            "log.console.level = info\n")
        self.output = workdir / "supervisor.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vmqpy", "start", "--config", str(self.config), "--workers", "2"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)

    def lines(self) -> str:
        return self.output.read_text(errors="replace")

    def pids(self) -> dict[int, int]:
        """The latest PID of each worker, from the supervisor's `started` lines."""
        return started_pids(self.lines())

    def admin(self, *args: str) -> Any:
        """`vmq-admin --config FILE --json ARGS` (against worker 1, the configuration's admin API)."""
        done = subprocess.run([sys.executable, "-m", "admin.cli.main", "--config", str(self.config), "--json", *args],
                              capture_output=True, text=True, timeout=30, cwd=REPO, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def cluster(self) -> dict[str, dict[str, Any]]:
        return {row["Node"]: row for row in self.admin("cluster", "show")}

    def stop(self) -> None:
        if self.process is None:
            return
        processes.stop(self.process)  # SIGTERM to the supervisor's PID (it stops its workers), SIGKILL after 10 s
        for pid in self.pids().values():  # a worker the supervisor left behind would be a bug: stop it anyway
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def both_ready(workers: Workers) -> bool:
    if not port_open(workers.host, workers.http_port):  # worker 1 may answer after worker 2 under load
        return False
    rows = workers.cluster()
    return len(rows) == 2 and all(row["Reachable"] and row["Ready"] for row in rows.values())


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    running = Workers(tmp_path, PLACEMENT.first_host)
    running.start()
    try:
        wait_until(lambda: port_open(running.host, running.mqtt_port) and len(running.pids()) == 2, 30,
                   interval=0.2, what="the supervisor to start two workers")
        apis = (running.http_port, running.http_port + 1)
        wait_until(lambda: all(port_open(running.host, port) for port in apis), 30, interval=0.2,
                   what="both workers' admin APIs")
        wait_until(lambda: both_ready(running), 30, interval=0.5, what="two workers, one cluster")
        yield running
    finally:
        running.stop()


def test_two_workers_share_one_port_and_route_between_them(workers: Workers) -> None:
    nodes = set(workers.cluster())
    assert nodes == {f"wk@{workers.host}", f"wk-w2@{workers.host}"}
    clients: dict[str, PahoClient] = {}
    try:
        where: dict[str, str] = {}
        for i in range(MAX_CLIENTS):
            client = clients[f"spread-{i}"] = PahoClient(workers.mqtt_port, version=4, client_id=f"spread-{i}",
                                                         host=workers.host)
            client.connect()
            where = {row["client_id"]: row["node"] for row in workers.admin("session", "show")}
            if len(set(where.values())) == 2:
                break
        assert set(where.values()) == nodes, f"every client landed on one worker: {where}"
        # a subscriber on one worker, a publisher on the other: the message crosses the local cluster
        subscriber = clients[next(c for c, node in where.items() if node == f"wk@{workers.host}")]
        publisher = clients[next(c for c, node in where.items() if node == f"wk-w2@{workers.host}")]
        subscriber.subscribe("workers/cross", qos=1)
        wait_until(lambda: "workers/cross" in json.dumps(workers.admin("subscription", "show")), 10,
                   what="the subscription in the cluster's view")
        publisher.publish("workers/cross", b"over the hop", qos=1)
        got = subscriber.collect(1, 10)
        assert [m.payload for m in got] == [b"over the hop"]
    finally:
        for client in clients.values():
            client.stop()


def test_a_killed_worker_is_started_again_and_rejoins_then_sigterm_stops_all(workers: Workers) -> None:
    first = workers.pids()
    os.kill(first[2], signal.SIGKILL)
    wait_until(lambda: workers.pids().get(2) not in (None, first[2]), 15, interval=0.2,
               what="the supervisor to start worker 2 again")
    assert "worker 2 (wk-w2@" in workers.lines() and "exited with status -9; starting it again" in workers.lines()
    wait_until(lambda: both_ready(workers), 30, interval=0.5, what="worker 2 back in the cluster")
    again = workers.pids()
    assert workers.process is not None
    workers.process.send_signal(signal.SIGTERM)
    assert workers.process.wait(60) == 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in again.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in again.values() if alive(pid)], workers.lines()[-2000:]
    assert "every worker stopped" in workers.lines()


def test_workers_without_a_cluster_listener_are_refused(tmp_path: Path) -> None:
    host = PLACEMENT.first_host
    config = tmp_path / "alone.conf"
    config.write_text(f"listener.tcp.default = {host}:{free_port(host)}\nplatform_data_dir = {tmp_path / 'd'}\n")
    done = subprocess.run([sys.executable, "-m", "vmqpy", "start", "--config", str(config), "--workers", "2"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert done.returncode == 2
    assert "--workers needs listener.vmq.clustering" in done.stderr
