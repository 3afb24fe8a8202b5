"""`vmq-admin listener show|stop|start|restart` and `/health/listeners` against a real node (docs/admin.md):
a stopped listener refuses new connections and keeps its live ones, `--kill_sessions` closes them (5.0:
DISCONNECT 0x98), `start` listens again on the same port."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.integration.admin_api import admin, node
from tests.integration.clients import DISCONNECT, RawClient, unique

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's vmq-admin listener commands")]
__all__ = ["node"]  # the fixture: one real node with its admin API

ADMINISTRATIVE_ACTION = 0x98


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def health(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url + "/health/listeners", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_a_stopped_listener_refuses_new_clients_and_starts_again(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    port = broker.port
    live = RawClient(port, version=5)
    live.connect(unique("live-"))
    [row] = json.loads(admin(url, broker.data_dir, "listener", "show", "--json").stdout)
    assert (row["type"], row["status"], row["ip"], row["port"], row["name"]) == (
        "mqtt", "running", "127.0.0.1", port, "default")
    assert row["active_conns"] >= 1
    assert health(url) == (200, {"status": "ok", "listeners": 1})

    stopped = admin(url, broker.data_dir, "listener", "stop", "address=127.0.0.1", f"port={port}")
    assert stopped.returncode == 0, stopped.stderr
    assert refused(port), "a stopped listener refuses new connections"
    topic = unique("listener/t/")
    live.subscribe(topic, qos=1)  # the live connection is not touched
    code, body = health(url)
    assert code == 503 and "default (127.0.0.1:" in body["reason"]
    [row] = json.loads(admin(url, broker.data_dir, "listener", "show", "--json").stdout)
    assert row["status"] == "stopped"

    started = admin(url, broker.data_dir, "listener", "restart", "address=127.0.0.1", f"port={port}")
    assert started.returncode == 0, started.stderr
    again = RawClient(port)
    again.connect(unique("again-"))
    again.publish(topic, b"after restart", qos=1)
    assert live.recv_publishes(1)[0].payload == b"after restart"
    assert health(url)[0] == 200

    killed = admin(url, broker.data_dir, "listener", "stop", "address=127.0.0.1", f"port={port}", "--kill_sessions")
    assert killed.returncode == 0, killed.stderr
    assert "connections closed" in killed.stdout
    closing = live.wait_closed(5)
    assert [(p.type, p.reason_code) for p in closing][-1:] == [(DISCONNECT, ADMINISTRATIVE_ACTION)], closing
    assert admin(url, broker.data_dir, "listener", "start", "address=127.0.0.1", f"port={port}").returncode == 0


def test_unknown_listeners_and_new_ones_are_refused(node) -> None:  # type: ignore[no-untyped-def]
    broker, url = node
    missing = admin(url, broker.data_dir, "listener", "stop", "address=127.0.0.1", "port=1")
    assert missing.returncode == 1 and "no MQTT listener at 127.0.0.1:1" in missing.stderr
    new = admin(url, broker.data_dir, "listener", "start", "address=127.0.0.1", f"port={broker.port}", "--websocket")
    assert new.returncode == 1 and "starts only the listeners of its configuration" in new.stderr
