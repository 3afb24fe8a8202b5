"""File descriptors and connection counts on a real node (vmqpy.descriptors, vmqpy.broker.address_limit,
admin.connection_cap): the node raises its soft open files limit to the hard one; idle MQTT sockets at the limit
leave `/health` and `vmq-admin` answering; one address cannot fill the node and lock another out (behind the
PROXY protocol, the client's address counts); idle and trickling admin connections are closed and capped.

Nodes run under `prlimit` (soft and hard RLIMIT_NOFILE of the test's choosing) on free ports; client sockets are
bound to 127.0.0.2 and 127.0.0.3 so the node sees two addresses."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import enc_connect
from tests.integration.conftest import Broker, broker_kind, free_port, wait_until
from tests.integration.test_admin import admin

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's descriptor budget and per-address limits")]

ADDRESS_A = "127.0.0.2"  # the address that floods
ADDRESS_B = "127.0.0.3"  # another client's


class LimitedBroker(Broker):
    """A node started under `prlimit --nofile=SOFT:HARD`."""

    def __init__(self, workdir: Path, soft: int, hard: int, extra: dict[str, Any]) -> None:
        super().__init__(broker_kind(), workdir, extra)
        self.nofile = (soft, hard)

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile[0]}:{self.nofile[1]}", "--", *super().command()]

    def open_files_limit(self) -> tuple[int, int]:
        """(soft, hard) RLIMIT_NOFILE of the running process, from /proc/PID/limits."""
        for line in Path(f"/proc/{self.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
        raise AssertionError("no 'Max open files' line")

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Callable[..., LimitedBroker]]:
    started: list[LimitedBroker] = []

    def make(soft: int, hard: int, **extra: Any) -> LimitedBroker:
        broker = LimitedBroker(tmp_path / f"node{len(started)}", soft, hard, extra)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()


@contextlib.contextmanager
def sockets_from(address: str) -> Iterator[list[socket.socket]]:
    """A list to put client sockets bound to `address` in; all closed at the end."""
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def connect_from(address: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.settimeout(5)
    sock.connect((host, port))
    sock.setblocking(False)  # closed_by_peer looks without waiting
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed `sock` (EOF or reset), without waiting."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def mqtt_connects_from(address: str, port: int, client_id: str) -> bool:
    """A 3.1.1 CONNECT from `address` gets CONNACK accepted (0x20 0x02, no session, return code 0)."""
    try:
        with connect_from(address, port) as sock:
            sock.settimeout(5)
            sock.sendall(enc_connect(client_id))
            received = b""
            while len(received) < 4:
                chunk = sock.recv(4 - len(received))
                if not chunk:
                    return False
                received += chunk
            return received == b"\x20\x02\x00\x00"
    except OSError:
        return False


def health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None


# ------------------------------------------------------------------------- the open files limit


def test_the_node_raises_its_soft_open_files_limit_to_the_hard_one(limited: Callable[..., LimitedBroker]) -> None:
    broker = limited(256, 4096)
    assert broker.open_files_limit() == (4096, 4096)
    wait_until(lambda: "open files limit raised" in broker.log_tail(200), 10, what="the log line")
    line = next(x for x in broker.log_tail(200).splitlines() if "open files limit raised" in x)
    assert "256" in line and "4096" in line


# ------------------------------------------------------------------------- the reserve for the admin API


def test_idle_mqtt_sockets_at_the_limit_leave_health_and_vmq_admin_answering(
        limited: Callable[..., LimitedBroker]) -> None:
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    broker = limited(256, 256, **{"listener.http.default": f"127.0.0.1:{http_port}", "mqtt.connect_timeout": "120s",
                                  "listener.max_connections_per_address": "infinity",
                                  "listener.max_pending_per_address": "infinity"})
    wait_until(lambda: health(url) == 200, 15, what="admin API")
    with sockets_from(ADDRESS_A) as idle:
        for _ in range(300):  # more than the node's 256 descriptors
            try:
                idle.append(connect_from(ADDRESS_A, broker.port))
            except OSError:
                break
        # the node holds what its budget allows and closes the rest at once
        wait_until(lambda: sum(closed_by_peer(s) for s in idle) >= len(idle) - 256 + 64, 20,
                   what="idle sockets over the budget closed")
        assert broker.descriptors() < 256 - 64  # the admin API's reserve and the spare stay free
        assert health(url) == 200
        shown = admin(url, broker.data_dir, "listener", "show")
        assert shown.returncode == 0, shown.stderr
        assert not mqtt_connects_from(ADDRESS_B, broker.port, "refused-at-the-budget")
    # once the idle sockets are gone, a well-behaved client is served again
    wait_until(lambda: mqtt_connects_from(ADDRESS_B, broker.port, "served-again"), 20, what="a client served again")
    assert "connections refused: the MQTT listeners hold every descriptor" in broker.log_tail(400)
