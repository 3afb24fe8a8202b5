"""Siblings: concurrent values of a key, and how long they last.

On node N, a *sibling episode* of key K starts at an md_apply with `siblings` > 1 after which N held one value
(or none); it ends (is resolved) at N's next event on K that leaves one value: an md_apply with `siblings` <= 1
(typically the write-back of the owner) or N's own md_write of K (a write replaces every version it holds;
`writeback` marks the store's own resolution).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def sibling_episodes(applies: DataFrame, writes: DataFrame) -> DataFrame:
    """One row per episode: node, pkey, start_ts, max_siblings, resolved_ts (null: still unresolved at the end
    of the logs), resolved_by (`apply`, `write` or `writeback`), duration_ms."""
    return episodes_of(sibling_events(applies, writes))


def sibling_events(applies: DataFrame, writes: DataFrame) -> DataFrame:
    """The events of every (node, key) that had siblings, from its first siblings on: node, pkey, ts, sib,
    siblings, kind (`apply`, `write`, `writeback`), last_ts (its last siblings). The input of `episodes_of`, which
    reads it twice: the report caches it."""
    stream = applies.select(
        "node", "pkey", "ts", (F.col("siblings") > 1).alias("sib"), "siblings", F.lit("apply").alias("kind")
    ).unionByName(
        writes.select(
            "node", "pkey", "ts", F.lit(False).alias("sib"), F.lit(1).cast("long").alias("siblings"),
            F.when(F.col("writeback"), "writeback").otherwise("write").alias("kind"),
        )
    )
    span = applies.where(F.col("siblings") > 1).groupBy("node", "pkey").agg(
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")
    )
    return (
        stream.join(span.hint("shuffle_hash"), ["node", "pkey"])
        .where(F.col("ts") >= F.col("first_ts"))
        .select(*stream.columns, "last_ts")
    )


def episodes_of(events: DataFrame) -> DataFrame:
    """sibling_episodes from sibling_events."""
    # Only the events of a (node, key) up to its last siblings matter, and after them only the event that ends
    # that episode: the first of each kind after it (a hash aggregation, no sort). The window below then sorts a
    # small part of the logs.
    columns = ["node", "pkey", "ts", "sib", "siblings", "kind"]
    inside = events.where(F.col("ts") <= F.col("last_ts")).select(*columns)
    kinds = ("apply", "write", "writeback")  # the order of events at the same ts, as in the window below
    after = events.where(F.col("ts") > F.col("last_ts")).groupBy("node", "pkey").agg(
        *[F.min(F.when(F.col("kind") == k, F.col("ts"))).alias(f"_{k}") for k in kinds]
    )
    end_ts = F.least(*[F.col(f"_{k}") for k in kinds])
    end_kind = reduce(lambda c, k: c.when(F.col(f"_{k}") == end_ts, k), kinds[1:],
                      F.when(F.col(f"_{kinds[0]}") == end_ts, kinds[0]))
    ends = after.select(
        "node", "pkey", end_ts.alias("ts"), F.lit(False).alias("sib"), F.lit(1).cast("long").alias("siblings"),
        end_kind.alias("kind"),
    )
    stream = inside.unionByName(ends)
    order = Window.partitionBy("node", "pkey").orderBy("ts", "kind")
    prev_sib = F.coalesce(F.lag("sib").over(order), F.lit(False))
    # Number the episodes (a row with siblings after one without starts one); an episode's rows are its
    # start, its other rows with siblings, then the row that ends it and the rows up to the next start.
    marked = (
        stream.withColumn("starts", F.col("sib") & ~prev_sib)
        .withColumn("ends", ~F.col("sib") & prev_sib)
        .withColumn("episode", F.sum(F.col("starts").cast("int")).over(order.rowsBetween(Window.unboundedPreceding, 0)))
        .where(F.col("episode") > 0)
    )
    return (
        marked.groupBy("node", "pkey", "episode")
        .agg(
            F.min(F.when(F.col("starts"), F.col("ts"))).alias("start_ts"),
            F.max(F.when(F.col("sib"), F.col("siblings"))).alias("max_siblings"),
            F.min(F.when(F.col("ends"), F.struct("ts", "kind"))).alias("end"),
        )
        .select(
            "node", "pkey", "start_ts", "max_siblings",
            F.col("end.ts").alias("resolved_ts"), F.col("end.kind").alias("resolved_by"),
            ((F.col("end.ts") - F.col("start_ts")) / 1e6).alias("duration_ms"),
        )
    )


def sibling_summary(episodes: DataFrame) -> DataFrame:
    """One row: keys with siblings, episodes, unresolved episodes, p50/p99/max resolution time (ms), and how
    many episodes each kind of event resolved (by_apply, by_write, by_writeback)."""
    kind = F.col("resolved_by")
    return episodes.agg(
        F.countDistinct("pkey").alias("keys_with_siblings"),
        F.count(F.lit(1)).alias("episodes"),
        F.count(F.when(F.col("resolved_ts").isNull(), 1)).alias("unresolved"),
        F.percentile_approx("duration_ms", [0.5, 0.99], 10_000).alias("q"),
        F.max("duration_ms").alias("max_ms"),
        *[F.count(F.when(kind == k, 1)).alias(f"by_{k}") for k in ("apply", "write", "writeback")],
    ).select(
        "keys_with_siblings", "episodes", "unresolved",
        F.col("q")[0].alias("p50_ms"), F.col("q")[1].alias("p99_ms"), "max_ms",
        "by_apply", "by_write", "by_writeback",
    )
