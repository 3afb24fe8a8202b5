"""A real Prometheus (the Debian `prometheus` package, scripts/debian-deps.sh) scrapes a real three-node cluster
every second, one job per node with that node's API key: every query of the Grafana dashboard
(deploy/grafana/vmqpy.json, its template variables filled in as Grafana would) returns a series with a number,
a VerneMQ dashboard's `rate(mqtt_publish_received[1m])` returns data, a takeover moves "Takeovers / s" and
`increase()` sees the first one (the counter was there at 0 before it), and `promtool check metrics` finds
nothing to say about a scrape (docs/operations.md, "Metrics" and "The Grafana dashboard")."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import RawClient, unique
from tests.integration.cluster import ClusterNode
from tests.integration.conftest import free_port, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vmqpy_only("vmqpy's admin listener"),
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                       reason="the Debian package prometheus (prometheus, promtool) is not installed: "
                              "scripts/debian-deps.sh installs it"),
]

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "vmqpy.json"
#: what Grafana puts in for the dashboard's variables: every node, the time range shown, its rate interval
VARIABLES = {"$node": ".*", "${node}": ".*", "$__range": "5m", "$__rate_interval": "1m", "$__interval": "1s"}
HOST = "127.0.0.1"


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of the dashboard, variables filled in."""
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = [p for top in doc["panels"] for p in (top, *top.get("panels", []))]
    out = []
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"{panel['title']}: a variable the test does not fill in: {expr}"
            out.append((panel["title"], expr))
    return out


class Prometheus:
    """A Prometheus server of its own (storage in `workdir`), started with `targets` (node, key file) and stopped
    by its PID."""

    def __init__(self, workdir: Path, nodes: list[ClusterNode]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(HOST)
        self.url = f"http://{HOST}:{self.port}"
        jobs = []
        for node in nodes:
            key_file = workdir / f"{node.name.split('@')[0]}.key"
            key_file.write_text(node.api_key())
            key_file.chmod(0o600)
            jobs.append({"job_name": node.name, "metrics_path": "/metrics",
                         "authorization": {"type": "Bearer", "credentials_file": str(key_file)},
                         "static_configs": [{"targets": [node.url.removeprefix("http://")]}]})
        config = workdir / "prometheus.yml"
        # JSON is YAML: no YAML library needed to write it
        config.write_text(json.dumps({"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                                                 "evaluation_interval": "1s"}, "scrape_configs": jobs}))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address={HOST}:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, cwd=workdir)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of `expr` now (Prometheus' /api/v1/query); [] while the server is not up yet."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                body = json.loads(answer.read())
        except (urllib.error.URLError, ConnectionError):
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-2000:]
            return []
        assert body["status"] == "success", (expr, body)
        assert body["data"]["resultType"] == "vector", (expr, body["data"]["resultType"])
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def numbers(result: list[dict[str, Any]]) -> list[float]:
    """The values of an instant vector that are numbers (a histogram quantile of no observation is NaN)."""
    values = [float(series["value"][1]) for series in result]
    return [v for v in values if not math.isnan(v)]


@pytest.fixture
def prometheus(cluster: list[ClusterNode], tmp_path: Path) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path / "prometheus", cluster)
    try:
        # every node scraped at least twice, so that the rates over the first events have a start
        wait_until(lambda: len(numbers(server.query("up == 1"))) == len(cluster)
                   and len(numbers(server.query("count_over_time(up[1m]) >= 2"))) == len(cluster), 30,
                   interval=0.5, what="Prometheus scraping every node")
        yield server
    finally:
        server.stop()


def traffic(nodes: list[ClusterNode]) -> None:
    """Some of what a healthy cluster sees: clients online on every node, a persistent session offline, a
    retained message, QoS 1 publishes across nodes, and a takeover of a persistent session from one node to
    another (its handover observed)."""
    n1, n2, n3 = nodes
    topic = unique("scrape/")
    subscriber = n1.client(client_id=unique("scrape-sub-"))
    subscriber.subscribe(topic + "/#", qos=1)
    publisher = n2.client(client_id=unique("scrape-pub-"))
    n3.client(client_id=unique("scrape-idle-"))
    offline = RawClient(n3.mqtt_port, n3.host, 5)
    try:
        offline.connect(unique("scrape-offline-"), clean=False, props={"session_expiry_interval": 600})
        offline.subscribe(topic + "/offline", qos=1)
        offline.disconnect()
    finally:
        offline.close()
    publisher.publish(topic + "/retained", b"kept", qos=1, retain=True)
    for i in range(20):
        publisher.publish(f"{topic}/{i}", b"x", qos=1)
    for _ in range(21):
        subscriber.get(timeout=10)
    moving = unique("scrape-moving-")
    first = RawClient(n1.mqtt_port, n1.host, 5)
    second = RawClient(n2.mqtt_port, n2.host, 5)
    try:
        first.connect(moving, clean=False, props={"session_expiry_interval": 600})
        first.subscribe(topic + "/moving", qos=1)
        ack = second.connect(moving, clean=False, props={"session_expiry_interval": 600})
        assert ack.session_present  # taken over from n1, its session handed over to n2
        second.disconnect()
    finally:
        first.close()
        second.close()


def test_every_dashboard_query_returns_data_from_a_real_prometheus(cluster: list[ClusterNode],
                                                                   prometheus: Prometheus) -> None:
    # before any client: the takeover counters are there at 0 on every node
    takeovers_before = prometheus.query('vmqpy_takeovers_total{side="remote"}')
    assert sorted(numbers(takeovers_before)) == [0.0] * len(cluster), takeovers_before
    traffic(cluster)
    queries = dashboard_queries()
    assert len(queries) >= 30
    vernemq = [("a VerneMQ dashboard's PUBLISH rate", "sum(rate(mqtt_publish_received[1m])) > 0"),
               ("the first takeover, seen by increase()",
                'sum(increase(vmqpy_takeovers_total{side="remote"}[1m])) > 0'),
               ("process metrics", "process_resident_memory_bytes > 0"),
               ("process metrics", "process_open_fds > 0"),
               ("process metrics", "rate(process_cpu_seconds_total[1m])"),
               ("runtime metrics", "python_info"),
               ("runtime metrics", "python_gc_collections_total")]

    def empty() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in queries + vernemq if not numbers(prometheus.query(expr))]

    last: list[list[tuple[str, str]]] = []

    def all_answered() -> bool:
        last[:] = [empty()]
        return not last[0]

    try:
        wait_until(all_answered, 45, interval=1.0, what="every dashboard query answered")
    except AssertionError:
        pytest.fail(f"queries without data after 45 s: {last[0]}")
    # the takeover was one: n1 counts it (the client moved away), n2 observed the handover
    remote = {s["metric"]["node"]: float(s["value"][1])
              for s in prometheus.query('vmqpy_takeovers_total{side="remote"}')}
    assert remote[cluster[0].name] == 1 and remote[cluster[1].name] == 0 == remote[cluster[2].name], remote
    handovers = prometheus.query("vmqpy_handover_duration_seconds_count")
    assert sorted(float(s["value"][1]) for s in handovers) == [0.0, 0.0, 1.0]

    # and promtool has nothing to say about a scrape of the same node
    node = cluster[0]
    request = urllib.request.Request(node.url + "/metrics", headers={"Authorization": f"Bearer {node.api_key()}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read()
    assert b"\nmqtt_publish_received{" in text and b"\nprocess_resident_memory_bytes " in text
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert checked.returncode == 0 and checked.stdout == b"" and checked.stderr == b"", (
        checked.returncode, checked.stdout.decode(), checked.stderr.decode())
