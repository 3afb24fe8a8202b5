"""The command end to end on a generated three-node run with one partition, and its input errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analytics import cli
from spark_analytics.readers import InputError
from spark_analytics.report import analyze
from tests.spark.logs import T0_MS, ts, view, write_logs
from tests.spark.runs import ALL, clean_history, generated_run


@pytest.fixture(scope="module")
def report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("run")
    logs = write_logs(base / "logs", generated_run())
    (logs / "run.json").write_text(json.dumps({"mode": "partition", "seed": 42}))
    out = base / "out"
    args = cli.parser().parse_args(["report", "--logs", str(logs), "--history", str(clean_history(base / "h.jsonl")),
                                    "--out", str(out), "--parquet"])
    cli.run(args, spark)
    return out, json.loads((out / "summary.json").read_text())


def test_run_metadata(report: tuple[Path, dict[str, Any]]) -> None:
    run = report[1]["run"]
    assert run["nodes"] == ["n1", "n2", "n3"]
    assert (run["first_ts"], run["last_ts"]) == (T0_MS * 1_000_000, (T0_MS + 7000) * 1_000_000)
    assert run["events_by_type"] == {"cluster_view": 9, "md_apply": 93, "md_exchange": 24, "md_gc": 3,
                                     "md_write": 50, "queue_replicas": 3}
    assert run["events"] == 182
    assert run["malformed_lines"] == 3
    assert run["applies_without_write"] == 0
    assert (run["mode"], run["seed"]) == ("partition", 42)


def test_visibility_figures(report: tuple[Path, dict[str, Any]]) -> None:
    vis = report[1]["visibility"]
    assert vis["writes_by_phase"] == {"after_heal": 10, "normal": 29, "partition": 11}
    lag = vis["lag"]
    assert {p: (v["pairs"], v["visible_fraction"], v["p50_ms"], v["max_ms"]) for p, v in lag.items()} == {
        "normal": (58, 1.0, 4.0, 12.0),
        "after_heal": (20, 1.0, 4.0, 12.0),
        # n2 gets n1's 10 writes after 4 ms, n3 at 5.2 s (2100 ms down to 300 ms), q reaches n1/n2 after 1.8/1.9 s
        "partition": (22, 1.0, 300.0, 2100.0),
        "all": (100, 1.0, 12.0, 2100.0),  # 49 pairs at 4 ms, 39 at 12 ms, 12 slower
    }
    deltas = vis["deltas_ms"]
    normal = dict(zip(deltas, vis["pbs"]["normal"]["fractions"], strict=True))
    assert (normal[0], normal[5], normal[10], normal[20]) == (0.0, 0.5, 0.5, 1.0)  # 4 and 12 ms
    partition = dict(zip(deltas, vis["pbs"]["partition"]["fractions"], strict=True))
    assert (partition[5], partition[1000], partition[2000], partition[5000]) == pytest.approx(
        (10 / 22, 14 / 22, 21 / 22, 1.0), abs=1e-6)


def test_convergence_figures(report: tuple[Path, dict[str, Any]]) -> None:
    conv = report[1]["convergence"]
    assert [(p["start_ts"], p["end_ts"]) for p in conv["partitions"]] == [
        ((T0_MS + 3000) * 1_000_000, (T0_MS + 5002) * 1_000_000)
    ]
    heal = conv["heals"][0]
    # keys written before the heal: k0-k3, p0-p2, q; p0-p2 and q were divergent; q converged last, at 5.4 s
    assert (heal["keys"], heal["divergent_at_heal"], heal["unconverged"], heal["seconds_to_converge"]) == (
        8, 4, 0, 0.398)
    assert conv["timeline"] == {"start_s": T0_MS // 1000, "step_s": 1, "divergent_keys": [0, 0, 0, 0, 4, 4, 0, 0]}
    assert (conv["writes_never_converged"], conv["keys_divergent_at_end"], conv["max_divergent_keys"]) == (0, 0, 4)


def test_other_figures(report: tuple[Path, dict[str, Any]]) -> None:
    s = report[1]
    assert s["staleness"]["histogram"] == {"0": 93}
    assert (s["siblings"]["keys_with_siblings"], s["siblings"]["episodes"], s["siblings"]["unresolved"]) == (1, 1, 1)
    ae = s["anti_entropy"]
    assert ae["results"] == {"ok": 24}
    assert (ae["by_node"]["all"]["exchanges"], ae["by_node"]["all"]["repaired"]) == (24, 5)
    assert ae["by_node"]["n1"]["per_minute"] == pytest.approx(8 / (7 / 60))
    assert ae["gc"]["n2"] == {"runs": 1, "dots_pruned": 5, "keys_deleted": 0}
    safety = s["safety"]
    assert (safety["lost"], safety["unexpected"], safety["duplicated"], safety["resurrected"]) == (0, 0, 1, 0)
    assert safety["examples"]["duplicated"] == [{"what": "delivery", "client": "c1", "msg": "m2", "times": 2}]


def test_under_replication_windows(report: tuple[Path, dict[str, Any]]) -> None:
    q = report[1]["queue_replicas"]
    assert (q["recorded"], q["lines"], q["windows"], q["open_at_end"]) == (True, 3, 2, 1)
    assert q["by_node"] == {"n1": {"windows": 1, "total_s": 2.5, "longest_s": 2.5},
                            "n2": {"windows": 1, "total_s": 0.5, "longest_s": 0.5}}  # n2's log ends at 7 s
    assert (q["total_s"], q["longest_s"], q["peak_sessions"], q["peak_messages"], q["peak_writes"]) == (
        3.0, 2.5, 4, 40, 3)
    assert [(w["node"], w["end"]) for w in q["longest"]] == [("n1", "logged"), ("n2", "open")]
    page = (report[0] / "report.html").read_text()
    assert "<h2>Queue replicas: under-replication windows</h2>" in page


def test_report_html_and_parquet(spark: SparkSession, report: tuple[Path, dict[str, Any]]) -> None:
    out = report[0]
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 2
    assert page.count('class="series"') == 5  # 4 PBS curves (all, normal, partition, after_heal) + the timeline
    assert '<div class="box bad" id="safety-duplicated"><div class="n">1</div>' in page
    assert '<div class="box ok" id="safety-lost"><div class="n">0</div>' in page
    assert "<script" not in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert spark.read.parquet(str(out / "parquet" / "visibility")).count() == 100


def test_input_errors(spark: SparkSession, tmp_path: Path) -> None:
    assert cli.main(["report", "--logs", str(tmp_path / "missing")]) == 2
    assert cli.main(["report", "--logs", str(tmp_path)]) == 2  # no log file
    write_logs(tmp_path, ["garbage", "more garbage"])
    assert cli.main(["report", "--logs", str(tmp_path), "--history", str(tmp_path / "nope.jsonl")]) == 2
    with pytest.raises(InputError, match="no valid replication-log line"):
        analyze(spark, tmp_path)


def test_module_entry_reports_a_missing_directory(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "spark_analytics", "report", "--logs", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert f"error: --logs {tmp_path / 'none'}: no such directory" in done.stderr


# spark-submit runs job.py as a script with spark_analytics/ first on the path; the entry must still find the
# package, and our html module must not shadow the standard library's (the page could not be written).
SUBMIT_LIKE = """
import runpy, sys
sys.path.insert(0, "spark_analytics")
sys.argv = ["job.py", "report", "--logs", sys.argv[1]]
try:
    runpy.run_path("spark_analytics/JOB", run_name="__main__")
