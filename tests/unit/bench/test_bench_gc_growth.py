"""bench.bench_gc_growth runs both settings in fresh interpreters and reports the collector's figures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import bench_gc_growth


def test_one_setting_reports_its_passes_and_freezes() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.bench_gc_growth", "--one", "node", "--entries", "60000"],
                         capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["setting"] == "node" and row["entries"] == 60_000
    assert row["thresholds"] == list(bench_gc_growth.SETTINGS["node"])
    assert row["passes"][0] >= 1 and row["gc_s"] >= 0 and row["longest_ms"] >= 0


def test_the_whole_run_prints_both_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_gc_growth.main(["--entries", "20000"]) == 0
    printed = capsys.readouterr().out
    assert "old   thresholds (50000, 20, 10)" in printed and "node  thresholds" in printed


@pytest.mark.parametrize("argv", [["--entries", "0"], ["--rounds", "0"]])
def test_bad_sizes_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench_gc_growth.main(argv)
