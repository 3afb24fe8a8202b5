"""The report on the logs of a real short chaos run (`short_chaos_run`, tests/conftest.py: one partition and heal
on three real nodes, every workload): `python -m spark_analytics report` as a real process, its summary held
against what the run itself recorded (run.json, verdict.json)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import TEST_CONF

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHECKS = ("lost", "unexpected", "duplicated", "resurrected")
NS = 1_000_000_000
# A heal is seen in the cluster views once the links are back up and a heartbeat went through: seconds after the
# harness removed the rules (cluster.detect_timeout and the reconnect back-off, docs/cluster.md).
HEAL_SEEN_WITHIN_S = 15


@pytest.fixture(scope="module")
def chaos_report(short_chaos_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run = short_chaos_run
    out = tmp_path_factory.mktemp("chaos-report")
    # the settings of the tests' own session (conftest.TEST_CONF): a short run on small data
    settings = [arg for key, value in TEST_CONF.items() for arg in ("--conf", f"{key}={value}")]
    command = [sys.executable, "-m", "spark_analytics", "report", "--logs", str(run),
               "--history", str(run / "history.jsonl"), "--out", str(out), "--master", "local[2]", *settings]
    done = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "safety: lost" in done.stdout
    return {
        "dir": run,
        "out": out,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "summary": json.loads((out / "summary.json").read_text()),
        "run": json.loads((run / "run.json").read_text()),
        "verdict": json.loads((run / "verdict.json").read_text()),
    }


def test_run_metadata_is_the_chaos_run(chaos_report: dict[str, Any]) -> None:
    run, summary = chaos_report["run"], chaos_report["summary"]["run"]
    assert summary["nodes"] == sorted(run["nodes"])
    assert (summary["mode"], summary["seed"]) == (run["mode"], run["seed"])
    assert {Path(f).relative_to(summary["logs"]).as_posix() for f in summary["files"]} == {
        f"{name.split('@')[0]}/replication.log" for name in run["nodes"]
    }
    # the nodes write only well-formed lines, and every apply names a write of the logs
    assert summary["malformed_lines"] == 0
    assert summary["applies_without_write"] == 0
    assert summary["events_by_type"]["md_write"] > 0 and summary["events_by_type"]["md_apply"] > 0
    assert summary["events_by_type"]["cluster_view"] > 0 and summary["events_by_type"]["md_exchange"] > 0
    verdict = chaos_report["verdict"]  # the logs lie within the run (seconds of the harness's clock)
    assert (verdict["started"] - 5) * NS <= summary["first_ts"] <= summary["last_ts"] <= (verdict["ended"] + 5) * NS


def _split_views(run: Path) -> list[int]:
    """The `ts` of every cluster_view line with more than one group, read without Spark."""
    found = []
    for log in run.glob("*/replication.log"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "cluster_view" and len(event.get("groups", [])) > 1:
                found.append(int(event["ts"]))
    return found


def test_convergence_found_the_heal(chaos_report: dict[str, Any]) -> None:
    conv = chaos_report["summary"]["convergence"]
    verdict = chaos_report["verdict"]
    fault, healed_at = verdict["faults_ns"][0], verdict["heals_ns"][-1]
    window = (fault, healed_at + HEAL_SEEN_WITHIN_S * NS)
    # the nemesis's heal is seen in the views shortly after the harness made it
    healed = [h for h in conv["heals"] if 0 <= h["heal_ts"] - healed_at <= HEAL_SEEN_WITHIN_S * NS]
    if not any(window[0] <= ts <= window[1] for ts in _split_views(chaos_report["dir"])):
        # The nodes never saw the partition (e.g. the rules of another run on the same machine removed ours):
        # nothing to find, and the report must not invent it.
        assert healed == [], conv["heals"]
    else:
        assert len(healed) == 1, (conv["heals"], verdict["heals_ns"])
        heal = healed[0]
        assert heal["start_ts"] < healed_at
        assert heal["keys"] > 0 and heal["divergent_at_heal"] > 0  # the workloads wrote on both sides
        assert heal["unconverged"] == 0 and heal["seconds_to_converge"] is not None
    # A partition still open at the end of the logs is the stop of the nodes at the end of the run (each sees the
    # others go), after the quiet period.
    for p in conv["partitions"]:
        assert p["end_ts"] is not None or p["start_ts"] > healed_at + 5 * NS, p
    # the run ends after a quiet period: every key converged, and the timeline says so
    assert conv["keys_divergent_at_end"] == 0
    assert conv["writes_never_converged"] == 0
    assert conv["timeline"]["divergent_keys"][-1] == 0
    lag = chaos_report["summary"]["visibility"]["lag"]
    assert lag["all"]["visible_fraction"] == 1.0


def test_safety_counts_agree_with_the_verdict(chaos_report: dict[str, Any]) -> None:
    safety = chaos_report["summary"]["safety"]
    checks = chaos_report["verdict"]["checks"]
    assert safety["checked"] and safety["malformed_history_lines"] == 0
    assert safety["deliveries_checked"] and safety["final_read_checked"]
    for c in CHECKS:
        assert safety[c] == sum(safety["details"][c].values())
    details = {c: safety["details"][c] for c in CHECKS}
    queues = checks["queues"]["figures"]
    # The same measure: acknowledged QoS 1 publishes (msg, expected client) never drained.
    assert details["lost"].get("publish", 0) == queues["lost"]
    # The verdict counts extra receptions, the report (client, message) pairs received more than once.
    assert details["duplicated"].get("delivery", 0) <= queues["duplicates"]
    assert (details["duplicated"].get("delivery", 0) == 0) == (queues["duplicates"] == 0)
    if queues["unexpected"] == 0:
        assert details["unexpected"].get("message", 0) == 0
    # The verdict reads every node, the report the last read: where the verdict found nothing, neither may it.
    subs = checks["subscriptions"]["figures"]
    for ours, theirs in (("lost", "lost"), ("unexpected", "unexpected"), ("resurrected", "resurrected")):
        if subs[theirs] == 0:
            assert details[ours].get("subscription", 0) == 0, (ours, safety["examples"][ours])
    retained = checks["retained"]["figures"]
    if retained["lost"] + retained["stale"] == 0:
        assert details["lost"].get("retained", 0) == 0, safety["examples"]["lost"]
    if retained["unexpected"] == 0:
        assert details["unexpected"].get("retained", 0) == 0, safety["examples"]["unexpected"]
    if retained["clear_undone"] == 0:
        assert details["resurrected"].get("retained", 0) == 0, safety["examples"]["resurrected"]


def test_report_html_is_one_self_contained_page(chaos_report: dict[str, Any]) -> None:
    page = (chaos_report["out"] / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 2  # the PBS curves and the divergent-keys timeline
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"(src|href)=", page)
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    safety = chaos_report["summary"]["safety"]
    for c in CHECKS:
        box = "ok" if safety[c] == 0 else "bad"
        assert f'<div class="box {box}" id="safety-{c}"><div class="n">{safety[c]}</div>' in page


def test_the_command_is_quiet_and_keeps_sparks_log_next_to_the_report(chaos_report: dict[str, Any]) -> None:
    """Issue 17: a person reads the progress line and the result, not Spark's stage bars and JVM warnings."""
    out, stderr = chaos_report["out"], chaos_report["stderr"]
    assert "report 9/9: writing" in stderr  # the progress line reached its last stage
    for noise in ("WARN", "Stage ", "log4j", "WARNING", "NativeCodeLoader"):
        assert noise not in stderr and noise not in chaos_report["stdout"], noise
    log = out / "spark.log"
    assert f"Spark's log: {log}" in chaos_report["stdout"]
    assert log.is_file() and log.stat().st_size > 0  # what Spark said went there


