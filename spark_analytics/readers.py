"""Finding and reading the inputs: the nodes' replication logs under a run directory, a chaos history and
the run's `run.json`. Only files are read; nothing here talks to a node."""

from __future__ import annotations

import glob
import gzip
import json
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from spark_analytics.schema import CORRUPT, HISTORY_SCHEMA, LOG_SCHEMA


class InputError(Exception):
    """The input cannot be analysed at all (no directory, no log lines): the command exits with status 2."""


#: A node's replication log, rotated (`replication.log.1`) or compressed (`replication.log.2.gz`) as well.
NODE_LOG = re.compile(r"replication\.log(\.\d+)?(\.gz)?")
#: Any other file read as a log when a directory holds no NODE_LOG.
OTHER_LOG = re.compile(r".*\.(log|jsonl)(\.\d+)?(\.gz)?")
Sources = Path | str | Sequence[Path | str]
_GLOB = re.compile(r"[*?\[]")


def sources_of(logs: Sources) -> list[str]:
    """`--logs` as a list of directories, files or glob patterns."""
    return [str(logs)] if isinstance(logs, Path | str) else [str(s) for s in logs]


def _in_directory(directory: Path) -> list[Path]:
    """The logs under a directory: every NODE_LOG at any depth, else every OTHER_LOG."""
    found = [p for p in directory.rglob("*") if p.is_file()]
    named = [p for p in found if NODE_LOG.fullmatch(p.name)]
    return named or [p for p in found if OTHER_LOG.fullmatch(p.name)]


def find_log_files(logs: Sources, exclude: tuple[Path, ...] = ()) -> list[Path]:
    """The replication logs of `logs`: directories (every `replication.log` under them, rotated and gzip-compressed
    ones too, `replication.log.1.gz`; when a directory has none, its `*.log` and `*.jsonl` files), files, and glob
    patterns of either (`runs/*/n*/replication.log*`). Files in `exclude` (the history) are never logs. A file
    that cannot be read (permissions, a broken gzip stream) is an InputError: a node is never silently left
    out."""
    skip = {p.resolve() for p in exclude}
    files: set[Path] = set()
    for source in sources_of(logs):
        if _GLOB.search(source):
            matched = [Path(m) for m in sorted(glob.glob(source, recursive=True))]
            if not matched:
                raise InputError(f"--logs {source}: the pattern matches nothing")
        else:
            matched = [Path(source)]
        for path in matched:
            if path.is_dir():
                in_dir = _in_directory(path)
                if not in_dir:
                    raise InputError(f"--logs {path}: no replication.log, *.log or *.jsonl file in it")
                files.update(in_dir)
            elif path.is_file():
                files.add(path)
            elif len(matched) == 1 and not _GLOB.search(source):
                raise InputError(f"--logs {path}: no such directory")
    found = sorted(p for p in files if p.resolve() not in skip)
    if not found:
        raise InputError(f"--logs {' '.join(sources_of(logs))}: no replication.log, *.log or *.jsonl file in it")
    for path in found:
        check_readable(path)
    if all(p.stat().st_size == 0 for p in found):
        raise InputError(f"--logs {' '.join(sources_of(logs))}: the log files are empty (no log lines)")
    return found


def check_readable(path: Path) -> None:
    """Raise InputError unless `path` can be read whole: a gzip file (`.gz`) is decompressed to its end."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        else:
            with path.open("rb") as f:
                f.read(1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from exc


# A line is exactly one JSON object when, with its strings emptied and its blanks removed, folding innermost
# objects and arrays into `0` leaves a single `0`: a second object (`{..}{..}`, `{..},{..}`), an array of objects
# or trailing text leaves more. The replication log nests three deep; a line nested deeper than _FOLDS is
# malformed.
_STRING = r'"(?:[^"\\]|\\.)*"'
_INNERMOST = r"\{[^{}\[\]]*\}|\[[^{}\[\]]*\]"
_FOLDS = 8


def _one_object(line: Column) -> Column:
    folded = F.regexp_replace(F.regexp_replace(line, _STRING, '""'), r"\s+", "")
    starts_object = folded.startswith("{")
    for _ in range(_FOLDS):
        folded = F.regexp_replace(folded, _INNERMOST, "0")
    return starts_object & (folded == "0")


def read_json_lines(
    spark: SparkSession, files: Sequence[Path], schema: StructType, lenient: frozenset[str] = frozenset()
) -> DataFrame:
    """One row per non-blank line of `files` (gzip-compressed ones read as text) with the fields of `schema`;
    a line that is not exactly one JSON object fitting the schema keeps its text in `_corrupt_record` (and the
    fields that parsed when it is one object of the wrong shape). A field in `lenient` of the wrong type is read
    as null and does not make the line malformed (fields no report reads)."""
    fields = [f for f in schema.fields if f.name != CORRUPT]
    loose = StructType([StructField(f.name, StringType()) if f.name in lenient else f for f in schema.fields])
    text = spark.read.text([str(p) for p in files]).where(F.trim("value") != "")
    parsed = text.select(
        "value",
        _one_object(F.col("value")).alias("_one"),
        F.from_json("value", loose, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("_j"),
    )

    def field(f: StructField) -> Column:
        value = F.col(f"_j.{f.name}")
        if f.name in lenient and not isinstance(f.dataType, StringType):
            # a string field holds any JSON value's text: typed here, null when it does not fit
            value = F.from_json(F.concat(F.lit('{"v":'), value, F.lit("}")), StructType([StructField(
                "v", f.dataType)]))["v"]
        return F.when(F.col("_one"), value).alias(f.name)

    corrupt = F.when(~F.col("_one"), F.col("value")).otherwise(F.col(f"_j.{CORRUPT}"))
    return parsed.select(*[field(f) for f in fields], corrupt.alias(CORRUPT))


# Fields of the log that no report reads: a wrong type there is not a malformed line (docs/analytics.md).
UNREAD_LOG_FIELDS = frozenset({"value", "context", "origin", "hit_ratio", "members", "reachable"})


def read_logs(spark: SparkSession, files: list[Path]) -> DataFrame:
    """The raw lines with the explicit LOG_SCHEMA; a line that is not one JSON object or does not fit the schema
    keeps its text in `_corrupt_record` (PERMISSIVE), and the fields that parsed."""
    return read_json_lines(spark, files, LOG_SCHEMA, UNREAD_LOG_FIELDS)


def read_history(spark: SparkSession, path: Path) -> DataFrame:
    """A chaos history (JSON lines, docs/analytics.md) with a `seq` column: the line order, which breaks ties
    of `time` within a process."""
    if not path.is_file():
        raise InputError(f"--history {path}: no such file")
    check_readable(path)
    return read_json_lines(spark, [path], HISTORY_SCHEMA).withColumn("seq", F.monotonically_increasing_id())


def read_run_metadata(logs: Sources) -> dict[str, Any]:
    """`experiment`, `mode` and `seed` from `LOGS/run.json` when the run wrote one (the chaos harness does) and
    `--logs` is one directory; {} otherwise."""
    sources = sources_of(logs)
    if len(sources) != 1 or _GLOB.search(sources[0]):
        return {}
    path = Path(sources[0]) / "run.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"run_json_error": f"{path} is not valid JSON"}
    if not isinstance(data, dict):
        return {"run_json_error": f"{path} is not a JSON object"}
    return {k: data[k] for k in ("experiment", "mode", "seed") if k in data}
