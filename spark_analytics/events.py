"""From raw log lines to typed event tables. Every function is a `DataFrame -> DataFrame` transform.

`normalize` flattens a raw line (LOG_SCHEMA) into columns and gives every line a `status`: `ok`, or why it is
left out (`corrupt`, `missing_field`, `unsupported_schema`, `unknown_event`). The per-event tables take the `ok`
lines only. A key is identified by `pkey` = `prefix + " " + key as compact JSON` (`retain ["","sensors/1"]`);
a dot by (`dot_node`, `dot_counter`), the writer's replica id `NAME#INCARNATION` and its counter.

`for_report` is `normalize` as the report runs it on large logs: `pkey` and `dot_node` are 64-bit hashes (they
are only compared for equality), and only the columns the report reads are kept; `key_names` maps the hashes
back to readable keys.
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_analytics.schema import CORRUPT, EVENTS, SCHEMA_VERSION

OK = "ok"
QUEUE_REPLICA_COLUMNS = (
    "under_replicated", "sessions", "messages", "writes", "peak_sessions", "peak_messages", "peak_writes",
)


def _long_at(array: str, index: int) -> Column:
    """Element `index` (1-based) of an array of strings as a long; null when missing or not a number."""
    return F.expr(f"try_cast(try_element_at({array}, {index}) AS BIGINT)")


def _missing(*names: str) -> Column:
    return reduce(operator.or_, [F.col(n).isNull() for n in names])


def normalize(raw: DataFrame, hashed_keys: bool = False) -> DataFrame:
    """One row per non-empty line: flattened, typed columns and `status`.

    `pkey` is readable (`retain ["","sensors/1"]`) unless `hashed_keys`: then it is the 64-bit xxhash of the
    prefix and the key, which makes the large tables of the report much cheaper to cache, shuffle and sort
    (two keys of a run share a hash with a probability of about keys^2 / 2^65)."""
    df = raw.select(
        "schema",
        "ts",
        "node",
        "event",
        _long_at("hlc", 1).alias("hlc_wall"),
        _long_at("hlc", 2).alias("hlc_logical"),
        F.expr("try_element_at(hlc, 3)").alias("hlc_node"),
        "prefix",
        F.col("key").alias("_key"),
        F.expr("try_element_at(dot, 1)").alias("dot_node"),
        _long_at("dot", 2).alias("dot_counter"),
        "op",
        (F.col("op") == "delete").alias("delete"),
        F.coalesce("writeback", F.lit(False)).alias("writeback"),
        "origin",
        "via",
        "siblings",
        "peer",
        "result",
        "rounds",
        "dots_asked",
        "objects_received",
        "repaired",
        "gaps",
        "bytes_sent",
        "bytes_received",
        "duration",
        "hit_ratio",
        "dots_pruned",
        "keys_deleted",
        "members",
        "groups",
        "ready",
        "majority",
        *QUEUE_REPLICA_COLUMNS,
        F.col(CORRUPT).isNotNull().alias("_corrupt"),
    )
    event = F.col("event")
    status = (
        F.when(F.col("_corrupt"), "corrupt")
        .when(_missing("schema", "ts", "node", "event"), "missing_field")
        .when(F.col("schema") != SCHEMA_VERSION, "unsupported_schema")
        .when(~event.isin(*EVENTS), "unknown_event")
        .when(
            (event == "md_write")
            & _missing("prefix", "_key", "dot_node", "dot_counter", "hlc_wall", "hlc_logical", "op"),
            "missing_field",
        )
        .when(
            (event == "md_apply") & _missing("prefix", "_key", "dot_node", "dot_counter", "siblings"),
            "missing_field",
        )
        .when((event == "md_exchange") & _missing("peer", "result"), "missing_field")
        .when((event == "cluster_view") & _missing("groups"), "missing_field")
        .when((event == "queue_replicas") & _missing("under_replicated"), "missing_field")
        .otherwise(OK)
    )
    has_key = F.col("prefix").isNotNull() & F.col("_key").isNotNull()
    if hashed_keys:
        pkey = F.when(has_key, F.xxhash64("prefix", "_key"))
    else:
        pkey = F.when(has_key, F.concat_ws(" ", "prefix", F.to_json("_key")))
    return df.withColumn("status", status).withColumn("pkey", pkey).drop("_corrupt", "_key")


def line_stats(events: DataFrame) -> DataFrame:
    """Lines per (status, event, node) with their first and last `ts`: the run's metadata in one pass."""
    return events.groupBy("status", "event", "node").agg(
        F.count(F.lit(1)).alias("lines"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")
    )


def node_spans(events: DataFrame) -> DataFrame:
    """Per node: first and last `ts` and the number of valid events (node, first_ts, last_ts, events)."""
    return (
        events.where(F.col("status") == OK)
        .groupBy("node")
        .agg(F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"), F.count(F.lit(1)).alias("events"))
    )


def _of(events: DataFrame, event: str) -> DataFrame:
    return events.where((F.col("status") == OK) & (F.col("event") == event))


def writes(events: DataFrame) -> DataFrame:
    """md_write lines: node (the writer), ts, pkey, dot, hlc, delete (the write deletes the key), writeback, and
    `dot_name`: the dot's replica id as written (`dot_node` is a hash of it in for_report's table), which orders
    two versions with equal hlc stamps."""
    name = F.col(DOT_NAME) if DOT_NAME in events.columns else F.col("dot_node").alias(DOT_NAME)
    return _of(events, "md_write").select(
        "node", "ts", "pkey", "dot_node", "dot_counter", "hlc_wall", "hlc_logical", "hlc_node", "delete", "writeback",
        name,
    )


def applies(events: DataFrame) -> DataFrame:
    """md_apply lines: node (where applied), ts, pkey, dot, via, siblings."""
    return _of(events, "md_apply").select("node", "ts", "pkey", "dot_node", "dot_counter", "via", "siblings")


def _flat(events: DataFrame) -> DataFrame:
    """`events` with the fields that for_report packs into `extra` as columns again (normalize's layout)."""
    if EXTRA not in events.columns:
        return events
    return events.select(*[c for c in events.columns if c != EXTRA], *[F.col(f"{EXTRA}.{c}").alias(c) for c in
                                                                       EXTRA_COLUMNS])


def exchanges(events: DataFrame) -> DataFrame:
    """md_exchange lines (null counters read as 0)."""
    counters = ["rounds", "dots_asked", "objects_received", "repaired", "gaps", "bytes_sent", "bytes_received"]
    return _flat(_of(events, "md_exchange")).select(
        "node",
        "ts",
        "peer",
        "result",
        *[F.coalesce(c, F.lit(0)).alias(c) for c in counters],
        "duration",
    )


def gcs(events: DataFrame) -> DataFrame:
    """md_gc lines."""
    return _flat(_of(events, "md_gc")).select(
        "node", "ts", F.coalesce("dots_pruned", F.lit(0)).alias("dots_pruned"),
        F.coalesce("keys_deleted", F.lit(0)).alias("keys_deleted"),
    )


def replica_states(events: DataFrame) -> DataFrame:
    """queue_replicas lines: where a node's window of under-replication starts or ends (counts read as 0)."""
    return _flat(_of(events, "queue_replicas")).select(
        "node", "ts", "under_replicated",
        *[F.coalesce(c, F.lit(0)).alias(c) for c in QUEUE_REPLICA_COLUMNS if c != "under_replicated"],
    )


def views(events: DataFrame) -> DataFrame:
    """cluster_view lines with `n_groups`, the number of groups in the node's view."""
    return _flat(_of(events, "cluster_view")).select(
        "node", "ts", "groups", F.size("groups").alias("n_groups"), "ready", "majority"
    )


# What the report keeps of every line: the columns of md_write and md_apply lines (nearly all lines) as they are,
# the fields of the few other lines packed into one struct column, EXTRA. An in-memory cached column records
# each null with 4 bytes, so sixteen columns that are null on nearly every line would cost more than the data.
DOT_NAME = "dot_name"
KEY_COLUMNS = (
    "ts", "node", "event", "status", "pkey", "hlc_wall", "hlc_logical", "hlc_node", "dot_node", "dot_counter",
    "delete", "writeback", "via", "siblings", DOT_NAME,
)
EXTRA = "extra"
EXTRA_COLUMNS = (
    "peer", "result", "rounds", "dots_asked", "objects_received", "repaired", "gaps", "bytes_sent", "bytes_received",
    "duration", "dots_pruned", "keys_deleted", "groups", "ready", "majority", *QUEUE_REPLICA_COLUMNS,
)
REPORT_COLUMNS = (*KEY_COLUMNS, EXTRA)


def other_events(events: DataFrame) -> DataFrame:
    """The md_exchange, md_gc, cluster_view and queue_replicas lines of for_report's table, in one partition."""
    return events.where(F.col(EXTRA).isNotNull()).coalesce(1)


def for_report(raw: DataFrame, partitions: int | None = None) -> DataFrame:
    """normalize as the report needs it: `pkey` and `dot_node` hashed (they are only compared for equality), the
    columns of REPORT_COLUMNS, and with `partitions` the lines hash-partitioned by `pkey`.

    Every per-key transform (versions, visibility, staleness, siblings) groups, joins or orders within a key: with
    the lines of a key in one partition they all run without another shuffle (the session lets a join use a
    partitioning on part of its keys, session.DEFAULT_CONF). The lines without a key go to one partition."""
    ev = normalize(raw, hashed_keys=True)
    rare = F.col("event").isin("md_exchange", "md_gc", "cluster_view", "queue_replicas")
    # Only md_write lines are ordered, by their hlc and then by their dot as written (not by its hash).
    write_only = ("hlc_wall", "hlc_logical", "hlc_node")
    out = ev.select(
        *[c for c in KEY_COLUMNS if c not in ("dot_node", DOT_NAME, *write_only)],
        *[F.when(F.col("event") == "md_write", F.col(c)).alias(c) for c in write_only],
        F.when(F.col("event") == "md_write", F.col("dot_node")).alias(DOT_NAME),
        F.when(F.col("dot_node").isNotNull(), F.xxhash64("dot_node")).alias("dot_node"),
        F.when(rare, F.struct(*EXTRA_COLUMNS)).alias(EXTRA),
    ).select(*REPORT_COLUMNS)
    return out if partitions is None else out.repartition(partitions, "pkey")


def key_names(raw: DataFrame) -> DataFrame:
    """(pkey, name): the readable name of every hashed key (for_report) written in the logs."""
    return (
        raw.where((F.col("event") == "md_write") & F.col("prefix").isNotNull() & F.col("key").isNotNull())
        .select(F.xxhash64("prefix", "key").alias("pkey"), F.concat_ws(" ", "prefix", F.to_json("key")).alias("name"))
        .distinct()
    )
