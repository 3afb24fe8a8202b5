"""Partitions and heals from the `cluster_view` lines, and the phase of a moment.

The cluster is *partitioned* while at least one node's latest view has more than one group; it *heals* at the
view line that brings the last such node back to one group. Not every such partition is a fault: `windows.sort_out`
drops join blips, the stop of the nodes and anything not longer than the detection time. A moment is in phase
`partition` inside a partition, `after_heal` during the `after_heal_s` seconds after a heal (default 10 s, ten
anti-entropy periods of the default `metadata.sync_interval` of 1 s), `normal` otherwise. The same phases can be
taken from the nemesis's fault windows (windows.fault_windows) instead of the views.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

PHASES = ("normal", "partition", "after_heal")
DEFAULT_AFTER_HEAL_S = 10.0
#: `cluster.detect_timeout`'s default (docs/cluster.md): a partition is seen only after this long.
DEFAULT_DETECT_S = 1.0
_FOREVER = 2**63 - 1


def split_counts(views: DataFrame) -> DataFrame:
    """Every view line with `split_nodes`: how many nodes' latest view has more than one group just after it,
    and `prev_split_nodes` just before it (ts, node, n_groups, groups, split_nodes, prev_split_nodes)."""
    per_node = Window.partitionBy("node").orderBy("ts")
    everyone = Window.partitionBy(F.lit(0)).orderBy("ts", "node")
    split = (F.col("n_groups") > 1).cast("int")
    return (
        views.select("ts", "node", "n_groups", "groups")
        .withColumn("split", split)
        .withColumn("delta", F.col("split") - F.coalesce(F.lag("split").over(per_node), F.lit(0)))
        .withColumn("split_nodes", F.sum("delta").over(everyone.rowsBetween(Window.unboundedPreceding, 0)))
        .withColumn("prev_split_nodes", F.coalesce(F.lag("split_nodes").over(everyone), F.lit(0)))
        .drop("split", "delta")
    )


def partitions(views: DataFrame) -> DataFrame:
    """One row per partition: (partition, start_ts, end_ts, start_node, start_groups); `end_ts` (the heal) is
    null while it lasts; `start_node` and `start_groups` are the node and the groups of the view that began it."""
    everyone = Window.partitionBy(F.lit(0)).orderBy("ts", "node")
    marked = (
        split_counts(views)
        .withColumn("starts", (F.col("split_nodes") > 0) & (F.col("prev_split_nodes") == 0))
        .withColumn("ends", (F.col("split_nodes") == 0) & (F.col("prev_split_nodes") > 0))
        .withColumn(
            "partition",
            F.sum(F.col("starts").cast("int")).over(everyone.rowsBetween(Window.unboundedPreceding, 0)),
        )
        .where(F.col("partition") > 0)
    )
    return marked.groupBy("partition").agg(
        F.min(F.when(F.col("starts"), F.col("ts"))).alias("start_ts"),
        F.min(F.when(F.col("ends"), F.col("ts"))).alias("end_ts"),
        F.min_by(F.when(F.col("starts"), F.struct("node", "groups")), F.when(F.col("starts"), F.col("ts")))
        .alias("_first"),
    ).select("partition", "start_ts", "end_ts", F.col("_first.node").alias("start_node"),
             F.col("_first.groups").alias("start_groups"))


def first_joined(views: DataFrame) -> DataFrame:
    """Per node, its first view that has other members (node, joined_ts): the moment it joined."""
    return views.groupBy("node").agg(
        F.min(F.when(F.size(F.flatten("groups")) > 1, F.col("ts"))).alias("joined_ts")
    ).where(F.col("joined_ts").isNotNull())


def phase_column(ts: Column, intervals: Sequence[tuple[int, int | None]], after_heal_s: float) -> Column:
    """The phase of the moment `ts` (ns) given the partitions' (start_ts, end_ts) collected from `partitions`."""
    after_ns = int(after_heal_s * 1e9)
    phase: Column | None = None
    for start, end in intervals:
        stop = _FOREVER if end is None else end
        cond = (ts >= start) & (ts < stop)
        phase = F.when(cond, "partition") if phase is None else phase.when(cond, "partition")
    for _start, end in intervals:
        if end is None:
            continue
        cond = (ts >= end) & (ts < end + after_ns)
        phase = F.when(cond, "after_heal") if phase is None else phase.when(cond, "after_heal")
    return F.lit("normal") if phase is None else phase.otherwise("normal")


def with_phase(df: DataFrame, intervals: Sequence[tuple[int, int | None]], after_heal_s: float,
               ts: str = "write_ts") -> DataFrame:
    """`df` with a `phase` column for its `ts` column."""
    return df.withColumn("phase", phase_column(F.col(ts), intervals, after_heal_s))
