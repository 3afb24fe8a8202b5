"""Visibility of writes on the other nodes, and its PBS-style curve.

A write W of key K (an md_write line) is *visible* on node N from the first moment N holds W's dot or a newer
version of K: an md_apply on N of a dot of K whose write is at least as new as W, or N's own md_write of such a
version. Versions of a key are ordered by their hlc stamp ([wall_ms, logical, node], then the dot), the order
in which the store resolves them. The *lag* of (W, N) is that moment minus W's `ts`, in milliseconds (0 when
the clocks of two hosts make it negative); a pair that never becomes visible has no lag.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# The PBS grid: Δ in milliseconds.
DELTAS_MS: tuple[float, ...] = (
    0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000,
)
QUANTILES: tuple[float, ...] = (0.5, 0.99, 0.999)
_DOT = ["dot_node", "dot_counter"]


def rank_writes(writes: DataFrame) -> DataFrame:
    """Every distinct write (by dot) with `version`: 1 for the oldest write of its key, by hlc then dot, and
    `newer_ts`: the earliest `ts` of a newer version of the key (null for the newest). Columns: node (the writer),
    ts, pkey, dot_node, dot_counter, delete, writeback, version, newer_ts; (pkey, version) identifies the write
    from here on. Two writes with equal hlc stamps are ordered by their dot (`dot_name` when `writes` has it: the
    replica id as written), then its counter."""
    # Equal hlc stamps: the dot decides, by its replica id as written (`dot_name`; a hash would order them
    # arbitrarily), then its counter.
    name = "dot_name" if "dot_name" in writes.columns else "dot_node"
    order = Window.partitionBy("pkey").orderBy("hlc_wall", "hlc_logical", "hlc_node", name, "dot_counter", "ts")
    same_dot = (F.lag("dot_node").over(order) == F.col("dot_node")) & (
        F.lag("dot_counter").over(order) == F.col("dot_counter")
    )
    return (
        writes.withColumn("_dup", F.coalesce(same_dot, F.lit(False)))
        .where(~F.col("_dup"))
        .select(
            "node", "ts", "pkey", *_DOT, "delete", "writeback",
            F.row_number().over(order).alias("version"),
            # one window, two frames: the rows after this one are the newer versions
            F.min("ts").over(order.rowsBetween(1, Window.unboundedFollowing)).alias("newer_ts"),
        )
    )


def applied_versions(applies: DataFrame, ranked: DataFrame) -> DataFrame:
    """md_apply lines with the version, the `write_ts` and the `newer_ts` (rank_writes) of the write whose dot they
    applied: node, ts, pkey, version, write_ts, newer_ts, via, siblings (inner join: an apply of a dot whose
    md_write is not in the logs is left out, see `unmatched_applies`)."""
    # A hash of each partition's writes, probed by its applies: no sort of the (four times more) applies.
    return applies.join(
        ranked.select("pkey", *_DOT, "version", F.col("ts").alias("write_ts"), "newer_ts").hint("shuffle_hash"),
        ["pkey", *_DOT],
        "inner",
    ).select("node", "ts", "pkey", "version", "write_ts", "newer_ts", "via", "siblings")


def unmatched_applies(applies: DataFrame, ranked: DataFrame) -> DataFrame:
    """md_apply lines whose dot has no md_write in the logs (a lost or missing log)."""
    return applies.join(ranked.select("pkey", *_DOT), ["pkey", *_DOT], "left_anti")


def holdings(ranked: DataFrame, applied: DataFrame) -> DataFrame:
    """When each node came to hold each version: (pkey, node, version, hold_ts, own, delete, writeback) from the
    writer's md_write (`own`, whether it is a delete or a write-back) and every other node's md_apply."""
    own = ranked.select("pkey", "node", "version", F.col("ts").alias("hold_ts"), F.lit(True).alias("own"),
                        "delete", "writeback")
    none = F.lit(None).cast("boolean")
    remote = applied.select("pkey", "node", "version", F.col("ts").alias("hold_ts"), F.lit(False).alias("own"),
                            none.alias("delete"), none.alias("writeback"))
    return own.unionByName(remote)


def version_visibility(held: DataFrame, nodes: Sequence[str]) -> DataFrame:
    """One row per write: pkey, version, writer, write_ts, writeback and `visible_ts`, an array with one element
    per node of `nodes` (in that order): the first moment that node held the write or a newer version of its key
    (null: never). `held` is `holdings`.

    A node that never logged the key (no md_write, no md_apply of it) holds a delete of it from the delete's
    write on: it has nothing of the key, which is what the delete leaves, and it logs nothing when the delete
    reaches it (docs/replication-log.md: an md_apply is logged when the key's versions change). For the same
    reason a node whose newest held version (before a delete) is itself a delete holds the later delete from
    the later of the delete's write and its own earlier delete (and, through it, every version in between).

    One row per version with a column per node (a hash aggregation), then one running minimum per node over the
    versions from the newest down: one sort of the versions of each key. Every write is in `held` through the
    writer's own line."""
    per_node = [F.min(F.when(F.col("node") == n, F.col("hold_ts"))).alias(f"_h{i}") for i, n in enumerate(nodes)]
    # The writer as its index in `nodes`: numbers keep the aggregation a hash aggregation (no sort).
    index = reduce(lambda c, i: c.when(F.col("node") == nodes[i], i), range(1, len(nodes)),
                   F.when(F.col("node") == nodes[0], 0))
    own = F.col("own")
    versions = held.groupBy("pkey", "version").agg(
        F.max(F.when(own, index)).alias("_writer"),
        F.min(F.when(own, F.col("hold_ts"))).alias("write_ts"),
        F.max(F.when(own, F.col("delete"))).alias("_delete"),
        F.max(F.when(own, F.col("writeback"))).alias("writeback"),
        *per_node,
    ).where(F.col("write_ts").isNotNull())
    # Both windows order the versions of a key from the newest down: one sort serves the two.
    newest_first = Window.partitionBy("pkey").orderBy(F.col("version").desc())
    whole_key = newest_first.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    versions = versions.select(
        "pkey", "version", "_writer", "write_ts", "writeback", "_delete",
        *[F.when(F.col("_delete") & F.max(F.col(f"_h{i}").isNotNull().cast("int")).over(whole_key).eqNullSafe(0),
                 F.col("write_ts")).otherwise(F.col(f"_h{i}")).alias(f"_h{i}") for i in range(len(nodes))],
    )
    # A delete that reaches a node whose newest version of the key is a delete changes nothing there and is not
    # logged: the node holds it from its write on, or from its own earlier delete when that came later.
    older = newest_first.rowsBetween(1, Window.unboundedFollowing)

    def after_a_delete(i: int) -> Column:
        held = F.col(f"_h{i}")
        previous = F.first(F.when(held.isNotNull(), F.struct(F.col("_delete").alias("d"), held.alias("h"))),
                           ignorenulls=True).over(older)
        chained = F.when(F.col("_delete") & previous["d"], F.greatest(F.col("write_ts"), previous["h"]))
        return F.least(held, chained).alias(f"_h{i}")  # least() skips nulls

    versions = versions.select(
        "pkey", "version", "_writer", "write_ts", "writeback", *[after_a_delete(i) for i in range(len(nodes))],
    )
    names = F.array(*[F.lit(n) for n in nodes])
    # For each version: the earliest hold on each node of any version at least as new.
    newer = newest_first.rowsBetween(Window.unboundedPreceding, 0)
    return versions.select(
        "pkey", "version", F.element_at(names, F.col("_writer") + 1).alias("writer"), "write_ts", "writeback",
        F.array(*[F.min(f"_h{i}").over(newer) for i in range(len(nodes))]).alias("visible_ts"),
    )


def pairs(versions: DataFrame, nodes: Sequence[str]) -> DataFrame:
    """One row per (write, other node) of `version_visibility`: pkey, version, write_ts, target, visible_ts (null:
    never), lag_ms (null: never); and `phase` when `versions` has one."""
    each = F.array(*[F.struct(F.lit(n).alias("target"), F.col("visible_ts")[i].alias("visible_ts"))
                     for i, n in enumerate(nodes)])
    extra = ["phase"] if "phase" in versions.columns else []
    return (
        versions.select("pkey", "version", "writer", "write_ts", *extra, F.explode(each).alias("p"))
        .where(F.col("p.target") != F.col("writer"))
        .select(
            "pkey", "version", "write_ts", F.col("p.target").alias("target"), F.col("p.visible_ts").alias("visible_ts"),
            F.when(  # greatest() skips nulls: never-visible pairs must keep a null lag
                F.col("p.visible_ts").isNotNull(),
                F.greatest((F.col("p.visible_ts") - F.col("write_ts")) / 1e6, F.lit(0.0)),
            ).alias("lag_ms"),
            *extra,
        )
    )


def visibility(held: DataFrame, nodes: Sequence[str]) -> DataFrame:
    """One row per (write, other node): pkey, version, write_ts, target, visible_ts (null: never), lag_ms
    (null: never). `held` is `holdings`; `nodes` are the cluster's nodes (see `version_visibility`)."""
    return pairs(version_visibility(held, nodes), nodes)


def write_convergence(versions: DataFrame, nodes: Sequence[str]) -> DataFrame:
    """Per write of `version_visibility`: `converged_ts`, when every node held it (the write's own ts on a
    one-node cluster), null if some node never did; `targets` and `visible_on` count the other nodes. Columns:
    pkey, version, writer, write_ts, writeback, targets, visible_on, converged_ts (and `phase` when `versions`
    has one). Computed on the row of the write: no pair is made."""
    other = [F.col("writer") != n for n in nodes]
    seen = [F.when(o, F.col("visible_ts")[i]) for i, o in enumerate(other)]
    targets = reduce(operator.add, [F.when(o, 1).otherwise(0) for o in other])
    visible_on = reduce(operator.add, [F.when(s.isNotNull(), 1).otherwise(0) for s in seen])
    last = seen[0] if len(seen) == 1 else F.greatest(*seen)  # greatest() skips nulls
    extra = ["phase"] if "phase" in versions.columns else []
    return versions.select(
        "pkey", "version", "writer", "write_ts", "writeback",
        targets.alias("targets"), visible_on.alias("visible_on"),
        F.when(visible_on == targets, F.greatest(F.coalesce(last, F.col("write_ts")), F.col("write_ts")))
        .alias("converged_ts"),
        *extra,
    )


# The histogram of lags: 64 cells per doubling of 1 + lag (about 1 % wide), each split at the Δs of the PBS grid.
# A lag's place is cell * _SPLIT + (index of the first Δ at or above it): places increase with the lag.
_CELLS_PER_DOUBLING = 64
_SPLIT = 64


def _place(lag: Column, deltas_ms: Sequence[float]) -> Column:
    """The histogram place of `lag` (null when it is null)."""
    if len(deltas_ms) >= _SPLIT:
        raise ValueError(f"at most {_SPLIT - 1} deltas")
    delta = F.lit(len(deltas_ms))
    for i in reversed(range(len(deltas_ms))):
        delta = F.when(lag <= deltas_ms[i], F.lit(i)).otherwise(delta)
    cell = F.floor(F.log2(lag + 1.0) * _CELLS_PER_DOUBLING)
    return F.when(lag.isNotNull(), cell * _SPLIT + delta)


def lag_histogram(vis: DataFrame, deltas_ms: Sequence[float] = DELTAS_MS) -> DataFrame:
    """The (write, other node) pairs of `vis` (with a `phase` column) counted by phase and histogram place of the
    lag: phase, place (null: never visible; place // 64 is a ~1 % wide range of lags, place % 64 the index of the
    first Δ of the grid at or above the lag), pairs, max_ms (the largest lag there). Places increase with the lag."""
    # The place as a column of a projection (computed once per pair), not as an expression of the grouping.
    placed = vis.select("phase", "lag_ms", _place(F.col("lag_ms"), deltas_ms).alias("place"))
    return placed.groupBy("phase", "place").agg(F.count(F.lit(1)).alias("pairs"), F.max("lag_ms").alias("max_ms"))


def lag_figures(
    vis: DataFrame, deltas_ms: Sequence[float] = DELTAS_MS, quantiles: Sequence[float] = QUANTILES
) -> dict[str, dict[str, Any]]:
    """Per phase (and `all`): pairs, `fractions` (for each Δ of the grid, the fraction of (write, other node)
    pairs visible within Δ ms of the write; pairs never visible count in the denominator: the PBS curve),
    visible pairs, visible fraction, the lag quantiles over the visible pairs (p50_ms, p99_ms, p99_9_ms: the value
    of rank ⌈q·visible⌉, exact) and max_ms. `vis` needs a `phase` column (phases.with_phase).

    Two passes over `vis`: a histogram of the lags by phase and place (lag_histogram) gives the curve, the counts,
    the maximum and the place of each quantile; the second pass sorts only the lags of those few places."""
    groups: dict[str, dict[int | None, list[Any]]] = {}
    for r in lag_histogram(vis, deltas_ms).collect():
        for g in (r["phase"], "all"):
            counts = groups.setdefault(g, {}).setdefault(r["place"], [0, None])
            counts[0] += r["pairs"]
            if r["max_ms"] is not None:
                counts[1] = r["max_ms"] if counts[1] is None else max(counts[1], r["max_ms"])
    figures: dict[str, dict[str, Any]] = {}
    wanted: list[tuple[str, str, int, int]] = []  # (group, quantile name, place, rank in the place)
    for g, places in groups.items():
        total = sum(n for n, _ in places.values())
        seen = sorted((place, n, mx) for place, (n, mx) in places.items() if place is not None)
        visible = sum(n for _, n, _ in seen)
        below = [0] * len(deltas_ms)
        for place, n, _mx in seen:
            for i in range(place % _SPLIT, len(deltas_ms)):
                below[i] += n
        figures[g] = {
            "pairs": total,
            "fractions": [b / total for b in below],
            "visible": visible,
            "visible_fraction": visible / total,
            **{_qname(q): None for q in quantiles},
            "max_ms": max((mx for _, _, mx in seen), default=None),
        }
        for q in quantiles:
            if visible == 0:
                continue
            rank, before = max(1, math.ceil(q * visible)), 0
            for place, n, _mx in seen:
                if before + n >= rank:
                    wanted.append((g, _qname(q), place, rank - before))
                    break
                before += n
    if wanted:
        # The place as a column of a projection, computed once per pair; no filter on it (the optimizer would
        # push it below the projection and evaluate the place's expression, with the lag's, in it again): pairs
        # of other places add nothing to the lists.
        placed = vis.select("phase", "lag_ms", _place(F.col("lag_ms"), deltas_ms).alias("place"))
        picks = []
        for j, (g, _name, place, k) in enumerate(wanted):
            cond = F.col("place") == place
            if g != "all":
                cond = cond & (F.col("phase") == g)
            picks.append(F.element_at(F.array_sort(F.collect_list(F.when(cond, F.col("lag_ms")))), k).alias(f"q{j}"))
        row = placed.agg(*picks).first()
        assert row is not None
        for j, (g, name, _where, _k) in enumerate(wanted):
            figures[g][name] = row[f"q{j}"]
    return figures


def _qname(q: float) -> str:
    return "p" + f"{q * 100:g}".replace(".", "_") + "_ms"


def write_figures(converged: DataFrame) -> DataFrame:
    """Per phase (`converged` with a `phase` column): writes, writes never visible on every node, write-backs."""
    return converged.groupBy("phase").agg(
        F.count(F.lit(1)).alias("writes"),
        F.sum(F.when(F.col("converged_ts").isNull(), 1).otherwise(0)).alias("never_converged"),
        F.sum(F.when(F.col("writeback"), 1).otherwise(0)).alias("writebacks"),
    )
