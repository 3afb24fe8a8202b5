"""Partitions and heals from cluster_view lines, and the phase of a moment."""

from __future__ import annotations

from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_analytics import events, phases
from tests.spark.conftest import events_of
from tests.spark.logs import ts, view

ALL = [["n1", "n2", "n3"]]
SPLIT = [["n1", "n2"], ["n3"]]
VIEWS = [
    *(view(n, 0, ALL) for n in ("n1", "n2", "n3")),
    # partition 1: n3 cut off from 1000 (its own view first) until n3 sees everyone again at 3050
    view("n3", 1000, [["n3"], ["n1", "n2"]]), view("n1", 1010, SPLIT), view("n2", 1020, SPLIT),
    view("n1", 3000, ALL), view("n2", 3010, ALL), view("n3", 3050, ALL),
    # partition 2: only n2's view splits, 5000 to 6000
    view("n2", 5000, SPLIT), view("n2", 6000, ALL),
    # partition 3 never heals
    view("n1", 8000, SPLIT),
]


def test_split_counts(spark: SparkSession) -> None:
    got = phases.split_counts(events.views(events_of(spark, VIEWS))).where(F.col("ts") >= ts(1000))
    assertDataFrameEqual(
        got.select("ts", "split_nodes", "prev_split_nodes"),
        [Row(ts=ts(t), split_nodes=s, prev_split_nodes=p) for t, s, p in [
            (1000, 1, 0), (1010, 2, 1), (1020, 3, 2), (3000, 2, 3), (3010, 1, 2), (3050, 0, 1),
            (5000, 1, 0), (6000, 0, 1), (8000, 1, 0),
        ]],
    )


def test_partitions(spark: SparkSession) -> None:
    assertDataFrameEqual(
        phases.partitions(events.views(events_of(spark, VIEWS))),
        [Row(partition=1, start_ts=ts(1000), end_ts=ts(3050), start_node="n3", start_groups=[["n3"], ["n1", "n2"]]),
         Row(partition=2, start_ts=ts(5000), end_ts=ts(6000), start_node="n2", start_groups=SPLIT),
         Row(partition=3, start_ts=ts(8000), end_ts=None, start_node="n1", start_groups=SPLIT)],
    )


def test_first_joined_is_the_first_view_with_other_members(spark: SparkSession) -> None:
    lines = [view("n1", 0, [["n1"]]), view("n2", 10, [["n2"]]), view("n2", 500, [["n2"], ["n1"]]),
             view("n2", 502, [["n1", "n2"]]), view("n1", 503, [["n1", "n2"]]), view("n3", 900, [["n3"]])]
    assertDataFrameEqual(phases.first_joined(events.views(events_of(spark, lines))),
                         [Row(node="n1", joined_ts=ts(503)), Row(node="n2", joined_ts=ts(500))])


def test_no_partition_without_a_split_view(spark: SparkSession) -> None:
    assert phases.partitions(events.views(events_of(spark, VIEWS[:3]))).count() == 0


def test_phase_column(spark: SparkSession) -> None:
    intervals = [(ts(1000), ts(3050)), (ts(5000), ts(6000)), (ts(8000), None)]
    cases = [(500, "normal"), (1000, "partition"), (3049, "partition"), (3050, "after_heal"), (4049, "after_heal"),
             (4050, "normal"), (5500, "partition"), (6500, "after_heal"), (7000, "normal"), (9000, "partition")]
    df = spark.createDataFrame([(ts(t),) for t, _ in cases], "write_ts long")
    assertDataFrameEqual(
        phases.with_phase(df, intervals, after_heal_s=1.0),
        [Row(write_ts=ts(t), phase=p) for t, p in cases],
    )
    assert phases.with_phase(df, [], after_heal_s=1.0).where(F.col("phase") != "normal").count() == 0
