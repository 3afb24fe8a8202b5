"""Convergence after heals and the timeline of divergent keys, from `visibility.write_convergence`.

A key is *divergent* at a moment t when one of its writes was made at or before t and some node does not hold
it (or a newer version) yet at t; it has *converged* when every node holds its newest version.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

_NS = 1_000_000_000


def heal_convergence(converged: DataFrame, parts: DataFrame) -> DataFrame:
    """Per heal (a partition with an end): the keys written before the heal, how many were divergent at the
    heal, how many never converged, when the last one converged and `seconds_to_converge` (null when a key
    never converged, 0 when none was divergent). Columns: partition, start_ts, heal_ts, keys, divergent_at_heal,
    unconverged, last_converged_ts, seconds_to_converge."""
    heals = parts.where(F.col("end_ts").isNotNull()).select(
        "partition", "start_ts", F.col("end_ts").alias("heal_ts")
    )
    newest = (
        converged.join(F.broadcast(heals), F.col("write_ts") < F.col("heal_ts"))
        .groupBy("partition", "start_ts", "heal_ts", "pkey")
        .agg(F.max_by("converged_ts", "version").alias("converged_ts"), F.max("version").alias("version"))
    )
    per_heal = newest.groupBy("partition", "start_ts", "heal_ts").agg(
        F.count(F.lit(1)).alias("keys"),
        F.sum(
            F.when(F.col("converged_ts").isNull() | (F.col("converged_ts") > F.col("heal_ts")), 1).otherwise(0)
        ).alias("divergent_at_heal"),
        F.sum(F.when(F.col("converged_ts").isNull(), 1).otherwise(0)).alias("unconverged"),
        F.max("converged_ts").alias("last_converged_ts"),
    )
    return (
        heals.join(per_heal, ["partition", "start_ts", "heal_ts"], "left")
        .select(
            "partition", "start_ts", "heal_ts",
            F.coalesce("keys", F.lit(0)).alias("keys"),
            F.coalesce("divergent_at_heal", F.lit(0)).alias("divergent_at_heal"),
            F.coalesce("unconverged", F.lit(0)).alias("unconverged"),
            "last_converged_ts",
        )
        .withColumn(
            "seconds_to_converge",
            F.when(
                F.col("unconverged") == 0,
                F.greatest(F.coalesce("last_converged_ts", "heal_ts") - F.col("heal_ts"), F.lit(0)) / 1e9,
            ),
        )
    )


def divergent_seconds(converged: DataFrame, end_ts: int) -> DataFrame:
    """(second, pkey) for every whole second s (epoch seconds) at which the key was divergent: some write with
    write_ts <= s·10⁹ < converged_ts. A write that never converged stays divergent until `end_ts` (the last
    line of the logs) included."""
    until = F.coalesce(F.col("converged_ts"), F.lit(end_ts + 1))
    first = F.expr(f"(write_ts + {_NS - 1}) div {_NS}")  # the first whole second at or after the write
    return (
        converged.select("pkey", "write_ts", until.alias("until"))
        .withColumn("first_s", first)
        .withColumn("last_s", F.expr(f"(until + {_NS - 1}) div {_NS}") - 1)
        .where(F.col("first_s") <= F.col("last_s"))
        .select(F.explode(F.sequence("first_s", "last_s")).alias("second"), "pkey")
        .distinct()
    )


def divergent_timeline(spark: SparkSession, converged: DataFrame, start_ts: int, end_ts: int) -> DataFrame:
    """The number of divergent keys at every whole second from the first to the last line of the logs:
    (second, divergent_keys), zeros included."""
    counts = divergent_seconds(converged, end_ts).groupBy("second").agg(F.count(F.lit(1)).alias("divergent_keys"))
    first_s = -(-start_ts // _NS)
    last_s = end_ts // _NS
    seconds = spark.range(first_s, last_s + 1).select(F.col("id").alias("second"))
    return (
        seconds.join(counts, "second", "left")
        .select("second", F.coalesce("divergent_keys", F.lit(0)).alias("divergent_keys"))
    )
