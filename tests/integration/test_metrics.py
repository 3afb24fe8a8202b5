"""GET /metrics on real nodes, read with prometheus-client's own text parser: the counters move as real clients
act (connect, subscribe, publish QoS 1, a takeover, a CONNECT refused during a netsplit); the key is needed
unless `metrics.public = on`; `vmq-admin metrics show --format=vernemq` prints the same numbers."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.clients import RawClient, unique
from tests.integration.cluster import ClusterNode, cut, partition_chain, start_cluster
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's admin listener")]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def fetch(node: ClusterNode, path: str, key: str | None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    request = urllib.request.Request(node.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def scrape(node: ClusterNode) -> Samples:
    """Every sample of the node's /metrics (with its key): (sample name, labels but `node`) -> value."""
    status, content_type, text = fetch(node, "/metrics", node.api_key())
    assert status == 200, text
    assert content_type.startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.labels.get("node") == node.name, sample
            labels = frozenset((k, v) for k, v in sample.labels.items() if k != "node")
            out[(sample.name, labels)] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    nodes = start_cluster(tmp_path, count=2)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_the_key_is_needed_unless_metrics_public_is_on(tmp_path: Path) -> None:
    closed = ClusterNode(1, tmp_path / "closed").start()
    try:
        status, _, body = fetch(closed, "/metrics", None)
        assert status == 401 and "API key" in body
        assert fetch(closed, "/metrics", "not-the-key")[0] == 401
        assert fetch(closed, "/metrics", closed.api_key())[0] == 200
    finally:
        closed.stop()
    opened = ClusterNode(2, tmp_path / "open", {"metrics.public": "on"}).start()
    try:
        status, _, text = fetch(opened, "/metrics", None)
        assert status == 200
        names = {family.name for family in text_string_to_metric_families(text)}
        assert {"active_sessions", "vmqpy_metadata_keys"} <= names
        assert fetch(opened, "/status.json", None)[0] == 401  # metrics.public opens /metrics only
    finally:
        opened.stop()


def test_counters_follow_real_clients(pair: list[ClusterNode]) -> None:
    n1, _n2 = pair
    before = scrape(n1)
    client = n1.client(client_id=unique("metrics-"))
    topic = unique("metrics/")
    client.subscribe(topic, qos=1)
    client.publish(topic, b"one", qos=1)
    assert client.get().payload == b"one"

    def settled() -> Samples | None:
        after = scrape(n1)
        return after if moved(before, after, "mqtt_puback_received_total") >= 1 else None

    after = wait_until(settled, 10, what="the client's PUBACK counted")
    assert moved(before, after, "mqtt_connect_received_total") == 1
    assert moved(before, after, "mqtt_connack_sent_total", return_code="success") == 1
    assert moved(before, after, "socket_open_total") == 1
    assert moved(before, after, "mqtt_subscribe_received_total") == 1
    assert moved(before, after, "mqtt_publish_received_total") == 1
    assert moved(before, after, "mqtt_publish_sent_total") == 1
    assert moved(before, after, "mqtt_puback_sent_total") == 1
    assert value(after, "active_sessions") == 1
    assert value(after, "router_subscriptions") == 1
    assert moved(before, after, "vmqpy_connect_latency_seconds_count") == 1
    assert value(after, "vmqpy_connect_latency_seconds_bucket", le="+Inf") == value(
        after, "vmqpy_connect_latency_seconds_count")
    assert value(after, "vmqpy_cluster_members") == 2

    lines = n1.admin("metrics", "show", "--format=vernemq")
    assert lines.returncode == 0, lines.stderr
    shown = dict(line.split(" = ") for line in lines.stdout.splitlines() if " = " in line)
    assert int(shown["counter.mqtt_subscribe_received"]) == value(after, "mqtt_subscribe_received_total")
    assert int(shown["gauge.active_sessions"]) == 1
    assert "counter.mqtt_connect_received" in shown


def test_a_takeover_is_counted(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    before = [scrape(n1), scrape(n2)]
    client_id = unique("moving-")
    first = n1.client(client_id=client_id)
    wait_until(lambda: value(scrape(n1), "active_sessions") >= 1, 10, what="the client online on n1")
    n2.client(client_id=client_id)
    first.disconnects_wait(10)

    def takeovers() -> float:
        total = 0.0
        for node, old in zip((n1, n2), before, strict=True):
            now = scrape(node)
            total += moved(old, now, "vmqpy_takeovers_total", side="remote") + moved(
                old, now, "vmqpy_takeovers_total", side="local")
        return total

    wait_until(lambda: takeovers() >= 1, 10, what="a takeover counted on n1 or n2")


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is installed by make test")
def test_a_connect_refused_during_a_netsplit_is_counted(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    before = scrape(n1)
    with partition_chain():
        cut(n1, n2)
        wait_until(lambda: moved(before, scrape(n1), "netsplit_detected_total") >= 1, 10,
                   what="n1 counts the netsplit")
        client = RawClient(n1.mqtt_port, n1.host, 5)
        refused_id = unique("refused-")
        try:
            ack = client.connect(refused_id, expect_rc=None)
            assert ack.reason_code == 0x88
        finally:
            client.close()
        refusal = [line for line in n1.log_tail(400).splitlines() if "refused connect" in line and refused_id in line]
        assert len(refusal) == 1 and "reason_code=0x88" in refusal[0] and f"node={n1.name}" in refusal[0]
        during = scrape(n1)
        assert moved(before, during, "mqtt_connack_sent_total", return_code="server_unavailable") == 1
        assert moved(before, during, "vmqpy_netsplit_refused_total", operation="register") == 1
        assert moved(before, during, "mqtt_connect_received_total") == 1
    wait_until(lambda: moved(before, scrape(n1), "netsplit_resolved_total") >= 1, 15, what="n1 counts the heal")


def test_connects_and_disconnects_are_logged_at_info(pair: list[ClusterNode]) -> None:
    """One line each, with client id, user, peer address, protocol version, clean start and node; never the
    password or a payload."""
    n1, _n2 = pair
    client_id = unique("logged-")
    secret = unique("pw-")
    client = RawClient(n1.mqtt_port, n1.host, 4)
    try:
        client.connect(client_id, username="alice", password=secret.encode())
        client.publish(unique("logged/"), secret, qos=1)
        client.disconnect()
    finally:
        client.close()

    def lines(event: str) -> list[str]:
        return [line for line in n1.log_tail(400).splitlines() if event in line and client_id in line]

    [connected] = wait_until(lambda: lines("client connected"), 10, what="the connect logged")
    [disconnected] = wait_until(lambda: lines("client disconnected"), 10, what="the disconnect logged")
    assert "[info" in connected and "[info" in disconnected
    for field in (f"client_id={client_id}", "user=alice", "peer=127.0.0.1:", "protocol=4", "clean_start=True",
                  f"node={n1.name}"):
        assert field in connected, (field, connected)
    for field in (f"client_id={client_id}", "user=alice", "normal=True", f"node={n1.name}"):
        assert field in disconnected, (field, disconnected)
    assert secret not in n1.log_tail(2000)
