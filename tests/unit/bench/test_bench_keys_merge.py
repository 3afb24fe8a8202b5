"""bench.bench_keys --from-json: the points of earlier runs merged by size (the later file wins), with slopes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import keys_results


def point(keys: int, join_s: float | None, rest: float = 1.0, bytes_in: int | None = None) -> dict[str, Any]:
    return {"keys": keys, "join_s": join_s, "rest_cpu_pct_max": rest,
            "exchange_bytes_received": 200 * keys if bytes_in is None else bytes_in}


def write(path: Path, points: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"bench": "keys", "rest_s": 5.0, "points": points, "slopes": {}}))
    return path


def test_points_are_merged_by_size_later_files_winning(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", [point(10_000, 2.0), point(100_000, 19.0)])
    b = write(tmp_path / "b.json", [point(1_000_000, 224.0), point(100_000, 17.0)])
    result = keys_results.merged([a, b])
    assert [p["keys"] for p in result["points"]] == [10_000, 100_000, 1_000_000]
    assert result["points"][1]["join_s"] == 17.0
    assert result["slopes"]["exchange_bytes_per_key"] == pytest.approx(200.0)
    assert result["slopes"]["rest_cpu_pct_per_million"] == pytest.approx(0.0)


def test_a_size_that_did_not_catch_up_is_left_out_of_the_join_slope(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", [point(10_000, 2.0), point(100_000, 20.0), point(1_000_000, None)])
    slopes = keys_results.merged([a])["slopes"]
    assert slopes["join_s_per_million"] == pytest.approx(200.0)


def test_main_with_from_json_measures_nothing_and_writes_the_merge(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", [point(10_000, 2.0)])
    b = write(tmp_path / "b.json", [point(1_000_000, 224.0)])
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-m", "bench.bench_keys", "--from-json", f"{a},{b}", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [p["keys"] for p in json.loads(out.read_text())["points"]] == [10_000, 1_000_000]
