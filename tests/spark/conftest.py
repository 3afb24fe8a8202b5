"""One local SparkSession for the whole test session (Spark start-up is the slow part)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_analytics.events import normalize
from spark_analytics.readers import read_logs
from spark_analytics.session import build_session

TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",  # tiny inputs: fewer jobs per query
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    # short-lived JVM on small data: the C1 compiler warms up sooner, one GC thread
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # Interpreted expressions, no generated Java: on inputs of a few hundred lines compiling each query's code
    # costs more than running it (tests/spark alone: 221 s of CPU with generated code and four partitions, 163 s
    # without and two). The report itself keeps Spark's defaults; the standalone-cluster test (`make test-long`)
    # runs it with them.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", TEST_CONF, app_name="vmqpy-spark-tests")
    yield session
    session.stop()


_LOG_DIR = Path(tempfile.mkdtemp(prefix="vmqpy-spark-tests-"))
atexit.register(shutil.rmtree, _LOG_DIR, True)


def events_of(spark: SparkSession, lines: Iterable[Mapping[str, Any] | str]) -> DataFrame:
    """Normalized events (events.normalize) of log lines given as dicts or raw text: written to a file and
    read like the report reads the logs."""
    text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    fd, name = tempfile.mkstemp(suffix=".log", dir=_LOG_DIR)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
    return read_logs(spark, [Path(name)]).transform(normalize)
