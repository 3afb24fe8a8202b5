"""`python -m spark_analytics report --logs DIR|FILE|GLOB... [--history FILE] [--out DIR] [--master M] [--parquet]`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_analytics import html
from spark_analytics.phases import DEFAULT_AFTER_HEAL_S, DEFAULT_DETECT_S
from spark_analytics.progress import Progress
from spark_analytics.readers import InputError, find_log_files
from spark_analytics.report import analyze
from spark_analytics.session import DEFAULT_LOG_LEVEL, build_session

#: Spark's own output (log4j, JVM warnings), next to the report.
SPARK_LOG = "spark.log"


def parser(default_master: str | None = "local[*]") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_analytics", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="convergence report of a run's replication logs")
    r.add_argument("--logs", nargs="+", required=True, metavar="DIR|FILE|GLOB",
                   help="run directories (every replication.log under them, rotated and .gz ones too; else every "
                        "*.log / *.jsonl), log files, or glob patterns of them (quote them)")
    r.add_argument("--history", type=Path, help="chaos history (JSON lines) for the safety checks")
    r.add_argument("--out", type=Path, default=Path("spark-report"), help="output directory (default: spark-report)")
    r.add_argument("--master", default=default_master,
                   help=f"Spark master (default: {default_master or 'the one spark-submit was given'})")
    r.add_argument("--parquet", action="store_true", help="also write the intermediate tables as OUT/parquet/*")
    r.add_argument("--after-heal", type=float, default=DEFAULT_AFTER_HEAL_S, metavar="SECONDS",
                   help=f"length of the after-heal phase (default {DEFAULT_AFTER_HEAL_S:g})")
    r.add_argument("--detect-timeout", type=float, default=DEFAULT_DETECT_S, metavar="SECONDS",
                   help="the nodes' cluster.detect_timeout: a split view not longer than this is not counted as a "
                        f"partition (default {DEFAULT_DETECT_S:g})")
    r.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, e.g. --conf spark.driver.memory=4g (repeatable)")
    r.add_argument("--spark-log-level", default=DEFAULT_LOG_LEVEL, metavar="LEVEL",
                   choices=("ERROR", "WARN", "INFO", "DEBUG"),
                   help=f"level of Spark's log in OUT/{SPARK_LOG} (default {DEFAULT_LOG_LEVEL}; INFO for every task)")
    return p


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--conf {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace, spark: SparkSession, progress: Progress | None = None) -> dict[str, Any]:
    """The report with an existing session: writes OUT/summary.json and OUT/report.html, returns the summary."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    summary = analyze(
        spark, args.logs, history=args.history, after_heal_s=args.after_heal,
        parquet_dir=out / "parquet" if args.parquet else None,
        progress=progress.stage if progress is not None else None, detect_s=args.detect_timeout,
    )
    if progress is not None:
        progress.stage("writing")
    summary["run"]["analysis_seconds"] = round(time.monotonic() - started, 3)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(html.render(summary), encoding="utf-8")
    return summary


def main(argv: Sequence[str] | None = None, default_master: str | None = "local[*]") -> int:
    args = parser(default_master).parse_args(argv)
    try:
        conf = _conf(args.conf)
        # Fail on a wrong --logs before paying for a JVM.
        find_log_files(args.logs, exclude=(args.history,) if args.history else ())
        if args.history is not None and not args.history.is_file():
            raise InputError(f"--history {args.history}: no such file")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark_log: Path = args.out / SPARK_LOG
    with Progress() as progress:
        spark = build_session(args.master, conf, log_file=spark_log, log_level=args.spark_log_level)
        try:
            summary = run(args, spark, progress)
        except InputError as exc:
            progress.close()
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            spark.stop()
    for node in summary["run"]["missing_nodes"]:
        print(f"warning: {node} is in the cluster views but no log line of it was read: marked missing in the "
              "report", file=sys.stderr)
    s = summary["safety"]
    safety = ("not checked" if not s["checked"] else
              ", ".join(f"{k} {s[k]}" for k in ("lost", "unexpected", "duplicated", "resurrected")))
    print(f"{summary['run']['events']:,} events from {len(summary['run']['nodes'])} nodes "
          f"({summary['run']['malformed_lines']} malformed lines); safety: {safety}")
    # Under spark-submit the JVM was already running: its output went where spark-submit sends it.
    where = f" (Spark's log: {spark_log})" if spark_log.is_file() else ""
    print(f"wrote {args.out / 'summary.json'} and {args.out / 'report.html'}{where}")
    return 0