def test_partition_windows_match_the_nemesis_record(chaos_report: dict[str, Any]) -> None:
    """Issue 17: the report counts the partition windows that happened: as many as the nemesis's own record (the
    history's nemesis lines, and the run's verdict), each seen in the views after the fault and healed after it."""
    summary, verdict = chaos_report["summary"], chaos_report["verdict"]
    faults, conv = summary["faults"], summary["convergence"]
    assert faults["recorded"]
    windows = faults["windows"]
    assert len(windows) == len(verdict["faults_ns"]) == 1
    window = windows[0]
    assert abs(window["start_ts"] - verdict["faults_ns"][0]) < NS  # the invoke line, just before the fault
    assert window["end_ts"] is not None and abs(window["end_ts"] - verdict["heals_ns"][0]) < NS
    for dropped in conv["partitions_not_counted"]:
        assert dropped["reason"], dropped
    seen = any(window["start_ts"] <= t <= window["end_ts"] + HEAL_SEEN_WITHIN_S * NS
               for t in _split_views(chaos_report["dir"]))
    if not seen:  # the nodes never saw the partition (see test_convergence_found_the_heal)
        assert conv["partitions"] == [], conv["partitions"]
        return
    assert len(conv["partitions"]) == len(windows), (conv["partitions"], conv["partitions_not_counted"], windows)
    partition = conv["partitions"][0]
    # the views see the fault a detection time late, and the heal late too
    assert window["start_ts"] <= partition["start_ts"] <= window["end_ts"]
    assert partition["end_ts"] is not None and partition["end_ts"] >= window["end_ts"]
    assert [h["window"] for h in faults["heals"]] == [1]
    assert faults["heals"][0]["unconverged"] == 0
    page = (chaos_report["out"] / "report.html").read_text()
    assert "The nemesis recorded 1 fault window(s); the views show 1 partition(s), the same number" in page
