"""Fixtures shared by every test directory.

`short_chaos_run`: one short chaos experiment (one partition and heal on 3 real nodes, every workload), run once
per test session as a real `python -m chaos` process; the fixture returns its --out directory (history.jsonl,
nN/replication.log, nN/node.log, views.json, verdict.json). The chaos test asserts on its verdict and the Spark
end-to-end test reads the same logs, so the experiment runs once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The machine the suite runs on is shared and noisy: a property's examples are counted, never timed.
settings.register_profile("shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("shared-machine")

REPO = Path(__file__).resolve().parents[1]
#: Node addresses of the experiment: away from the 127.0.0.11+ range of the cluster tests (override with
#: VMQPY_CHAOS_BASE, e.g. when two suites share a machine).
CHAOS_BASE = os.environ.get("VMQPY_CHAOS_BASE", "127.0.0.21")
CHAOS_SEED = 7


@pytest.fixture(scope="session")
def short_chaos_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chaos import iptables

    why = iptables.available()
    if why is not None:
        pytest.skip(f"the short chaos experiment partitions nodes with iptables: {why}")
    out = tmp_path_factory.mktemp("chaos") / "short-partition"
    command = [sys.executable, "-m", "chaos", "run", "short-partition", "--nodes", "3", "--seed", str(CHAOS_SEED),
               "--mode", "stop-serving", "--backend", "iptables", "--base-address", CHAOS_BASE, "--out", str(out)]
    done = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out.mkdir(parents=True, exist_ok=True)
    (out / "console.txt").write_text(f"$ {' '.join(command)}\nexit {done.returncode}\n{done.stdout}{done.stderr}")
    if not (out / "verdict.json").exists():
        pytest.fail(f"the chaos run left no verdict (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return out
