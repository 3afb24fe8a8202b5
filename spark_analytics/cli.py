"""`python -m spark_analytics report --logs DIR [--history FILE] [--out DIR] [--master M] [--parquet]`."""

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
from spark_analytics.phases import DEFAULT_AFTER_HEAL_S
from spark_analytics.readers import InputError, find_log_files
from spark_analytics.report import analyze
from spark_analytics.session import build_session


def parser(default_master: str | None = "local[*]") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_analytics", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="convergence report of a run's replication logs")
    r.add_argument("--logs", type=Path, required=True,
                   help="run directory: every replication.log under it (else every *.log / *.jsonl)")
    r.add_argument("--history", type=Path, help="chaos history (JSON lines) for the safety checks")
    r.add_argument("--out", type=Path, default=Path("spark-report"), help="output directory (default: spark-report)")
    r.add_argument("--master", default=default_master,
                   help=f"Spark master (default: {default_master or 'the one spark-submit was given'})")
    r.add_argument("--parquet", action="store_true", help="also write the intermediate tables as OUT/parquet/*")
    r.add_argument("--after-heal", type=float, default=DEFAULT_AFTER_HEAL_S, metavar="SECONDS",
                   help=f"length of the after-heal phase (default {DEFAULT_AFTER_HEAL_S:g})")
    r.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, e.g. --conf spark.driver.memory=4g (repeatable)")
    return p


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--conf {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace, spark: SparkSession) -> dict[str, Any]:
    """The report with an existing session: writes OUT/summary.json and OUT/report.html, returns the summary."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    summary = analyze(
        spark, args.logs, history=args.history, after_heal_s=args.after_heal,
        parquet_dir=out / "parquet" if args.parquet else None,
    )
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
    spark = build_session(args.master, conf)
    try:
        summary = run(args, spark)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    s = summary["safety"]
    safety = ("not checked" if not s["checked"] else
              ", ".join(f"{k} {s[k]}" for k in ("lost", "unexpected", "duplicated", "resurrected")))
    print(f"{summary['run']['events']:,} events from {len(summary['run']['nodes'])} nodes "
          f"({summary['run']['malformed_lines']} malformed lines); safety: {safety}")
    print(f"wrote {args.out / 'summary.json'} and {args.out / 'report.html'}")
    return 0
