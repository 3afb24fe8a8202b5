"""The node's log at a sensible volume (docs/operations.md, "Logs"), read from its log file (`log.console = file`):

- requests that only read (a status page polling `/status.json`, Prometheus scraping `/metrics`, health checks,
  `show` commands) write no info line; they are there at debug; a command that changes something (POST) and a
  refused request are info lines (the audit trail);
- `log.connections = off` leaves out the `client connected` / `client disconnected` lines and nothing else, and
  `vmq-admin set log.connections=on` brings them back at once.
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_api import admin
from tests.integration.conftest import free_port, unique, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("the vmqpy admin API and log file")]

class LoggingNode:
    """A real node writing its log to a file, with the URL of its admin API and its bootstrap key."""

    def __init__(self, broker: Any, url: str) -> None:
        self.broker = broker
        self.url = url
        self.log_file: Path = broker.data_dir / "console.log"  # log.file's default
        self.key = (broker.data_dir / "api.key").read_text().strip()

    def get(self, path: str, key: str | None = None) -> int:
        """GET `path` with the node's key (or `key`); the answer's status."""
        request = urllib.request.Request(self.url + path, headers={"x-api-key": key or self.key})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                answer.read()
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return admin(self.url, self.broker.data_dir, *args)

    def lines(self, level: str, event: str) -> list[str]:
        """The log file's lines at `level` whose event is `event`."""
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        return [line for line in text.splitlines() if f"[{level}" in line and f"] {event} " in line]


def start_node(broker_factory: Any, **extra: str) -> LoggingNode:
    http_port = free_port()
    broker = broker_factory(**{"listener.http.default": f"127.0.0.1:{http_port}", "log.console": "file", **extra})
    node = LoggingNode(broker, f"http://127.0.0.1:{http_port}")
    wait_until(lambda: node.get("/health") == 200, 15, what="the admin API")
    wait_until(lambda: node.lines("info", "node started"), 15, what="'node started' in the log file")
    return node


def access_lines(node: LoggingNode, level: str, method: str, path: str) -> list[str]:
    return [line for line in node.lines(level, "admin_request") if f"method={method}" in line
            and f"path={path} " in line + " "]


READS = ("/status", "/status.json", "/metrics", "/health", "/health/ping", "/api/v1/cluster/show")


def test_an_idle_node_watched_by_a_status_page_and_prometheus_writes_no_info_access_line(broker_factory) -> None:  # type: ignore[no-untyped-def]
    node = start_node(broker_factory)
    assert node.get("/status") == 200  # the page, then its poll loop (status.html fetches /status.json)
    for _ in range(20):
        assert node.get("/status.json") == 200
    for _ in range(5):
        assert node.get("/metrics") == 200
        assert node.get("/health") == 200
    assert node.get("/health/ping") == 200 and node.get("/api/v1/cluster/show") == 200
    # a command that changes something and a refused request are the audit trail: info
    changed = node.admin("set", "log.connections=on")
    assert changed.returncode == 0, changed.stderr
    assert node.get("/status.json", key="not-a-key") == 401
    wait_until(lambda: access_lines(node, "info", "GET", "/status.json"), 10, what="the refused poll at info")
    assert access_lines(node, "info", "POST", "/api/v1/set"), node.lines("info", "admin_request")
    refused = access_lines(node, "info", "GET", "/status.json")
    assert len(refused) == 1 and "status=401" in refused[0], refused
    info_reads = [line for line in node.lines("info", "admin_request") if "method=GET" in line and "status=200" in line]
    assert info_reads == [], info_reads
    # nothing else speaks at info on an idle node after its start: the access lines were the whole log
    text = node.log_file.read_text()
    after_start = text.split("node started", 1)[1].splitlines()[1:]
    noise = [line for line in after_start if "[info" in line and "admin_request" not in line
             and "setting changed" not in line]
    assert noise == [], noise

    # the reads are still there at debug, for whoever asks for them
    assert node.admin("log", "level", "level=debug").returncode == 0
    for path in READS:
        assert node.get(path) == 200, path
    for path in READS:
        wait_until(lambda path=path: access_lines(node, "debug", "GET", path), 10, what=f"a debug line for {path}")


def connection_lines(node: LoggingNode, client_id: str) -> list[str]:
    return [line for event in ("client connected", "client disconnected")
            for line in node.lines("info", event) if f"client_id={client_id} " in line + " "]


def test_log_connections_off_leaves_out_the_connection_lines_and_nothing_else(broker_factory, clients) -> None:  # type: ignore[no-untyped-def]
    node = start_node(broker_factory, **{"log.connections": "off"})
    quiet = unique("quiet")
    clients.paho(node.broker, 5, client_id=quiet).client.disconnect()
    # another per-client line stays: a second connect of a client id takes the first one's session over
    taken = unique("taken")
    clients.paho(node.broker, 5, client_id=taken)
    clients.paho(node.broker, 5, client_id=taken)
    wait_until(lambda: [line for line in node.lines("info", "session taken over") if taken in line], 10,
               what="the takeover line")
    assert connection_lines(node, quiet) == [] and connection_lines(node, taken) == []

    answer = node.admin("set", "log.connections=on")
    assert answer.returncode == 0 and "on" in answer.stdout, answer.stderr
    loud = unique("loud")
    clients.paho(node.broker, 4, client_id=loud).client.disconnect()
    wait_until(lambda: len(connection_lines(node, loud)) == 2, 10, what="both connection lines of the client")
    assert connection_lines(node, quiet) == []
    shown = node.admin("show", "log.connections")
    assert shown.returncode == 0 and "on" in shown.stdout, shown.stdout + shown.stderr
