"""One local SparkSession for the whole test session (Spark start-up is the slow part)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_analytics.events import normalize
from spark_analytics.schema import CORRUPT, LOG_SCHEMA
from spark_analytics.session import build_session

TEST_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",  # tiny inputs: fewer jobs per query
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", TEST_CONF, app_name="vmqpy-spark-tests")
    yield session
    session.stop()


def events_of(spark: SparkSession, lines: Iterable[Mapping[str, Any] | str]) -> DataFrame:
    """Normalized events (events.normalize) of log lines given as dicts or raw text, without files."""
    text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    raw = (
        spark.read.schema(LOG_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(spark.sparkContext.parallelize(text, 1))
    )
    return normalize(raw)
