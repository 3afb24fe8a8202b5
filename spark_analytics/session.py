"""The one SparkSession builder of the package (the command, spark-submit and the tests use it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
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
    # A person watches the command: no stage bars on the terminal (the command prints its own progress line).
    "spark.ui.showConsoleProgress": "false",
}
DEFAULT_LOG_LEVEL = "WARN"


def build_session(
    master: str | None = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = APP_NAME,
    log_file: Path | None = None,
    log_level: str = DEFAULT_LOG_LEVEL,
) -> SparkSession:
    """A session on `master` (None: the master spark-submit chose). A local master gets LOCAL_CONF; `conf`
    overrides everything. The caller stops the session.

    With `log_file`, the driver's JVM this call starts writes its standard output and error there (log4j's
    console output, JVM warnings, the Python workers' stderr): nothing of Spark reaches the terminal. When a JVM
    already runs (spark-submit, an active session), its output stays where it goes."""
    settings = dict(DEFAULT_CONF)
    if master is not None and master.startswith("local"):
        settings.update(LOCAL_CONF)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the JVM's own address lookups stay local
    settings.update(conf or {})
    # A JVM already runs (an earlier session of this process, or spark-submit's: PYSPARK_GATEWAY_PORT): its
    # output stays where it goes.
    jvm_running = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    if log_file is not None and SparkContext._active_spark_context is None and not jvm_running:
        _start_jvm_logging_to(log_file, master, app_name, settings)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    _quiet_global_windows(spark)
    return spark


def _start_jvm_logging_to(log_file: Path, master: str | None, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the driver's JVM (and its SparkContext) with its stdout and stderr in `log_file`."""
    spark_conf = SparkConf(loadDefaults=True).setAppName(app_name).setAll(list(settings.items()))
    if master is not None:
        spark_conf.setMaster(master)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:  # the JVM keeps its own copy of the descriptor
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": out, "stderr": out})  # type: ignore[no-untyped-call]
    SparkContext(conf=spark_conf, gateway=gateway)


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
