"""The report on logs the node rotated and compressed itself (issue 33): the run of test_cli written through the
node's own writer (vmqpy.metadata.replication_log) with a small max_size, values as size and digest, gives the
same figures as the plain files."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analytics import cli
from tests.spark.runs import clean_history, generated_run
from vmqpy.metadata.replication_log import ReplicationLog, parse_rotated


def _rotated_logs(directory: Path, lines: list[dict[str, Any] | str]) -> dict[str, int]:
    """Each node's lines written by a ReplicationLog rotating at 2 KiB (raw strings appended to n1's live file);
    returns the rotations per node."""
    logs: dict[str, ReplicationLog] = {}
    stamps: list[int] = []
    for line in lines:
        if isinstance(line, str):
            continue
        node = str(line["node"])
        if node not in logs:
            logs[node] = ReplicationLog(directory / node / "replication.log", node, max_size=2048, count=1000,
                                        wall_ns=lambda: stamps.pop())
            logs[node].open()
        fields = {k: v for k, v in line.items() if k not in ("schema", "ts", "node", "hlc", "event")}
        if isinstance(fields.get("value"), str):
            fields["value"] = base64.b64decode(fields["value"])  # the writer gets the value's bytes
        stamps.append(int(line["ts"]))
        logs[node].write(str(line["event"]), line["hlc"], fields)
        logs[node].flush()  # one loop turn per line
    for log in logs.values():
        log.close()
    with (directory / "n1" / "replication.log").open("a", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines if isinstance(line, str)))
    return {node: log.rotations for node, log in logs.items()}


@pytest.fixture(scope="module")
def rotated_report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("rotated")
    logs = base / "logs"
    rotations = _rotated_logs(logs, generated_run())
    assert all(n >= 2 for n in rotations.values()), rotations
    out = base / "out"
    cli.run(cli.parser().parse_args(["report", "--logs", str(logs), "--history",
                                     str(clean_history(base / "h.jsonl")), "--out", str(out)]), spark)
    return logs, json.loads((out / "summary.json").read_text())


def test_the_logs_are_rotated_compressed_and_without_values(rotated_report: tuple[Path, dict[str, Any]]) -> None:
    logs, _summary = rotated_report
    for node in ("n1", "n2", "n3"):
        rotated = [r for p in (logs / node).iterdir() if (r := parse_rotated(logs / node / "replication.log",
                                                                              p.name))]
        assert len(rotated) >= 2 and all(r.compressed for r in rotated), (node, rotated)
    puts = [record for path in logs.rglob("replication.log*") for line in _text(path).splitlines()
            if (record := _record(line)) and record.get("event") == "md_write" and record.get("op") == "put"
            and "dot" in record]  # not the malformed line of generated_run
    assert len(puts) == 50 and all("value" not in r and len(r["value_sha256"]) == 16 for r in puts)


def _text(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def test_the_report_reads_every_line_of_the_rotated_logs(rotated_report: tuple[Path, dict[str, Any]]) -> None:
    """The figures of test_cli.test_run_metadata and test_visibility_figures, from the rotated logs."""
    summary = rotated_report[1]
    run = summary["run"]
    assert run["events_by_type"] == {"cluster_view": 9, "md_apply": 93, "md_exchange": 24, "md_gc": 3,
                                     "md_write": 50, "queue_replicas": 3}
    assert (run["events"], run["malformed_lines"], run["applies_without_write"]) == (182, 3, 0)
    vis = summary["visibility"]
    assert vis["writes_by_phase"] == {"after_heal": 10, "normal": 29, "partition": 11}
    assert {p: (v["pairs"], v["visible_fraction"], v["p50_ms"], v["max_ms"]) for p, v in vis["lag"].items()} == {
        "normal": (58, 1.0, 4.0, 12.0),
        "after_heal": (20, 1.0, 4.0, 12.0),
        "partition": (22, 1.0, 300.0, 2100.0),
        "all": (100, 1.0, 12.0, 2100.0),
    }
