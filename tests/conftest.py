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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The tests' helper modules (fakes, clusters, clients, checkers) assert too: their failures get pytest's messages.
pytest.register_assert_rewrite("tests.unit", "tests.sim", "tests.integration", "tests.spark")

from chaos import ports  # noqa: E402  (after the registration: helpers imported from here on are rewritten)
from tests import lanes, randomness  # noqa: E402

randomness.load()

REPO = Path(__file__).resolve().parents[1]
#: Node addresses of the experiment: away from the 127.0.0.11+ range of the cluster tests (override with
#: VMQPY_CHAOS_BASE, e.g. when two suites share a machine).
CHAOS_BASE = os.environ.get("VMQPY_CHAOS_BASE", "127.0.0.21")
CHAOS_SEED = 7


def pytest_report_header(config: pytest.Config) -> str:
    return f"vmqpy test profile: {randomness.PROFILE} (TEST_PROFILE; tests/randomness.py)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "serial: measures latency or CPU; runs alone, after the parallel pass (tests/lanes.py)")
    worker = lanes.Worker.current()
    if worker.parallel:
        ports.use_slice(worker.index, worker.count)  # no two workers hand out one port


TESTS = Path(__file__).resolve().parent
LANED = (TESTS / "integration", TESTS / "spark")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`serial` for the integration modules that measure (tests/lanes.py), before `-m` deselects."""
    for item in items:
        if item.path.stem in lanes.SERIAL and any(folder in item.path.parents for folder in LANED):
            item.add_marker(pytest.mark.serial)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` with the lanes' groups as scopes (tests/lanes.py); the other modes are xdist's own."""
    if config.getvalue("dist") == "loadscope":
        return lanes.LaneScheduling(config, log)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed property says how to replay it (under the profile it ran with)."""
    outcome: Any = yield
    report = outcome.get_result()
    if report.failed and call.when == "call" and getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        report.sections.append(("how to replay", randomness.replay_hint()))


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
