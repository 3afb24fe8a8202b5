"""Convergence after each heal and the per-second timeline of divergent keys."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark_analytics import convergence

T = 1_795_330_000  # seconds


def s(seconds: float) -> int:
    return T * 1_000_000_000 + round(seconds * 1e9)


# (key, version, written at s, converged at s or None); a version's convergence is never after a newer one's
WRITES = [
    ("k1", 1, 5.0, 5.2), ("k1", 2, 12.0, 21.5),
    ("k2", 1, 15.0, 23.0), ("k2", 2, 19.0, 23.0),
    ("k3", 1, 2.0, 2.1),
    ("k4", 1, 25.0, 26.0),
    ("k6", 1, 35.0, None),
]


@pytest.fixture(scope="module")
def converged(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [(k, v, s(w), None if c is None else s(c)) for k, v, w, c in WRITES],
        "pkey string, version int, write_ts long, converged_ts long",
    )


def test_heal_convergence(spark: SparkSession, converged: DataFrame) -> None:
    parts = spark.createDataFrame(
        [(1, s(10), s(20)), (2, s(30), s(40)), (3, s(50), None)], "partition int, start_ts long, end_ts long"
    )
    assertDataFrameEqual(
        convergence.heal_convergence(converged, parts),
        [
            # before the first heal: k1 (newest converged at 21.5), k2 (23.0), k3 (already at 2.1)
            Row(partition=1, start_ts=s(10), heal_ts=s(20), keys=3, divergent_at_heal=2, unconverged=0,
                last_converged_ts=s(23), seconds_to_converge=3.0),
            # before the second: also k4 (converged before the heal) and k6 (never)
            Row(partition=2, start_ts=s(30), heal_ts=s(40), keys=5, divergent_at_heal=1, unconverged=1,
                last_converged_ts=s(26), seconds_to_converge=None),
        ],
    )


def test_heal_with_nothing_written_before(spark: SparkSession, converged: DataFrame) -> None:
    parts = spark.createDataFrame([(1, s(0), s(1))], "partition int, start_ts long, end_ts long")
    assertDataFrameEqual(
        convergence.heal_convergence(converged, parts),
        [Row(partition=1, start_ts=s(0), heal_ts=s(1), keys=0, divergent_at_heal=0, unconverged=0,
             last_converged_ts=None, seconds_to_converge=0.0)],
    )


def test_divergent_timeline(spark: SparkSession, converged: DataFrame) -> None:
    expected = {2: 1, 5: 1, **dict.fromkeys(range(12, 15), 1), **dict.fromkeys(range(15, 22), 2), 22: 1, 25: 1,
                **dict.fromkeys(range(35, 46), 1)}
    assertDataFrameEqual(
        convergence.divergent_timeline(spark, converged, s(1.5), s(45.5)),
        [Row(second=T + sec, divergent_keys=expected.get(sec, 0)) for sec in range(2, 46)],
    )