finally:
    import html
    print("html.escape" if hasattr(html, "escape") else "html shadowed")
"""


def test_spark_submit_entry_runs_as_a_script(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", SUBMIT_LIKE.replace("JOB", "job.py"), str(tmp_path / "none")],
                          cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"error: --logs {tmp_path / 'none'}: no such directory" in done.stderr
    assert done.stdout.strip() == "html.escape"


def test_join_blips_and_the_stop_are_not_partitions_and_the_fault_windows_are_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Issue 17: a 2 ms join blip and the views of the stop at the end are not partitions (and the writes after
    the blip are not after a heal); with the nemesis's record the phases also come from the real fault times."""
    lines = generated_run()
    lines += [view("n2", 100, [["n2"], ["n1", "n3"]]), view("n2", 102, ALL),  # n2's join blip
              view("n1", 7100, [["n1"], ["n2", "n3"]]), view("n2", 7900, [["n2", "n3"], ["n1"]])]  # the stop of n1
    logs = write_logs(tmp_path / "logs", lines)
    history = clean_history(tmp_path / "h.jsonl")
    nemesis = [("invoke", 2000, "halves: n1-x-n3, n2-x-n3"), ("ok", 2001, "halves: n1-x-n3, n2-x-n3"),
               ("invoke", 4500, "heal"), ("ok", 4502, "heal")]
    with history.open("a", encoding="utf-8") as f:
        for kind, at, step in nemesis:
            f.write(json.dumps({"type": kind, "process": "nemesis", "f": "nemesis", "value": {"step": step},
                                "node": "", "time": ts(at)}) + "\n")
    out = tmp_path / "out"
    args = cli.parser().parse_args(["report", "--logs", str(logs), "--history", str(history), "--out", str(out)])
    summary = cli.run(args, spark)
    conv = summary["convergence"]
    assert [(p["start_ts"], p["end_ts"]) for p in conv["partitions"]] == [(ts(3000), ts(5002))]
    reasons = [d["reason"] for d in conv["partitions_not_counted"]]
    assert len(reasons) == 2, reasons
    assert reasons[0].startswith("the join of") and "n2" in reasons[0]
    assert reasons[1].startswith("the stop of") and "n1" in reasons[1]
    assert summary["visibility"]["writes_by_phase"] == {"after_heal": 10, "normal": 29, "partition": 11}
    faults = summary["faults"]
    assert [(w["start_ts"], w["end_ts"]) for w in faults["windows"]] == [(ts(2000), ts(4500))]
    # by the fault times: 10 normal writes and 8 partition writes (7 of n1, q) from 2 s to 4.5 s, 13 after
    assert faults["writes_by_phase"] == {"after_heal": 13, "normal": 19, "partition": 18}
    assert [(h["window"], h["unconverged"]) for h in faults["heals"]] == [(1, 0)]
    page = (out / "report.html").read_text()
    assert 'id="fault-windows"' in page and "the join of" in page and "the stop of" in page
    assert "The nemesis recorded 1 fault window(s); the views show 1 partition(s), the same number" in page


def test_a_node_in_the_views_without_a_log_is_marked_missing(spark: SparkSession, tmp_path: Path) -> None:
    """Issue 17: a node whose log was not read (here: not there at all) is never silently left out."""
    lines = [line for line in generated_run() if not (isinstance(line, dict) and line.get("node") == "n3")]
    logs = write_logs(tmp_path / "logs", lines)
    out = tmp_path / "out"
    summary = cli.run(cli.parser().parse_args(["report", "--logs", str(logs), "--out", str(out)]), spark)
    assert summary["run"]["nodes"] == ["n1", "n2"]
    assert summary["run"]["missing_nodes"] == ["n3"]
    assert "MISSING: nodes in the views without a log line" in (out / "report.html").read_text()


def test_progress_line_names_each_stage(tmp_path: Path) -> None:
    from spark_analytics.progress import STAGES, Progress

    with (tmp_path / "progress.txt").open("w+") as f:  # not a terminal: one line per stage
        with Progress(f) as progress:
            for stage in STAGES:
                progress.stage(stage)
        f.seek(0)
        lines = f.read().splitlines()
    assert len(lines) == len(STAGES)
    assert lines[0].endswith("report 1/9: reading logs") and lines[-1].endswith("report 9/9: writing")
