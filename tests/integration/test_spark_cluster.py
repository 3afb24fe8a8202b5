"""The report on a real standalone Spark cluster, not only `local[*]`: a master and one worker started from the
PySpark installation on loopback (`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`),
the report run with `--master spark://127.0.0.1:PORT` as a real process, and its summary.json compared with the
local run's on the same logs. Both daemons are stopped by their PIDs (docs/analytics.md, "On a standalone
Spark cluster")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.ports import free_port, port_open

pytest.importorskip("pyspark")

from tests.spark.logs import write_logs
from tests.spark.runs import clean_history, generated_run

# A long run (`make test-long`, README): a standalone Spark master and worker take about 100 s. `make test` keeps
# the short version: tests/spark runs the same report on `local[2]` against the same logs.
pytestmark = pytest.mark.skipif(os.environ.get("LONG_TESTS") != "1", reason="long run: make test-long (LONG_TESTS=1)")

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
START_DEADLINE_S = 60.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_for(what: str, proc: subprocess.Popen[bytes], ready: Any, log: Path) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"the Spark {what} did not start: {log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1 GB) on 127.0.0.1; yields the master URL."""
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("no Java: the Spark daemons need a JVM (docs/analytics.md, Java)")
    home = spark_home()
    work = tmp_path_factory.mktemp("spark-standalone")
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_LOG_DIR": str(work),
           "SPARK_WORKER_DIR": str(work / "worker"), "PYSPARK_PYTHON": sys.executable}
    port = free_port(HOST)
    spark_class = str(home / "bin" / "spark-class")
    master_log = work / "master.log"
    with master_log.open("wb") as out:
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
             "--webui-port", str(free_port(HOST))],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    worker: subprocess.Popen[bytes] | None = None
    try:
        _wait_for("master", master, lambda: port_open(HOST, port), master_log)
        url = f"spark://{HOST}:{port}"
        worker_log = work / "worker.log"
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", HOST, "--cores", "1",
                 "--memory", "1g", "--webui-port", str(free_port(HOST))],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _wait_for("worker", worker, lambda: "Successfully registered with master" in worker_log.read_text(
            errors="replace"), worker_log)
        yield url
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


def _report(logs: Path, history: Path, out: Path, master: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "spark_analytics", "report", "--logs", str(logs), "--history", str(history),
               "--out", str(out), "--master", master, "--conf", f"spark.driver.host={HOST}",
               "--conf", f"spark.driver.bindAddress={HOST}", "--conf", "spark.executor.memory=768m"]
    done = subprocess.run(command, cwd=str(REPO), capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:] + (out / "spark.log").read_text(errors="replace")[-3000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what differs between two runs of the same logs: when it was made and how long it took."""
    run = {k: v for k, v in summary["run"].items() if k != "analysis_seconds"}
    return {**{k: v for k, v in summary.items() if k != "generated_at"}, "run": run}


def test_the_report_on_a_standalone_cluster_equals_the_local_one(standalone: str, tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs", generated_run())
    history = clean_history(tmp_path / "history.jsonl")
    on_cluster = _report(logs, history, tmp_path / "cluster", standalone)
    local = _report(logs, history, tmp_path / "local", "local[2]")
    assert on_cluster["run"]["events"] == 179  # the figures are the run's (tests/spark/test_cli.py)
    assert _comparable(on_cluster) == _comparable(local)
