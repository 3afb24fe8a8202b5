"""The real `vmq-admin` against one node's admin API, a node started with that API, and what the tests of a
single node ask it (its metrics, its sessions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from chaos import zygote
from tests.integration.conftest import Broker, free_port, wait_until

VMQ_ADMIN = [sys.executable, "-m", "admin.cli.main"]


def admin(url: str, data_dir: Path, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    """`vmq-admin ARGS` against the node at `url` (its key read from `data_dir`, or `key`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMQ")}
    env["VMQ_ADMIN_URL"] = url
    env["VMQ_DATA_DIR"] = str(data_dir)
    if key is not None:
        env["VMQ_API_KEY"] = key
    return zygote.run([*VMQ_ADMIN, *args], capture_output=True, text=True, timeout=30, env=env)


@pytest.fixture
def node(broker_factory):  # type: ignore[no-untyped-def]
    """A node with its admin API: (broker, the API's URL)."""
    http_port = free_port()
    broker = broker_factory(**{"listener.http.default": f"127.0.0.1:{http_port}"})
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    return broker, url


def sessions(broker: Broker, url: str) -> dict[str, dict[str, Any]]:
    """`vmq-admin session show`: client id -> its row (client id, peer host, peer port)."""
    out = admin(url, broker.data_dir, "session", "show", "--client_id", "--peer_host", "--peer_port", "--json")
    assert out.returncode == 0, out.stderr
    return {row["client_id"]: row for row in json.loads(out.stdout)}


def metrics(url: str, data_dir: Path) -> dict[str, Any]:
    """`vmq-admin metrics show`: metric name -> value."""
    answer = admin(url, data_dir, "metrics", "show", "--json")
    assert answer.returncode == 0, answer.stderr
    rows = json.loads(answer.stdout)
    return {r["Metric"]: r["Value"] for r in rows} if isinstance(rows, list) else dict(rows)


def metric(broker: Broker, url: str, name: str) -> int:
    """One metric of `vmq-admin metrics show` (0 when the node does not list it)."""
    return int(metrics(url, broker.data_dir).get(name, 0))
