"""GET /metrics on real nodes, read with prometheus-client's own text parser: the counters move as real clients
act (connect, subscribe, publish QoS 1 and QoS 2, unsubscribe, ping, a message expiring in an offline queue, a
full queue, a takeover and its handover histogram, a CONNECT refused during a netsplit); the key is needed
unless `metrics.public = on`; `vmq-admin metrics show --format=vernemq` prints the same numbers. A node with a
tiny `log.file.max_size` rotates its log file, keeping `log.file.count` files of whole lines."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from admin.prometheus import HISTOGRAMS, PATTERNS, RUNTIME_NAMES, SPECS, vernemq_named
from tests.integration.clients import (
    DISCONNECT,
    PINGRESP,
    PUBREL,
    UNSUBACK,
    RawClient,
    enc_pingreq,
    enc_unsubscribe,
    unique,
)
from tests.integration.cluster import ClusterNode, cut, partition_chain
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
    """Every sample of the node's /metrics (with its key): (sample name, labels but `node`) -> value. The
    node's own samples carry its name; prometheus-client's process and runtime ones have no label."""
    status, content_type, text = fetch(node, "/metrics", node.api_key())
    assert status == 200, text
    assert content_type.startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            runtime = sample.name in RUNTIME_NAMES
            assert runtime or sample.labels.get("node") == node.name, sample
            labels = frozenset((k, v) for k, v in sample.labels.items() if k != "node")
            out[(sample.name, labels)] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def scrape_until(node: ClusterNode, done: Callable[[Samples], bool], what: str) -> Samples:
    """The first scrape of `node` (within 10 s) for which `done` holds."""

    def check() -> Samples | None:
        samples = scrape(node)
        return samples if done(samples) else None

    found: Samples = wait_until(check, 10, what=what)
    return found


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


def test_a_fresh_node_exports_every_counter_at_0_under_its_namespace(tmp_path: Path) -> None:
    """Every counter and histogram of the table is there before its first event (so that `increase()` sees the
    first incident), with every label value it can take; `prometheus_namespace = vernemq` prefixes the node's
    names as VerneMQ 2.x does, not the process metrics; one PUBLISH then reads 1."""
    node = ClusterNode(1, tmp_path, {"prometheus_namespace": "vernemq"}).start()
    try:
        fresh = scrape(node)
        for spec in SPECS:
            if spec.kind == "counter":
                name = "vernemq_" + spec.name + ("" if vernemq_named(spec.name) else "_total")
                assert (name, frozenset(spec.labels)) in fresh, (name, spec.labels)
        for name, _help, _pattern, label, declared in PATTERNS:
            suffix = "" if vernemq_named(name) else "_total"
            for label_value in declared:
                assert (f"vernemq_{name}{suffix}", frozenset({(label, label_value)})) in fresh, (name, label_value)
        for histogram in HISTOGRAMS:
            assert value(fresh, f"vernemq_{histogram.name}_count") == 0
            assert (f"vernemq_{histogram.name}_bucket", frozenset({("le", "+Inf")})) in fresh
        for name in ("mqtt_publish_received", "mqtt_publish_sent", "queue_message_drop", "queue_message_expired",
                     "netsplit_detected", "mqtt_subscribe_received"):
            assert (f"vernemq_{name}", frozenset()) in fresh and value(fresh, f"vernemq_{name}") == 0, name
        for side in ("local", "remote"):
            assert value(fresh, "vernemq_vmqpy_takeovers_total", side=side) == 0
        assert not any(name.startswith("mqtt_") for name, _ in fresh)  # every name of the table is prefixed
        assert value(fresh, "process_resident_memory_bytes") > 0 and value(fresh, "process_open_fds") > 0
        assert value(fresh, "process_max_fds") >= value(fresh, "process_open_fds")
        assert any(name == "python_info" for name, _ in fresh)
        publisher = RawClient(node.mqtt_port, node.host, 5)
        try:
            publisher.connect(unique("fresh-pub-"))
            publisher.publish(unique("metrics/fresh/"), b"first", qos=1)
            publisher.disconnect()
        finally:
            publisher.close()
        after = scrape_until(node, lambda now: value(now, "vernemq_mqtt_publish_received") >= 1, "the PUBLISH counted")
        assert value(after, "vernemq_mqtt_publish_received") == 1
        assert value(after, "vernemq_mqtt_connect_received") == 1
    finally:
        node.stop()


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
        return after if moved(before, after, "mqtt_puback_received") >= 1 else None

    after = wait_until(settled, 10, what="the client's PUBACK counted")
    assert moved(before, after, "mqtt_connect_received") == 1
    assert moved(before, after, "mqtt_connack_sent", return_code="success") == 1
    assert moved(before, after, "socket_open") == 1
    assert moved(before, after, "mqtt_subscribe_received") == 1
    assert moved(before, after, "mqtt_publish_received") == 1
    assert moved(before, after, "mqtt_publish_sent") == 1
    assert moved(before, after, "mqtt_puback_sent") == 1
    assert value(after, "active_sessions") == 1
    assert value(after, "router_subscriptions") == 1
    assert moved(before, after, "vmqpy_connect_latency_seconds_count") == 1
    assert value(after, "vmqpy_connect_latency_seconds_bucket", le="+Inf") == value(
        after, "vmqpy_connect_latency_seconds_count")
    assert value(after, "vmqpy_cluster_members") == 2
    for generation in "012":  # the collector's watch is wired: every generation has its samples, even at 0
        for name in ("vmqpy_gc_collections_total", "vmqpy_gc_seconds_total"):
            assert (name, frozenset({("generation", generation)})) in after, (name, generation)

    lines = n1.admin("metrics", "show", "--format=vernemq")
    assert lines.returncode == 0, lines.stderr
    shown = dict(line.split(" = ") for line in lines.stdout.splitlines() if " = " in line)
    assert int(shown["counter.mqtt_subscribe_received"]) == value(after, "mqtt_subscribe_received")
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


def test_a_handover_when_a_node_leaves_is_not_a_takeover(pair: list[ClusterNode]) -> None:
    """A takeover is a CONNECT with the client id of a session connected elsewhere (docs/operations.md,
    "Takeovers"); a persistent session that a leaving node hands over (`cluster leave -k`) is a session move: no
    takeover counted, and the status page's event says the session moved, not "takeover"."""
    n1, n2 = pair
    before = [scrape(n1), scrape(n2)]
    client_id = unique("leaving-")
    staying = RawClient(n2.mqtt_port, n2.host, 5)
    try:
        staying.connect(client_id, clean=False, props={"session_expiry_interval": 600})
        staying.subscribe(unique("metrics/leaving/"), qos=1)
        answer = n2.admin("cluster", "leave", f"node={n2.name}", "-k", "-i", "1", "-t", "30")  # n2 hands over
        assert answer.returncode == 0, answer.stdout + answer.stderr
        wait_until(lambda: value(scrape(n1), "inactive_sessions") >= 1, 20, what="the session handed over to n1")
    finally:
        staying.close()
    for node, old in zip((n1, n2), before, strict=True):
        now = scrape(node)
        for side in ("local", "remote"):
            assert moved(old, now, "vmqpy_takeovers_total", side=side) == 0, (node.name, side)
    status, _, body = fetch(n1, "/status.json", n1.api_key())
    assert status == 200, body
    kinds = [event["kind"] for event in json.loads(body)["events"]]
    assert "session_moved" in kinds and "takeover" not in kinds, kinds


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is installed by make test")
def test_a_connect_refused_during_a_netsplit_is_counted(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    before = scrape(n1)
    with partition_chain():
        cut(n1, n2)
        wait_until(lambda: moved(before, scrape(n1), "netsplit_detected") >= 1, 10,
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
        assert moved(before, during, "mqtt_connack_sent", return_code="server_unavailable") == 1
        assert moved(before, during, "vmqpy_netsplit_refused_total", operation="register") == 1
        assert moved(before, during, "mqtt_connect_received") == 1
    wait_until(lambda: moved(before, scrape(n1), "netsplit_resolved") >= 1, 15, what="n1 counts the heal")


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


def test_qos2_unsubscribe_ping_and_disconnect_are_counted(tmp_path: Path) -> None:
    node = ClusterNode(1, tmp_path).start()
    try:
        before = scrape(node)
        topic = unique("metrics/qos2/")
        subscriber = RawClient(node.mqtt_port, node.host, 5)
        publisher = RawClient(node.mqtt_port, node.host, 5)
        try:
            subscriber.connect(unique("qos2-sub-"))
            subscriber.subscribe(topic, qos=2)
            publisher.connect(unique("qos2-pub-"))
            publisher.publish(topic, b"exactly once", qos=2)  # PUBREC, PUBREL, PUBCOMP with the publisher
            [delivery] = subscriber.recv_publishes(1)  # answered with PUBREC
            assert delivery.payload == b"exactly once"
            subscriber.ack(subscriber.expect(PUBREL))  # and PUBCOMP
            wait_until(lambda: moved(before, scrape(node), "mqtt_pubcomp_received") >= 1, 10,
                       what="the subscriber's PUBCOMP counted")
            subscriber.send(enc_pingreq())
            subscriber.expect(PINGRESP)
            subscriber.send(enc_unsubscribe(subscriber.next_id(), [topic], 5))
            subscriber.expect(UNSUBACK)
            subscriber.disconnect()
            publisher.disconnect()
        finally:
            subscriber.close()
            publisher.close()
        after = scrape_until(node, lambda now: moved(before, now, "mqtt_disconnect_received") >= 2,
                             "both DISCONNECTs counted")
        for name, count in [("mqtt_pubrec_sent", 1), ("mqtt_pubrel_received", 1), ("mqtt_pubcomp_sent", 1),
                            ("mqtt_pubrec_received", 1), ("mqtt_pubrel_sent", 1), ("mqtt_pubcomp_received", 1),
                            ("mqtt_suback_sent", 1), ("mqtt_unsubscribe_received", 1), ("mqtt_unsuback_sent", 1),
                            ("mqtt_pingreq_received", 1), ("mqtt_pingresp_sent", 1),
                            ("mqtt_disconnect_received", 2), ("queue_message_in", 1), ("queue_message_out", 1),
                            ("mqtt_publish_sent", 1)]:
            assert moved(before, after, name) == count, name
        assert moved(before, after, "queue_message_drop") == 0
        # the delivery was written to the subscriber: one publish-to-delivery observation, in a finite bucket
        assert moved(before, after, "vmqpy_publish_delivery_seconds_count") == 1
        assert value(after, "vmqpy_publish_delivery_seconds_bucket", le="5.0") == value(
            after, "vmqpy_publish_delivery_seconds_count")
    finally:
        node.stop()


def test_an_expired_message_and_a_full_offline_queue_are_counted(tmp_path: Path) -> None:
    """A persistent subscriber goes offline; of three QoS 1 messages, the first expires in its queue (1 s message
    expiry), the second waits, the third finds the queue (max_offline_messages = 2) full. The drop counter is the
    node's: it stays when the session ends."""
    node = ClusterNode(1, tmp_path, {"max_offline_messages": 2}).start()
    try:
        client_id, topic = unique("offline-"), unique("metrics/offline/")
        subscriber = RawClient(node.mqtt_port, node.host, 5)
        try:
            subscriber.connect(client_id, clean=False, props={"session_expiry_interval": 300})
            subscriber.subscribe(topic, qos=1)
            subscriber.disconnect()
        finally:
            subscriber.close()
        before = scrape(node)
        publisher = RawClient(node.mqtt_port, node.host, 5)
        try:
            publisher.connect(unique("offline-pub-"))
            publisher.publish(topic, b"expires", qos=1, props={"message_expiry_interval": 1})
            publisher.publish(topic, b"waits", qos=1)
            publisher.publish(topic, b"no room", qos=1)
            publisher.disconnect()
        finally:
            publisher.close()
        queued = scrape(node)
        assert moved(before, queued, "queue_message_in") == 2
        assert moved(before, queued, "queue_message_drop") == 1
        time.sleep(1.5)  # not a synchronisation: the first message's expiry interval has to pass
        subscriber = RawClient(node.mqtt_port, node.host, 5)
        try:
            subscriber.connect(client_id, clean=False, props={"session_expiry_interval": 0}, expect_rc=None)
            assert [p.payload for p in subscriber.recv_publishes(1)] == [b"waits"]
            subscriber.assert_silent(0.3)
            subscriber.disconnect()  # session expiry 0: the session ends here
        finally:
            subscriber.close()
        after = scrape_until(node, lambda now: value(now, "inactive_sessions") == 0 == value(now, "active_sessions"),
                             "the session gone")
        assert moved(before, after, "queue_message_expired") == 1
        assert moved(before, after, "queue_message_out") == 1
        assert moved(before, after, "queue_message_drop") == 1  # still counted: the session is gone
        rows = node.admin("metrics", "show", "--format=vernemq")
        assert rows.returncode == 0, rows.stderr
        assert f"counter.queue_message_drop = {int(value(after, 'queue_message_drop'))}" in rows.stdout
        assert f"counter.queue_message_expired = {int(value(after, 'queue_message_expired'))}" in rows.stdout
    finally:
        node.stop()


def test_a_takeover_from_another_node_observes_the_handover_duration(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    before, before_n1 = scrape(n2), scrape(n1)
    client_id = unique("handed-over-")
    first = RawClient(n1.mqtt_port, n1.host, 5)
    second = RawClient(n2.mqtt_port, n2.host, 5)
    try:
        first.connect(client_id, clean=False, props={"session_expiry_interval": 300})
        first.subscribe(unique("metrics/moving/"), qos=1)
        wait_until(lambda: value(scrape(n1), "active_sessions") >= 1, 10, what="the client online on n1")
        ack = second.connect(client_id, clean=False, props={"session_expiry_interval": 300})
        assert ack.session_present  # it was handed over
        after = scrape_until(n2, lambda now: moved(before, now, "vmqpy_handover_duration_seconds_count") >= 1,
                             "n2 observes the handover")
        assert moved(before, after, "vmqpy_handover_duration_seconds_count") == 1
        assert value(after, "vmqpy_handover_duration_seconds_bucket", le="+Inf") == value(
            after, "vmqpy_handover_duration_seconds_count")
        assert value(after, "vmqpy_handover_duration_seconds_sum") > 0
        # n1 told its 5.0 client why it went: DISCONNECT 0x8E (Session taken over)
        assert first.expect(DISCONNECT).reason_code == 0x8E
        scrape_until(n1, lambda now: moved(before_n1, now, "mqtt_disconnect_sent") == 1,
                     "n1 counts the DISCONNECT it sent")
        second.disconnect()
    finally:
        first.close()
        second.close()


def test_the_log_file_rotates_by_size(tmp_path: Path) -> None:
    """A node with log.console = file, log.file, a tiny log.file.max_size and log.file.count = 2: enough connects
    rotate it; the files exist, at most three, and every line in them is whole."""
    log_file = tmp_path / "logs" / "vmqpy.log"
    node = ClusterNode(1, tmp_path, {"log.console": "file", "log.file": str(log_file),
                                     "log.file.max_size": "4KB", "log.file.count": 2}).start()
    try:
        ids = [unique("rotating-") for _ in range(60)]
        for client_id in ids:
            client = RawClient(node.mqtt_port, node.host, 4)
            try:
                client.connect(client_id)
                client.disconnect()
            finally:
                client.close()
        wait_until(lambda: any(ids[-1] in p.read_text() and "client disconnected" in p.read_text()
                               for p in [log_file] if p.exists()), 10, what="the last disconnect logged")
    finally:
        node.stop()
    files = sorted(log_file.parent.glob("vmqpy.log*"))
    assert [p.name for p in files] == ["vmqpy.log", "vmqpy.log.1", "vmqpy.log.2"]
    for path in files:
        text = path.read_text()
        assert text.endswith("\n") and path.stat().st_size <= 4096, path
        for line in text.splitlines():
            assert line.startswith("20") and "[" in line, (path, line)  # a timestamp first: no line cut in two
    every = "".join(p.read_text() for p in files)
    assert ids[-1] in every and ids[0] not in every  # the oldest lines were rotated away
