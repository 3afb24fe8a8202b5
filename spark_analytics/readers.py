"""Finding and reading the inputs: the nodes' replication logs under a run directory, a chaos history and
the run's `run.json`. Only files are read; nothing here talks to a node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analytics.schema import CORRUPT, HISTORY_SCHEMA, LOG_SCHEMA


class InputError(Exception):
    """The input cannot be analysed at all (no directory, no log lines): the command exits with status 2."""


def find_log_files(logs: Path, exclude: tuple[Path, ...] = ()) -> list[Path]:
    """The replication logs under `logs`: every `replication.log` (one per node data directory) when there is
    one, otherwise every `*.log` and `*.jsonl` file. Files in `exclude` (the history) are never logs."""
    if not logs.is_dir():
        raise InputError(f"--logs {logs}: no such directory")
    skip = {p.resolve() for p in exclude}
    named = sorted(p for p in logs.rglob("replication.log") if p.is_file() and p.resolve() not in skip)
    if named:
        return named
    found = [p for pattern in ("*.log", "*.jsonl") for p in logs.rglob(pattern)]
    files = sorted(p for p in found if p.is_file() and p.resolve() not in skip)
    if not files:
        raise InputError(f"--logs {logs}: no replication.log, *.log or *.jsonl file in it")
    if all(p.stat().st_size == 0 for p in files):
        raise InputError(f"--logs {logs}: the log files are empty (no log lines)")
    return files


def read_logs(spark: SparkSession, files: list[Path]) -> DataFrame:
    """The raw lines with the explicit LOG_SCHEMA; a line that is not JSON or does not fit the schema keeps
    its text in `_corrupt_record` (PERMISSIVE), and the fields that parsed."""
    return (
        spark.read.schema(LOG_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json([str(p) for p in files])
    )


def read_history(spark: SparkSession, path: Path) -> DataFrame:
    """A chaos history (JSON lines, docs/analytics.md) with a `seq` column: the line order, which breaks ties
    of `time` within a process."""
    if not path.is_file():
        raise InputError(f"--history {path}: no such file")
    raw = (
        spark.read.schema(HISTORY_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(str(path))
    )
    return raw.withColumn("seq", F.monotonically_increasing_id())


def read_run_metadata(logs: Path) -> dict[str, Any]:
    """`experiment`, `mode` and `seed` from `LOGS/run.json` when the run wrote one (the chaos harness does); {}
    otherwise."""
    path = logs / "run.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"run_json_error": f"{path} is not valid JSON"}
    if not isinstance(data, dict):
        return {"run_json_error": f"{path} is not a JSON object"}
    return {k: data[k] for k in ("experiment", "mode", "seed") if k in data}
