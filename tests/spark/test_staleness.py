"""Staleness in versions: how many newer versions of a key existed when a node applied one."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events, staleness, visibility
from tests.spark.conftest import events_of
from tests.spark.logs import apply, pkey, ts, write

# Key k: version 1 by n1 at 0, version 3 by n3 at 50 (hlc 150), version 2 by n2 at 100 (hlc 100): version 2 is
# written after a newer version (out of order).
LINES = [
    write("n1", 0, "k", 1), write("n3", 50, "k", 1, hlc_ms=150), write("n2", 100, "k", 1),
    apply("n2", 20, "k", "n1", 1),                    # only v1 exists: 0 behind
    apply("n3", 60, "k", "n1", 1),                    # v3 exists: 1 behind
    apply("n2", 60, "k", "n3", 1, via="exchange"),    # the newest (v2, older, comes later): 0 behind
    apply("n3", 95, "k", "n2", 1),                    # before v2's own ts: counted at 100, v3 exists: 1 behind
    apply("n1", 120, "k", "n2", 1, via="exchange"),   # v3 exists: 1 behind
    apply("n1", 200, "k", "n3", 1),                   # the newest: 0 behind
]


def test_out_of_order_writes(spark: SparkSession) -> None:
    ranked = visibility.rank_writes(events.writes(events_of(spark, LINES)))
    assertDataFrameEqual(staleness.out_of_order_writes(ranked), [Row(pkey=pkey("k"), version=2, ts=ts(100))])


def test_staleness(spark: SparkSession) -> None:
    ev = events_of(spark, LINES)
    ranked = visibility.rank_writes(events.writes(ev))
    applied = visibility.applied_versions(events.applies(ev), ranked)
    stale = staleness.staleness(applied, ranked)
    assertDataFrameEqual(
        stale.select("node", "ts", "version", "versions_behind"),
        [Row(node=n, ts=ts(t), version=v, versions_behind=b) for n, t, v, b in [
            ("n2", 20, 1, 0), ("n3", 60, 1, 1), ("n2", 60, 3, 0), ("n3", 95, 2, 1), ("n1", 120, 2, 1),
            ("n1", 200, 3, 0),
        ]],
    )
    assertDataFrameEqual(
        staleness.staleness_counts(stale),
        [Row(via="broadcast", versions_behind=0, applies=2), Row(via="broadcast", versions_behind=1, applies=2),
         Row(via="exchange", versions_behind=0, applies=1), Row(via="exchange", versions_behind=1, applies=1)],
    )


def test_summarize() -> None:
    got = staleness.summarize([("broadcast", 0, 6), ("broadcast", 2, 2), ("exchange", 12, 1), ("exchange", 10, 1)])
    assert got == {
        "by_via": {
            "all": {"applies": 10, "stale": 4, "max_versions_behind": 12, "stale_fraction": 0.4,
                    "mean_versions_behind": 2.6},
            "broadcast": {"applies": 8, "stale": 2, "max_versions_behind": 2, "stale_fraction": 0.25,
                          "mean_versions_behind": 0.5},
            "exchange": {"applies": 2, "stale": 2, "max_versions_behind": 12, "stale_fraction": 1.0,
                         "mean_versions_behind": 11.0},
        },
        "histogram": {"0": 6, "2": 2, "10+": 2},
    }
