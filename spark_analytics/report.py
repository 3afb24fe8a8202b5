"""The whole report: read the logs (and a history), run every transform, collect the figures into one
JSON-ready dict (summary.json), and with `parquet_dir` write the intermediate tables."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_analytics import (
    convergence,
    events,
    exchanges,
    phases,
    replica_windows,
    safety,
    siblings,
    staleness,
    visibility,
    windows,
)
from spark_analytics.readers import (
    InputError,
    Sources,
    find_log_files,
    read_history,
    read_logs,
    read_run_metadata,
    sources_of,
)

SUMMARY_VERSION = 1


def _iso(ts: int | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds")


def _num(value: Any) -> Any:
    """JSON-safe numbers: floats rounded to 6 digits (and NaN/inf as null)."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return round(value, 6)
    return value


def _row(row: Row, drop: Iterable[str] = ()) -> dict[str, Any]:
    return {k: _num(v) for k, v in row.asDict().items() if k not in set(drop)}


class _Cache:
    """The DataFrames persisted during one report, all unpersisted at the end."""

    def __init__(self) -> None:
        self.frames: list[DataFrame] = []

    def __call__(self, df: DataFrame) -> DataFrame:
        self.frames.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    def release(self) -> None:
        for df in self.frames:
            df.unpersist()
        self.frames.clear()


def analyze(
    spark: SparkSession,
    logs: Sources,
    history: Path | None = None,
    after_heal_s: float = phases.DEFAULT_AFTER_HEAL_S,
    parquet_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    detect_s: float = phases.DEFAULT_DETECT_S,
) -> dict[str, Any]:
    """Every figure of the report as a dict. Raises InputError when there is nothing to analyse. `progress` is
    told the name of each stage (progress.STAGES) as it begins."""
    files = find_log_files(logs, exclude=(history,) if history is not None else ())
    cache = _Cache()
    try:
        return _analyze(spark, logs, files, history, after_heal_s, parquet_dir, cache, progress or _silent,
                        int(detect_s * 1e9))
    finally:
        cache.release()


