"""Sibling episodes per node and key, and how they were resolved."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events, siblings
from tests.spark.conftest import events_of
from tests.spark.logs import apply, pkey, ts, write

LINES = [
    # n1, key k: siblings from 10 (2, then 3) until an apply leaves one value at 50; again from 100 until n1's
    # own write-back at 130.
    apply("n1", 10, "k", "n2", 1, siblings=2), apply("n1", 20, "k", "n3", 1, siblings=3),
    apply("n1", 50, "k", "n2", 2, siblings=1),
    apply("n1", 100, "k", "n2", 3, siblings=2), write("n1", 130, "k", 1, writeback=True),
    # n2, key k: never resolved
    apply("n2", 15, "k", "n3", 1, siblings=2),
    # n2, key j: one value only
    apply("n2", 15, "j", "n3", 2, siblings=1),
    # n3, key k: resolved by a plain local write (its earlier write and later apply change nothing)
    write("n3", 5, "k", 1), apply("n3", 12, "k", "n2", 1, siblings=2), write("n3", 40, "k", 2),
    apply("n3", 60, "k", "n2", 5),
    # n4, key k: a write and an apply leave one value at the same moment: the apply (the first event of that
    # moment) resolves it
    apply("n4", 10, "k", "n2", 1, siblings=2), write("n4", 30, "k", 1), apply("n4", 30, "k", "n3", 2),
    apply("n4", 31, "k", "n3", 3),
    write("n2", 500, "j", 1),
]


def test_sibling_episodes(spark: SparkSession) -> None:
    ev = events_of(spark, LINES)
    got = siblings.sibling_episodes(events.applies(ev), events.writes(ev))
    assertDataFrameEqual(
        got,
        [
            Row(node="n1", pkey=pkey("k"), start_ts=ts(10), max_siblings=3, resolved_ts=ts(50), resolved_by="apply",
                duration_ms=40.0),
            Row(node="n1", pkey=pkey("k"), start_ts=ts(100), max_siblings=2, resolved_ts=ts(130),
                resolved_by="writeback", duration_ms=30.0),
            Row(node="n2", pkey=pkey("k"), start_ts=ts(15), max_siblings=2, resolved_ts=None, resolved_by=None,
                duration_ms=None),
            Row(node="n3", pkey=pkey("k"), start_ts=ts(12), max_siblings=2, resolved_ts=ts(40), resolved_by="write",
                duration_ms=28.0),
            Row(node="n4", pkey=pkey("k"), start_ts=ts(10), max_siblings=2, resolved_ts=ts(30), resolved_by="apply",
                duration_ms=20.0),
        ],
    )
    assertDataFrameEqual(
        siblings.sibling_summary(got),
        [Row(keys_with_siblings=1, episodes=5, unresolved=1, p50_ms=28.0, p99_ms=40.0, max_ms=40.0, by_apply=2,
             by_write=1, by_writeback=1)],
    )
