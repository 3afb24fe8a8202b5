"""Anti-entropy efficiency from the md_exchange lines (one per exchange a node started) and md_gc lines."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def exchange_efficiency(exchanges: DataFrame, spans: DataFrame) -> DataFrame:
    """Per node (and `all`): exchanges, per_minute (exchanges per node per minute of the node's log span),
    objects_received, repaired, bytes (sent + received), bytes_per_repaired (null when nothing was repaired),
    hit_ratio (repaired / received, null when nothing was received), mean and max duration (s).
    `spans` is events.node_spans (the `all` row's per_minute is the mean over the nodes that exchanged)."""
    per = exchanges.rollup("node").agg(
        F.count(F.lit(1)).alias("exchanges"),
        F.sum(F.when(F.col("result") == "ok", 1).otherwise(0)).alias("ok"),
        F.sum("objects_received").alias("objects_received"),
        F.sum("repaired").alias("repaired"),
        F.sum("dots_asked").alias("dots_asked"),
        F.sum(F.col("bytes_sent") + F.col("bytes_received")).alias("bytes"),
        F.avg("duration").alias("mean_duration_s"),
        F.max("duration").alias("max_duration_s"),
    )
    minutes = spans.select("node", ((F.col("last_ts") - F.col("first_ts")) / 6e10).alias("minutes"))
    total_minutes = minutes.join(exchanges.select("node").distinct(), "node").agg(
        F.sum("minutes").alias("minutes")
    ).select(F.lit(None).cast("string").alias("node"), "minutes")
    with_minutes = per.join(minutes.unionByName(total_minutes), per["node"].eqNullSafe(minutes["node"]), "left")
    return with_minutes.select(
        F.coalesce(per["node"], F.lit("all")).alias("node"),
        "exchanges", "ok", "objects_received", "repaired", "dots_asked", "bytes",
        F.when(F.col("minutes") > 0, F.col("exchanges") / F.col("minutes")).alias("per_minute"),
        F.when(F.col("repaired") > 0, F.col("bytes") / F.col("repaired")).alias("bytes_per_repaired"),
        F.when(F.col("objects_received") > 0, F.col("repaired") / F.col("objects_received")).alias("hit_ratio"),
        "mean_duration_s", "max_duration_s",
    )


def exchange_results(exchanges: DataFrame) -> DataFrame:
    """(result, exchanges): how many exchanges ended with each result, over the cluster."""
    return exchanges.groupBy("result").agg(F.count(F.lit(1)).alias("exchanges"))


def gc_totals(gcs: DataFrame) -> DataFrame:
    """Per node: md_gc runs, dots pruned, deleted keys removed."""
    return gcs.groupBy("node").agg(
        F.count(F.lit(1)).alias("runs"),
        F.sum("dots_pruned").alias("dots_pruned"),
        F.sum("keys_deleted").alias("keys_deleted"),
    )
