"""Explicit schemas of the two inputs: the replication log (docs/replication-log.md) and a chaos history
(docs/analytics.md). Both are read with these schemas, never inferred: a line that does not fit is counted
as malformed, never fatal."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

SCHEMA_VERSION = 1
CORRUPT = "_corrupt_record"

EVENTS = ("md_write", "md_apply", "md_exchange", "md_gc", "cluster_view", "queue_replicas")

# Arrays that mix numbers and strings ([wall_ms, logical, node], [node, counter]) are read as arrays of strings:
# Spark's JSON reader keeps a number's text for a string element; the numbers are cast afterwards.
LOG_SCHEMA = StructType(
    [
        StructField("schema", LongType()),
        StructField("ts", LongType()),
        StructField("node", StringType()),
        StructField("hlc", ArrayType(StringType())),
        StructField("event", StringType()),
        # md_write / md_apply
        StructField("prefix", StringType()),
        StructField("key", ArrayType(StringType())),
        StructField("dot", ArrayType(StringType())),
        StructField("op", StringType()),
        StructField("value", StringType()),
        StructField("context", MapType(StringType(), LongType())),
        StructField("writeback", BooleanType()),
        StructField("origin", StringType()),
        StructField("via", StringType()),
        StructField("siblings", LongType()),
        # md_exchange
        StructField("peer", StringType()),
        StructField("result", StringType()),
        StructField("rounds", LongType()),
        StructField("dots_asked", LongType()),
        StructField("objects_received", LongType()),
        StructField("repaired", LongType()),
        StructField("gaps", LongType()),
        StructField("bytes_sent", LongType()),
        StructField("bytes_received", LongType()),
        StructField("duration", DoubleType()),
        StructField("hit_ratio", DoubleType()),
        # md_gc
        StructField("dots_pruned", LongType()),
        StructField("keys_deleted", LongType()),
        # cluster_view
        StructField("members", ArrayType(StringType())),
        StructField("reachable", ArrayType(StringType())),
        StructField("groups", ArrayType(ArrayType(StringType()))),
        StructField("ready", BooleanType()),
        StructField("majority", BooleanType()),
        # queue_replicas
        StructField("under_replicated", BooleanType()),
        StructField("sessions", LongType()),
        StructField("messages", LongType()),
        StructField("writes", LongType()),
        StructField("peak_sessions", LongType()),
        StructField("peak_messages", LongType()),
        StructField("peak_writes", LongType()),
        StructField(CORRUPT, StringType()),
    ]
)

# One client operation per line; `value` is kept as JSON text and parsed per operation (OP_VALUE_SCHEMA).
HISTORY_SCHEMA = StructType(
    [
        StructField("type", StringType()),
        StructField("process", StringType()),
        StructField("f", StringType()),
        StructField("value", StringType()),
        StructField("node", StringType()),
        StructField("time", LongType()),
        StructField(CORRUPT, StringType()),
    ]
)

# The union of the `value` objects of every operation (docs/analytics.md, "The history").
OP_VALUE_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("msg", StringType()),
        StructField("retain", BooleanType()),
        StructField("expect", ArrayType(StringType())),
        StructField("client", StringType()),
        StructField("filter", StringType()),
        StructField("msgs", ArrayType(StringType())),
        StructField("retained", MapType(StringType(), StringType())),
        StructField("subscriptions", MapType(StringType(), ArrayType(StringType()))),
    ]
)
