"""Visibility of writes on the other nodes, and its PBS-style curve.

A write W of key K (an md_write line) is *visible* on node N from the first moment N holds W's dot or a newer
version of K: an md_apply on N of a dot of K whose write is at least as new as W, or N's own md_write of such a
version. Versions of a key are ordered by their hlc stamp ([wall_ms, logical, node], then the dot), the order
in which the store resolves them. The *lag* of (W, N) is that moment minus W's `ts`, in milliseconds (0 when
the clocks of two hosts make it negative); a pair that never becomes visible has no lag.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# The PBS grid: Δ in milliseconds.
DELTAS_MS: tuple[float, ...] = (
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000,
)
QUANTILES: tuple[float, ...] = (0.5, 0.99, 0.999)
_DOT = ["dot_node", "dot_counter"]


def rank_writes(writes: DataFrame) -> DataFrame:
    """Every distinct write (by dot) with `version`: 1 for the oldest write of its key, by hlc then dot.
    Columns: node (the writer), ts, pkey, dot_node, dot_counter, delete, writeback, version; (pkey, version) identifies
    the write from here on."""
    order = Window.partitionBy("pkey").orderBy("hlc_wall", "hlc_logical", "hlc_node", *_DOT, "ts")
    same_dot = (F.lag("dot_node").over(order) == F.col("dot_node")) & (
        F.lag("dot_counter").over(order) == F.col("dot_counter")
    )
    return (
        writes.withColumn("_dup", F.coalesce(same_dot, F.lit(False)))
        .where(~F.col("_dup"))
        .withColumn("version", F.row_number().over(order))
        .select("node", "ts", "pkey", *_DOT, "delete", "writeback", "version")
    )


def applied_versions(applies: DataFrame, ranked: DataFrame) -> DataFrame:
    """md_apply lines with the version and the `write_ts` of the write whose dot they applied: node, ts, pkey,
    version, write_ts, via, siblings (inner join: an apply of a dot whose md_write is not in the logs is left
    out, see `unmatched_applies`)."""
    # A hash of each partition's writes, probed by its applies: no sort of the (four times more) applies.
    return applies.join(
        ranked.select("pkey", *_DOT, "version", F.col("ts").alias("write_ts")).hint("shuffle_hash"),
        ["pkey", *_DOT],
        "inner",
    ).select("node", "ts", "pkey", "version", "write_ts", "via", "siblings")


def unmatched_applies(applies: DataFrame, ranked: DataFrame) -> DataFrame:
    """md_apply lines whose dot has no md_write in the logs (a lost or missing log)."""
    return applies.join(ranked.select("pkey", *_DOT), ["pkey", *_DOT], "left_anti")


def holdings(ranked: DataFrame, applied: DataFrame) -> DataFrame:
    """When each node came to hold each version: (pkey, node, version, hold_ts, own, delete) from the writer's
    md_write (`own`, and whether it is a delete) and every other node's md_apply."""
    own = ranked.select("pkey", "node", "version", F.col("ts").alias("hold_ts"), F.lit(True).alias("own"),
                        "delete")
    remote = applied.select("pkey", "node", "version", F.col("ts").alias("hold_ts"), F.lit(False).alias("own"),
                            F.lit(None).cast("boolean").alias("delete"))
    return own.unionByName(remote)


def visibility(held: DataFrame, nodes: Sequence[str]) -> DataFrame:
    """One row per (write, other node): pkey, version, write_ts, target, visible_ts (null: never), lag_ms
    (null: never). `held` is `holdings`; `nodes` are the cluster's nodes.

    A node that never logged the key (no md_write, no md_apply of it) holds a delete of it from the delete's
    write on: it has nothing of the key, which is what the delete leaves, and it logs nothing when the delete
    reaches it (docs/replication-log.md: an md_apply is logged when the key's versions change).

    One row per version with a column per node (the first moment the node held that version), then one running
    minimum per node over the versions from the newest down: a sort of the versions of each key, not of every
    (write, node) pair. Every write is in `held` through the writer's own line."""
    per_node = [F.min(F.when(F.col("node") == n, F.col("hold_ts"))).alias(f"_h{i}") for i, n in enumerate(nodes)]
    # The writer as its index in `nodes`: numbers keep the aggregation a hash aggregation (no sort).
    index = reduce(lambda c, i: c.when(F.col("node") == nodes[i], i), range(1, len(nodes)),
                   F.when(F.col("node") == nodes[0], 0))
    versions = held.groupBy("pkey", "version").agg(
        F.max(F.when(F.col("own"), index)).alias("_writer"),
        F.min(F.when(F.col("own"), F.col("hold_ts"))).alias("write_ts"),
        F.max(F.when(F.col("own"), F.col("delete"))).alias("_delete"),
        *per_node,
    ).where(F.col("write_ts").isNotNull())
    whole_key = Window.partitionBy("pkey")
    versions = versions.select(
        "pkey", "version", "_writer", "write_ts",
        *[F.when(F.col("_delete") & F.max(F.col(f"_h{i}").isNotNull().cast("int")).over(whole_key).eqNullSafe(0),
                 F.col("write_ts")).otherwise(F.col(f"_h{i}")).alias(f"_h{i}") for i in range(len(nodes))],
    )
    names = F.array(*[F.lit(n) for n in nodes])
    # For each version: the earliest hold on each node of any version at least as new.
    newer = Window.partitionBy("pkey").orderBy(F.col("version").desc()).rowsBetween(Window.unboundedPreceding, 0)
    wide = versions.select(
        "pkey", "version", F.element_at(names, F.col("_writer") + 1).alias("writer"), "write_ts",
        *[F.min(f"_h{i}").over(newer).alias(f"_v{i}") for i in range(len(nodes))],
    )
    pairs = F.array(*[F.struct(F.lit(n).alias("target"), F.col(f"_v{i}").alias("visible_ts"))
                      for i, n in enumerate(nodes)])
    return (
        wide.select("pkey", "version", "writer", "write_ts", F.explode(pairs).alias("p"))
        .where(F.col("p.target") != F.col("writer"))
        .select(
            "pkey", "version", "write_ts", F.col("p.target").alias("target"), F.col("p.visible_ts").alias("visible_ts"),
            F.when(  # greatest() skips nulls: never-visible pairs must keep a null lag
                F.col("p.visible_ts").isNotNull(),
                F.greatest((F.col("p.visible_ts") - F.col("write_ts")) / 1e6, F.lit(0.0)),
            ).alias("lag_ms"),
        )
    )


