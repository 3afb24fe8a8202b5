"""The one SparkSession builder of the package (the command, spark-submit and the tests use it)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import SparkSession

APP_NAME = "vmqpy-convergence"

# Local runs stay on the loopback interface and start no web UI.
LOCAL_CONF: dict[str, str] = {
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
}
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # The report partitions the lines by key once (events.for_report) and caches them; every per-key join,
    # aggregation and window then runs on that partitioning without another shuffle. Adaptive execution would
    # hide the partitioning of a cached table (and shuffle again), so it is off; joins may use a partitioning on
    # part of their keys.
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.requireAllClusterKeysForCoPartition": "false",
    # Cached tables uncompressed: building compressed columns costs more CPU than the memory saved is worth
    # (what does not fit in memory goes to disk).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # The throughput collector: the report is one batch job, and G1's concurrent work cost about a fifth more CPU
    # on ten million lines (docs/performance.md). Only read when the session starts its own JVM.
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
}


def build_session(
    master: str | None = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = APP_NAME,
) -> SparkSession:
    """A session on `master` (None: the master spark-submit chose). A local master gets LOCAL_CONF; `conf`
    overrides everything. The caller stops the session."""
    builder = SparkSession.builder.appName(app_name)
    settings = dict(DEFAULT_CONF)
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            settings.update(LOCAL_CONF)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the JVM's own address lookups stay local
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet_global_windows(spark)
    return spark


def _quiet_global_windows(spark: SparkSession) -> None:
    """The partition and final-read windows run over a few rows on purpose: silence Spark's warning that a
    window without PARTITION BY moves all data to one partition."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.sql.execution.window.WindowExec", jvm.org.apache.logging.log4j.Level.ERROR
        )
    except Exception:  # a session without a local JVM (Spark Connect): keep the warning
        pass