def _analyze(
    spark: SparkSession,
    logs: Sources,
    files: list[Path],
    history: Path | None,
    after_heal_s: float,
    parquet_dir: Path | None,
    cache: _Cache,
    stage: Callable[[str], None],
    detect_ns: int,
) -> dict[str, Any]:
    stage("reading logs")
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
    ev = cache(events.for_report(read_logs(spark, files), partitions))
    stats = events.line_stats(ev).collect()
    by_status: dict[str, int] = {}
    by_event: dict[str, int] = {}
    span: dict[str, tuple[int, int, int]] = {}
    for r in stats:
        by_status[r["status"]] = by_status.get(r["status"], 0) + r["lines"]
        if r["status"] == events.OK:
            by_event[r["event"]] = by_event.get(r["event"], 0) + r["lines"]
            first, last, n = span.get(r["node"], (r["first_ts"], r["last_ts"], 0))
            span[r["node"]] = (min(first, r["first_ts"]), max(last, r["last_ts"]), n + r["lines"])
    if not span:
        raise InputError(f"--logs {' '.join(sources_of(logs))}: no valid replication-log line in {len(files)} file(s)")
    nodes = sorted(span)
    start_ts = min(s[0] for s in span.values())
    end_ts = max(s[1] for s in span.values())
    spans = spark.createDataFrame(
        [(n, *span[n]) for n in nodes], "node string, first_ts long, last_ts long, events long"
    )

    stage("partitions")
    # The lines of the other events are few: one scan of the cached lines, then their own small cache.
    others = cache(events.other_events(ev))
    view_df = events.views(others)
    raw_parts = [
        windows.Partition(r["start_ts"], r["end_ts"], r["start_node"], windows.split_off(r["start_node"],
                                                                                           r["start_groups"]))
        for r in phases.partitions(view_df).collect()
    ]
    joined = {r["node"]: r["joined_ts"] for r in phases.first_joined(view_df).collect()}
    # A node the views name but whose log gave no line (not given, cut, unreadable): missing, said on the page.
    named = {r["n"] for r in view_df.select(F.explode(F.flatten("groups")).alias("n")).distinct().collect()}
    missing = sorted(named - set(nodes))
    kept, not_counted = windows.sort_out(raw_parts, joined, {n: span[n][1] for n in nodes}, end_ts, detect_ns)
    part_rows = [(i, p.start_ts, p.end_ts) for i, p in enumerate(kept, start=1)]
    parts_df = spark.createDataFrame(part_rows, "partition int, start_ts long, end_ts long")
    intervals = [(start, end) for _, start, end in part_rows]
    faults = _fault_windows(spark, history) if history is not None else None

    def phased(df: DataFrame) -> DataFrame:
        return phases.with_phase(df, intervals, after_heal_s)

    stage("visibility")
    writes = events.writes(ev)
    applies = events.applies(ev)
    ranked = cache(visibility.rank_writes(writes))
    applied = cache(visibility.applied_versions(applies, ranked))
    # One row per write with the moment each node held it; the (write, node) pairs are only made on the fly.
    versions = cache(visibility.version_visibility(visibility.holdings(ranked, applied), nodes).transform(phased))
    vis = visibility.pairs(versions, nodes)
    conv = cache(visibility.write_convergence(versions, nodes))

    lag_figures = visibility.lag_figures(vis)
    write_rows = visibility.write_figures(conv).collect()
    stage("convergence")
    # The end of the logs counts as one more "heal" (partition 0): its unconverged keys are the keys divergent at
    # the end, in the same query as the real heals.
    end_row = spark.createDataFrame([(0, end_ts, end_ts + 1)], "partition int, start_ts long, end_ts long")
    heal_df = convergence.heal_convergence(conv, parts_df.unionByName(end_row))
    heal_rows = sorted(heal_df.collect(), key=lambda r: r["heal_ts"])
    divergent_at_end = next(r["unconverged"] for r in heal_rows if r["partition"] == 0)
    heal_rows = [r for r in heal_rows if r["partition"] != 0]
    timeline_df = convergence.divergent_timeline(spark, conv, start_ts, end_ts)
    timeline = [r["divergent_keys"] for r in timeline_df.orderBy("second").collect()]
    by_faults = (_by_faults(spark, faults, versions, conv, nodes, after_heal_s) if faults is not None
                 else {"recorded": False})

    stage("staleness")
    stale_df = staleness.staleness(applied, ranked)
    stale_rows = staleness.staleness_counts(stale_df).collect()
    stale = staleness.summarize((r["via"], r["versions_behind"], r["applies"]) for r in stale_rows)
    matched_applies = sum(r["applies"] for r in stale_rows)

    stage("siblings")
    episodes = siblings.episodes_of(cache(siblings.sibling_events(applies, writes)))
    sib = siblings.sibling_summary(episodes).first()

    stage("anti-entropy")
    ex = events.exchanges(others)
    ex_df = exchanges.exchange_efficiency(ex, spans)
    ex_rows = ex_df.collect()
    result_rows = exchanges.exchange_results(ex).collect()
    gc_rows = exchanges.gc_totals(events.gcs(others)).collect()

    stage("queue replicas")
    state_lines = [replica_windows.StateLine(r["node"], r["ts"], bool(r["under_replicated"]), r["sessions"],
                                             r["messages"], r["writes"], r["peak_sessions"], r["peak_messages"],
                                             r["peak_writes"])
                   for r in events.replica_states(others).collect()]
    under_windows = replica_windows.windows_of(state_lines, {n: span[n][1] for n in nodes})

    if history is not None:
        stage("safety")
    safety_figures = _safety(spark, history, cache) if history is not None else {"checked": False}
    phase_writes = {r["phase"]: r["writes"] for r in write_rows}
    summary: dict[str, Any] = {
        "summary_version": SUMMARY_VERSION,
        "generated_at": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "run": {
            "logs": " ".join(sources_of(logs)),
            "files": [str(p) for p in files],
            "nodes": nodes,
            "missing_nodes": missing,
            "first_ts": start_ts,
            "last_ts": end_ts,
            "start": _iso(start_ts),
            "end": _iso(end_ts),
            "duration_s": _num((end_ts - start_ts) / 1e9),
            "events": by_status.get(events.OK, 0),
            "events_by_type": dict(sorted(by_event.items())),
            "events_by_node": {n: span[n][2] for n in nodes},
            "lines": sum(by_status.values()),
            "malformed_lines": by_status.get("corrupt", 0) + by_status.get("missing_field", 0),
            "lines_by_status": dict(sorted(by_status.items())),
            "applies_without_write": by_event.get("md_apply", 0) - matched_applies,
            "after_heal_s": after_heal_s,
            **read_run_metadata(logs),
        },
        "visibility": {
            "deltas_ms": list(visibility.DELTAS_MS),
            "writes": sum(phase_writes.values()),
            "writes_by_phase": dict(sorted(phase_writes.items())),
            "pbs": {
                phase: {"pairs": f["pairs"], "fractions": [_num(x) for x in f["fractions"]]}
                for phase, f in sorted(lag_figures.items())
            },
            "lag": {
                phase: {k: _num(v) for k, v in f.items() if k != "fractions"}
                for phase, f in sorted(lag_figures.items())
            },
        },
        "convergence": {
            "partitions": [
                {"partition": i, "start": _iso(start), "end": _iso(end), "start_ts": start, "end_ts": end,
                 "duration_s": None if end is None else _num((end - start) / 1e9)}
                for i, start, end in part_rows
            ],
            "detect_timeout_s": detect_ns / 1e9,
            "partitions_not_counted": [
                {"start": _iso(d.partition.start_ts), "end": _iso(d.partition.end_ts),
                 "start_ts": d.partition.start_ts, "end_ts": d.partition.end_ts, "reason": d.reason}
                for d in not_counted
            ],
            "heals": [
                {**_row(r), "heal": _iso(r["heal_ts"]), "last_converged": _iso(r["last_converged_ts"])}
                for r in heal_rows
            ],
            "writes": sum(phase_writes.values()),
            "writes_never_converged": sum(r["never_converged"] for r in write_rows),
            "keys_divergent_at_end": divergent_at_end,
            "timeline": {"start_s": -(-start_ts // 1_000_000_000), "step_s": 1, "divergent_keys": timeline},
            "max_divergent_keys": max(timeline, default=0),
        },
        "faults": by_faults,
        "siblings": {**_row(sib), "writebacks": sum(r["writebacks"] for r in write_rows)},
        "staleness": {
            "by_via": {k: {n: _num(v) for n, v in d.items()} for k, d in stale["by_via"].items()},
            "histogram": stale["histogram"],
        },
        "anti_entropy": {
            "by_node": {r["node"]: _row(r, drop=("node",)) for r in ex_rows},
            "results": {r["result"]: r["exchanges"] for r in sorted(result_rows, key=lambda r: r["result"])},
            "gc": {r["node"]: _row(r, drop=("node",)) for r in sorted(gc_rows, key=lambda r: r["node"])},
        },
        "safety": safety_figures,
        "queue_replicas": replica_windows.summarize(len(state_lines), under_windows),
    }
    if parquet_dir is not None:
        tables = {
            "keys": events.key_names(read_logs(spark, files)),
            "events": ev,
            "writes": ranked,
            "applies": applied,
            "visibility": vis,
            "write_convergence": conv,
            "partitions": parts_df,
            "heal_convergence": heal_df,
            "divergent_timeline": timeline_df,
            "staleness": stale_df,
            "sibling_episodes": episodes,
            "exchanges": ex_df,
        }
        for name, df in tables.items():
            df.write.mode("overwrite").parquet(str(parquet_dir / name))
        summary["run"]["parquet"] = str(parquet_dir)
    return summary


def _silent(_stage: str) -> None:
    pass


def _fault_windows(spark: SparkSession, history: Path) -> list[windows.FaultWindow]:
    """The nemesis's fault windows from the history's `nemesis` lines (few: collected)."""
    rows = (
        read_history(spark, history)
        .where((F.col("process") == "nemesis") & (F.col("f") == "nemesis"))
        .select("type", "time", "value", "seq")
        .orderBy("seq")
        .collect()
    )
    lines: list[tuple[str, int, str]] = []
    for r in rows:
        try:
            step = json.loads(r["value"])["step"]
        except (TypeError, ValueError, KeyError):
            continue
        if isinstance(step, str) and r["type"] is not None and r["time"] is not None:
            lines.append((r["type"], r["time"], step))
    return windows.fault_windows(windows.pair_steps(lines))


def _by_faults(
    spark: SparkSession,
    faults: list[windows.FaultWindow],
    versions: DataFrame,
    conv: DataFrame,
    nodes: list[str],
    after_heal_s: float,
) -> dict[str, Any]:
    """Phases, lags and convergence after each heal taken from the nemesis's fault windows instead of the views
    (the views see a fault about a detection time late)."""
    intervals = [(w.start_ts, w.end_ts) for w in faults]
    phase = phases.phase_column(F.col("write_ts"), intervals, after_heal_s)
    lag = visibility.lag_figures(visibility.pairs(versions.withColumn("phase", phase), nodes))
    write_rows = visibility.write_figures(conv.withColumn("phase", phase)).collect()
    rows = [(i, w.start_ts, w.end_ts) for i, w in enumerate(faults, start=1)]
    fault_df = spark.createDataFrame(rows, "partition int, start_ts long, end_ts long")
    heals = sorted(convergence.heal_convergence(conv, fault_df).collect(), key=lambda r: r["heal_ts"])
    return {
        "recorded": True,
        "windows": [
            {"window": i, "start": _iso(w.start_ts), "end": _iso(w.end_ts), "start_ts": w.start_ts,
             "end_ts": w.end_ts, "duration_s": None if w.end_ts is None else _num((w.end_ts - w.start_ts) / 1e9),
             "steps": list(w.steps)}
            for i, w in enumerate(faults, start=1)
        ],
        "writes_by_phase": dict(sorted((r["phase"], r["writes"]) for r in write_rows)),
        "lag": {ph: {k: _num(v) for k, v in f.items() if k != "fractions"} for ph, f in sorted(lag.items())},
        "heals": [
            {**_row(r, drop=("partition",)), "window": r["partition"], "heal": _iso(r["heal_ts"]),
             "last_converged": _iso(r["last_converged_ts"])}
            for r in heals
        ],
    }


EXAMPLES = 10
CHECKS = ("lost", "unexpected", "duplicated", "resurrected")


def _safety(spark: SparkSession, history: Path, cache: _Cache) -> dict[str, Any]:
    raw = read_history(spark, history)
    statuses = {r["status"]: r["n"] for r in safety.history_status(raw).groupBy("status")
                .agg(F.count(F.lit(1)).alias("n")).collect()}
    ops = cache(safety.operations(raw))
    figures = safety.history_figures(ops).first()
    found = safety.finding_counts(safety.findings(ops), EXAMPLES).collect()
    counts: dict[str, dict[str, int]] = {c: {} for c in CHECKS}
    examples: dict[str, list[Any]] = {c: [] for c in CHECKS}
    for r in found:
        counts[r["check"]][r["what"]] = r["count"]
        examples[r["check"]].append({"what": r["what"], **json.loads(r["detail"])})
    return {
        "checked": True,
        "history": str(history),
        "history_lines": sum(statuses.values()),
        "malformed_history_lines": sum(n for s, n in statuses.items() if s != "ok"),
        "operations": figures["operations"],
        "deliveries_checked": figures["drains"] > 0,
        "final_read_checked": figures["reads"] > 0,
        **{c: sum(counts[c].values()) for c in CHECKS},
        "details": {c: dict(sorted(counts[c].items())) for c in CHECKS},
        "examples": examples,
    }