def write_convergence(ranked: DataFrame, vis: DataFrame) -> DataFrame:
    """Per write: `converged_ts`, when every node held it (the write's own ts on a one-node cluster), null if
    some node never did; `targets` and `visible_on` count the other nodes. Columns: pkey, version, writer,
    write_ts, writeback, targets, visible_on, converged_ts."""
    per_write = vis.groupBy("pkey", "version").agg(
        F.count(F.lit(1)).alias("targets"),
        F.count("visible_ts").alias("visible_on"),
        F.max("visible_ts").alias("last_visible_ts"),
    )
    targets = F.coalesce("targets", F.lit(0))
    visible_on = F.coalesce("visible_on", F.lit(0))
    return (
        ranked.select("pkey", "version", F.col("node").alias("writer"), F.col("ts").alias("write_ts"), "writeback")
        .join(per_write.hint("shuffle_hash"), ["pkey", "version"], "left")
        .select(
            "pkey", "version", "writer", "write_ts", "writeback",
            targets.alias("targets"), visible_on.alias("visible_on"),
            F.when(
                visible_on == targets, F.greatest(F.coalesce("last_visible_ts", "write_ts"), F.col("write_ts"))
            ).alias("converged_ts"),
        )
    )


def _fraction(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)) / F.count(F.lit(1))


def pbs_curve(vis: DataFrame, deltas_ms: Sequence[float] = DELTAS_MS) -> DataFrame:
    """Per phase (and `all`): pairs, and for each Δ in the grid the fraction of (write, other node) pairs
    visible within Δ ms of the write; pairs never visible count in the denominator. Columns: phase, pairs,
    d_<i> for the i-th Δ. `vis` needs a `phase` column (phases.with_phase)."""
    aggs = [F.count(F.lit(1)).alias("pairs")] + [
        _fraction(F.col("lag_ms") <= d).alias(f"d_{i}") for i, d in enumerate(deltas_ms)
    ]
    return vis.rollup("phase").agg(*aggs).withColumn("phase", F.coalesce("phase", F.lit("all")))


def lag_quantiles(vis: DataFrame, quantiles: Sequence[float] = QUANTILES) -> DataFrame:
    """Per phase (and `all`): pairs, visible pairs, visible fraction, the lag quantiles (p50, p99, p99.9, over
    the visible pairs; percentile_approx, exact for up to 10,000 values) and the max lag."""
    return (
        vis.rollup("phase")
        .agg(
            F.count(F.lit(1)).alias("pairs"),
            F.count("lag_ms").alias("visible"),
            F.percentile_approx("lag_ms", list(quantiles), 10_000).alias("q"),
            F.max("lag_ms").alias("max_ms"),
        )
        .select(
            F.coalesce("phase", F.lit("all")).alias("phase"),
            "pairs",
            "visible",
            (F.col("visible") / F.col("pairs")).alias("visible_fraction"),
            *[F.col("q")[i].alias(_qname(q)) for i, q in enumerate(quantiles)],
            "max_ms",
        )
    )


def _qname(q: float) -> str:
    return "p" + f"{q * 100:g}".replace(".", "_") + "_ms"


def write_figures(converged: DataFrame) -> DataFrame:
    """Per phase (`converged` with a `phase` column): writes, writes never visible on every node, write-backs."""
    return converged.groupBy("phase").agg(
        F.count(F.lit(1)).alias("writes"),
        F.sum(F.when(F.col("converged_ts").isNull(), 1).otherwise(0)).alias("never_converged"),
        F.sum(F.when(F.col("writeback"), 1).otherwise(0)).alias("writebacks"),
    )
