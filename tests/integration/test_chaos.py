"""One short chaos experiment end to end: 3 real nodes, one random-halves partition and heal with iptables,
every workload, every checker; the verdict, the history and the logs it leaves."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from chaos.iptables import CHAIN

pytestmark = pytest.mark.integration


def _verdict(run: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run / "verdict.json").read_text())
    return data


def test_short_experiment_is_valid_and_every_check_held(short_chaos_run: Path) -> None:
    verdict = _verdict(short_chaos_run)
    console = (short_chaos_run / "console.txt").read_text()
    checks = verdict["checks"]
    assert isinstance(checks, dict)
    assert set(checks) == {"subscriptions", "retained", "queues", "registration", "convergence"}
    for name, check in checks.items():
        assert check["safe"] is True, (name, check["summary"], check["problems"], console[-3000:])
    queues = checks["queues"]["figures"]
    assert queues["acknowledged"] > 0 and queues["lost"] == 0 and queues["unexpected"] == 0
    assert checks["subscriptions"]["figures"]["acknowledged"] > 0
    assert checks["retained"]["figures"]["acknowledged"] > 0
    assert checks["convergence"]["figures"]["keys"] > 0
    assert verdict["valid"] is True and verdict["errors"] == [], verdict["errors"]
    assert "short-partition" in console and "verdict: valid" in console


def test_history_has_every_workload_and_the_partition(short_chaos_run: Path) -> None:
    kinds: Counter[tuple[str, str]] = Counter()
    steps = []
    for line in (short_chaos_run / "history.jsonl").read_text().splitlines():
        event = json.loads(line)
        assert set(event) == {"type", "process", "f", "value", "node", "time"}
        kinds[(event["f"], event["type"])] += 1
        if event["f"] == "nemesis" and event["type"] == "ok":
            steps.append(event["value"]["step"])
    for f in ("subscribe", "unsubscribe", "publish", "connect"):
        assert kinds[(f, "ok")] > 0, f
    assert kinds[("read", "ok")] == 3
    assert kinds[("drain", "ok")] == 3
    assert steps[0].startswith("halves:") and steps[-1] == "heal"
    # stop-serving: during the partition the nodes refuse (each refusal is a recorded failure)
    assert kinds[("connect", "fail")] + kinds[("publish", "fail")] + kinds[("subscribe", "fail")] > 0


def test_logs_views_and_cleanup(short_chaos_run: Path) -> None:
    for node in ("n1", "n2", "n3"):
        assert (short_chaos_run / node / "replication.log").stat().st_size > 0
        assert (short_chaos_run / node / "node.log").exists()
    views = json.loads((short_chaos_run / "views.json").read_text())
    assert {"after_join", "after_heal", "end"} <= set(views)
    verdict = _verdict(short_chaos_run)
    pids = verdict["pids"]
    assert isinstance(pids, dict)
    for node_pids in pids.values():
        for pid in node_pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, timeout=20).stdout
    assert CHAIN not in rules
