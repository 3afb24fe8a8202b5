"""Staleness in versions: when a node applied a write, how many newer versions of that key existed already.

For an md_apply at moment t of version v of key K: `versions_behind` = the number of writes of K newer than v
(in version order) whose md_write `ts` is at or before t. 0 means the node applied the newest version there
was. An apply that the clocks place before its write is counted at the write's `ts`.

Computed without sorting the applies: rank_writes gives each version `newer_ts`, the earliest write of a newer
version of its key. An apply made before that moment is 0 behind, which is nearly every apply; only the others
(stale applies, typically anti-entropy repairs after a partition) are held against the writes of their key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

HISTOGRAM_MAX = 10  # versions_behind above this are counted together as "10+"


def out_of_order_writes(ranked: DataFrame) -> DataFrame:
    """Writes made (by `ts`) after a newer version of their key: (pkey, version, ts)."""
    return ranked.where(F.col("ts") > F.col("newer_ts")).select("pkey", "version", "ts")


def staleness(applied: DataFrame, ranked: DataFrame) -> DataFrame:
    """Every matched md_apply (visibility.applied_versions) with `versions_behind`: node, ts, pkey, version,
    via, siblings, versions_behind."""
    cols = ["node", "ts", "pkey", "version", "via", "siblings"]
    at = F.greatest("ts", "write_ts")
    behind = F.col("newer_ts").isNotNull() & (at >= F.col("newer_ts"))
    current = applied.where(~behind).select(*cols, F.lit(0).cast("long").alias("versions_behind"))
    stale = applied.where(behind).select(*cols, at.alias("at"))
    writes_of_key = ranked.groupBy("pkey").agg(
        F.collect_list(F.struct(F.col("version").alias("v"), F.col("ts").alias("t"))).alias("writes")
    )
    newer_by_then = F.size(F.filter("writes", lambda w: (w["v"] > F.col("version")) & (w["t"] <= F.col("at"))))
    return current.unionByName(
        stale.join(writes_of_key.hint("shuffle_hash"), "pkey").select(
            *cols, newer_by_then.cast("long").alias("versions_behind")
        )
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
