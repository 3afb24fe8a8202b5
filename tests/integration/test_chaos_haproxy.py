"""The chaos experiment `rolling-restart`, short: three real nodes behind the real HAProxy (the shipped
configuration), a steady load of persistent QoS 1 subscribers and publishers and the registration workload, all
through HAProxy; every node drained, stopped, started and rejoined once, one at a time. The verdict of the real
`python -m chaos` process must be valid: no acknowledged message lost, no duplicate live session left, every
subscriber connected again; and the history must show the three restarts and the clients' outages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.haproxy import HAPROXY

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not HAPROXY.exists(), reason="HAProxy is not installed (scripts/debian-deps.sh)"),
]

REPO = Path(__file__).resolve().parents[2]
#: Node addresses: away from the cluster tests' 127.0.0.11+ and the short partition's 127.0.0.21+; HAProxy on the
#: address after the last node.
BASE = "127.0.0.31"


@pytest.fixture(scope="module")
def rolling_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("chaos") / "rolling-restart"
    command = [sys.executable, "-m", "chaos", "run", "rolling-restart", "--seed", "3", "--duration", "24",
               "--quiet", "2", "--base-address", BASE, "--out", str(out)]
    done = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out.mkdir(parents=True, exist_ok=True)
    (out / "console.txt").write_text(f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stdout}{done.stderr}")
    if not (out / "verdict.json").exists():
        pytest.fail(f"the rolling restart left no verdict (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return out


def test_rolling_restart_through_haproxy_is_valid(rolling_run: Path) -> None:
    verdict: dict[str, Any] = json.loads((rolling_run / "verdict.json").read_text())
    console = (rolling_run / "console.txt").read_text()[-3000:]
    checks = verdict["checks"]
    assert verdict["via"] == "haproxy"
    for name in ("queues", "registration", "outages"):
        assert checks[name]["safe"] is True, (name, checks[name]["summary"], checks[name]["problems"], console)
    queues = checks["queues"]["figures"]
    assert queues["acknowledged"] > 0 and queues["lost"] == 0 and queues["unexpected"] == 0, queues
    registration = checks["registration"]["figures"]
    assert registration["accepted"] > 0 and registration["unresolved"] == 0, registration
    outages = checks["outages"]["figures"]
    assert outages["clients"] > 0 and outages["never_back"] == [], outages
    assert outages["outages"] > 0, "the drains told no client to go: nothing was measured"
    assert set(outages["outage_s"]) == {"p50", "p99", "max"}
    assert verdict["valid"] is True and verdict["errors"] == [], (verdict["failed"], verdict["errors"], console)


def test_every_node_was_restarted_once_and_clients_went_through_haproxy_only(rolling_run: Path) -> None:
    rolled: list[str] = []
    client_nodes: set[str] = set()
    for line in (rolling_run / "history.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["f"] == "nemesis" and event["type"] == "ok":
            rolled.append(event["value"]["step"])
        elif event["process"].startswith(("steady-", "reg")) and event["f"] in ("connect", "publish"):
            client_nodes.add(event["node"])
    assert sorted(rolled) == ["roll n1@127.0.0.31", "roll n2@127.0.0.32", "roll n3@127.0.0.33"], rolled
    assert client_nodes == {"haproxy"}, client_nodes
    assert (rolling_run / "haproxy.log").exists()
    for node in ("n1", "n2", "n3"):
        assert "balanced" in (rolling_run / node / "vmqpy.conf").read_text()
