"""One tiny real run of `make bench`'s runner (bench.suite) against real brokers: its summary JSON holds the
machine, every step's status and the table's rows, and the curve benches' checks hold (every probe message
delivered, sessions and retained messages back after a restart, the whole wildcard delivered).

No assertion here is about speed. The message scenarios (bench.compare) are left out to keep it under a minute;
tests/integration/test_bench_loadgen.py runs their load generator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import suite

# A long run (`make test-long`, README): a whole, if tiny, `make bench` takes about 30 s. `make test` keeps the
# short version: tests/unit/test_bench_suite.py and test_bench_curves.py.
pytestmark = pytest.mark.skipif(os.environ.get("LONG_TESTS") != "1", reason="long run: make test-long (LONG_TESTS=1)")


@pytest.mark.integration
def test_a_tiny_suite_run_writes_the_dated_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = suite.main(["--quick", "--skip", "compare,connects,fleet,cluster,latency", "--idle-connections", "50",
                       "--sub-sizes", "100", "--ret-sizes", "300", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("*-summary.json")
    doc = json.loads(path.read_text())
    assert code == 0, (doc["steps"], out[-3000:])
    assert all(doc["steps"][s] == {"skipped": True} for s in ("compare", "connects", "fleet", "cluster", "latency"))
    assert all(doc["steps"][s]["exit"] == 0 for s in ("idle", "subscriptions", "retained"))
    assert doc["machine"]["cores"] and len(doc["machine"]["git_commit"]) == 40
    by_scenario = {(r["scenario"], r["broker"]): r for r in doc["rows"]}
    assert set(by_scenario) == {("idle connections (50)", "vmqpy"), ("idle connections (50)", "mosquitto"),
                                ("subscriptions 100", "vmqpy"), ("retained 300", "vmqpy")}
    sub = by_scenario[("subscriptions 100", "vmqpy")]
    assert sub["cpu_us"] is not None and sub["cpu_us"] > 0
    raw_sub = json.loads((tmp_path / "raw" / "subscriptions.json").read_text())["points"][0]
    assert raw_sub["subscriptions"] == 100 and raw_sub["delivered"] == raw_sub["expected"] > 0
    assert raw_sub["sessions_present_after_restart"] is True
    raw_ret = json.loads((tmp_path / "raw" / "retained.json").read_text())["points"][0]
    assert raw_ret["retained_after_restart"] is True and raw_ret["delivered"] == raw_ret["matches"] == 300
    assert doc["table"] in out
