"""Staleness in versions: when a node applied a write, how many newer versions of that key existed already.

For an md_apply at moment t of version v of key K: `versions_behind` = the number of writes of K newer than v
(in version order) whose md_write `ts` is at or before t. 0 means the node applied the newest version there
was. An apply that the clocks place before its write is counted at the write's `ts`.

Computed without a join of every apply with every write of its key: behind = written(t) - v + late(v, t), where
written(t) is the number of writes of K made by t (one running count over writes and applies ordered by time)
and late(v, t) the writes of K of version <= v made after t. Such a write is necessarily *out of order* (a newer
version was written before it), and out-of-order writes are rare: only they are joined.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

HISTOGRAM_MAX = 10  # versions_behind above this are counted together as "10+"


def out_of_order_writes(ranked: DataFrame) -> DataFrame:
    """Writes made (by `ts`) after a newer version of their key: (pkey, version, ts)."""
    newer_first = Window.partitionBy("pkey").orderBy(F.col("version").desc()).rowsBetween(
        Window.unboundedPreceding, -1
    )
    return (
        ranked.select("pkey", "version", "ts")
        .withColumn("newer_min_ts", F.min("ts").over(newer_first))
        .where(F.col("ts") > F.col("newer_min_ts"))
        .select("pkey", "version", "ts")
    )


def staleness(applied: DataFrame, ranked: DataFrame) -> DataFrame:
    """Every matched md_apply (visibility.applied_versions) with `versions_behind`: node, ts, pkey, version,
    via, siblings, versions_behind."""
    cols = ["node", "ts", "via", "siblings"]
    apps = applied.select("pkey", "version", *cols, F.greatest("ts", "write_ts").alias("at"), F.lit(1).alias("kind"))
    writes = ranked.select(
        "pkey", "version", *[F.lit(None).alias(c) for c in cols], F.col("ts").alias("at"), F.lit(0).alias("kind")
    )
    by_time = Window.partitionBy("pkey").orderBy("at", "kind").rowsBetween(Window.unboundedPreceding, 0)
    with_written = (
        apps.unionByName(writes.select(*[F.col(c).cast(t) for c, t in apps.dtypes]))
        .withColumn("written", F.sum(1 - F.col("kind")).over(by_time))
        .where(F.col("kind") == 1)
    )
    late_per_key = (
        out_of_order_writes(ranked)
        .groupBy("pkey")
        .agg(F.collect_list(F.struct(F.col("version").alias("v"), F.col("ts").alias("t"))).alias("late"))
    )
    late = F.when(F.col("late").isNull(), F.lit(0)).otherwise(  # size(null) is -1 without ANSI
        F.size(F.filter("late", lambda w: (w["v"] <= F.col("version")) & (w["t"] > F.col("at"))))
    )
    return with_written.join(late_per_key.hint("shuffle_hash"), "pkey", "left").select(
        "node", "ts", "pkey", "version", "via", "siblings",
        (F.col("written") - F.col("version") + late).alias("versions_behind"),
    )


def staleness_counts(stale: DataFrame) -> DataFrame:
    """(via, versions_behind, applies): the distribution of staleness, per way of applying."""
    return stale.groupBy("via", "versions_behind").agg(F.count(F.lit(1)).alias("applies"))


def summarize(counts: Iterable[tuple[str, int, int]]) -> dict[str, Any]:
    """From (via, versions_behind, applies) rows: per via and `all`, applies, stale (versions_behind > 0),
    stale_fraction, mean and max versions behind; and the histogram over every apply (HISTOGRAM_MAX and above
    together, as "10+")."""
    by_via: dict[str, dict[str, Any]] = {}
    histogram: dict[int, int] = {}
    for via, behind, n in counts:
        for name in (via, "all"):
            s = by_via.setdefault(name, {"applies": 0, "stale": 0, "total": 0, "max_versions_behind": 0})
            s["applies"] += n
            s["stale"] += n if behind > 0 else 0
            s["total"] += behind * n
            s["max_versions_behind"] = max(s["max_versions_behind"], behind)
        capped = min(behind, HISTOGRAM_MAX)
        histogram[capped] = histogram.get(capped, 0) + n
    for s in by_via.values():
        total = s.pop("total")
        s["stale_fraction"] = s["stale"] / s["applies"] if s["applies"] else None
        s["mean_versions_behind"] = total / s["applies"] if s["applies"] else None
    return {
        "by_via": dict(sorted(by_via.items())),
        "histogram": {
            (f"{b}+" if b == HISTOGRAM_MAX else str(b)): histogram[b] for b in sorted(histogram)
        },
    }
