"""Anti-entropy efficiency per node and over the cluster, exchange results, garbage collection."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events, exchanges
from tests.spark.conftest import events_of
from tests.spark.logs import exchange, gc, write

LINES = [
    exchange("n1", 0, "n2", received=10, repaired=5, sent=100, got=900, duration=0.02),
    exchange("n1", 60_000, "n3", result="timeout", sent=50, got=0, duration=5.0),
    write("n1", 120_000, "a", 1),  # n1's log spans 2 minutes
    exchange("n2", 0, "n1", received=0, sent=30, got=20, duration=0.01),
    gc("n2", 60_000, 3, 1), gc("n2", 30_000, 2),  # n2's log spans 1 minute
    exchange("n3", 0, "n1", result="peer_unreachable", sent=0, got=0, duration=0.0),  # n3's spans 0 minutes
]


def test_exchange_efficiency(spark: SparkSession) -> None:
    ev = events_of(spark, LINES)
    got = exchanges.exchange_efficiency(events.exchanges(ev), events.node_spans(ev))
    assertDataFrameEqual(
        got.select("node", "exchanges", "ok", "objects_received", "repaired", "bytes", "per_minute",
                   "bytes_per_repaired", "hit_ratio", "max_duration_s"),
        [
            Row(node="n1", exchanges=2, ok=1, objects_received=10, repaired=5, bytes=1050, per_minute=1.0,
                bytes_per_repaired=210.0, hit_ratio=0.5, max_duration_s=5.0),
            Row(node="n2", exchanges=1, ok=1, objects_received=0, repaired=0, bytes=50, per_minute=1.0,
                bytes_per_repaired=None, hit_ratio=None, max_duration_s=0.01),
            Row(node="n3", exchanges=1, ok=0, objects_received=0, repaired=0, bytes=0, per_minute=None,
                bytes_per_repaired=None, hit_ratio=None, max_duration_s=0.0),
            # 4 exchanges over 3 node-minutes
            Row(node="all", exchanges=4, ok=2, objects_received=10, repaired=5, bytes=1100, per_minute=4 / 3,
                bytes_per_repaired=220.0, hit_ratio=0.5, max_duration_s=5.0),
        ],
    )


def test_exchange_results_and_gc(spark: SparkSession) -> None:
    ev = events_of(spark, LINES)
    assertDataFrameEqual(
        exchanges.exchange_results(events.exchanges(ev)),
        [Row(result="ok", exchanges=2), Row(result="timeout", exchanges=1),
         Row(result="peer_unreachable", exchanges=1)],
    )
    assertDataFrameEqual(
        exchanges.gc_totals(events.gcs(ev)), [Row(node="n2", runs=2, dots_pruned=5, keys_deleted=1)]
    )
