"""The `owner-loss` chaos experiment, short (issue 18): 3 real nodes with queue replicas (R = 2), the node holding
the most persistent sessions killed with `kill -9` and its data directory deleted under a QoS 1 publish load,
removed with `vmq-admin cluster leave -k` on a survivor, an empty node joining in its place at the end; every
persistent subscriber drains. The queue checker must find every acknowledged message delivered
(docs/chaos.md, "Owner loss")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CHAOS_BASE, REPO

pytestmark = pytest.mark.integration

DURATION_S = 20  # the loss at 7 s, the removal at 19 s: about 40 s in all


def test_owner_loss_with_two_replicas_loses_no_acknowledged_message(tmp_path: Path) -> None:
    out = tmp_path / "owner-loss"
    command = [sys.executable, "-m", "chaos", "run", "owner-loss", "--seed", "1", "--duration", str(DURATION_S),
               "--mode", "stop-serving", "--base-address", CHAOS_BASE, "--out", str(out)]
    done = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    console = f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stderr[-4000:]}"
    assert (out / "verdict.json").exists(), console
    verdict: dict[str, Any] = json.loads((out / "verdict.json").read_text())
    queues = verdict["checks"]["queues"]
    steps: Counter[str] = Counter()
    for line in (out / "history.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["f"] == "nemesis" and event["type"] == "info":
            steps[str(event["value"]["step"]).split(" ")[0]] += 1
    assert steps["lost"] == 1 and steps["removed"] == 1 and steps["rejoined"] == 1, (steps, console)
    assert verdict["errors"] == [], (verdict["errors"], console)
    assert queues["figures"]["acknowledged"] > 0 and queues["figures"]["drains"] > 3, (queues, console)
    assert queues["figures"]["lost"] == 0, (queues["problems"], console)
    assert queues["figures"]["unexpected"] == 0, (queues["problems"], console)
    assert verdict["valid"] is True, (verdict["failed"], console)
    assert done.returncode == 0, console
