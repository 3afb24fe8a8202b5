"""Queue replicas (issue 18): a persistent session's queue survives the loss of its node, disk included.

Real node processes on 127.0.0.11 upwards (`queue.replicas = 2`, the default), real paho clients, the real
vmq-admin. Each test kills the node holding the sessions with `kill -9` and deletes its data directory, then
the subscribers come back elsewhere and every acknowledged message reaches them (docs/replication.md).
"""

from __future__ import annotations

import pytest

from tests.integration.clients import (
    PUBCOMP,
    PUBREC,
    PUBREL,
    RawClient,
    enc_ack,
    enc_publish,
    unique,
)
from tests.integration.cluster import ClusterNode, cluster_ready
from tests.integration.cluster_admin import metrics
from tests.integration.conftest import wait_until
from tests.integration.queue_replicas import (
    MESSAGES,
    PERSISTENT,
    collect_all,
    lose,
    majority,
    queue_offline,
    serving_without,
)

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy queue replicas")]

__all__ = ["majority"]  # the fixture this module's tests take


@pytest.fixture
def default_mode(cluster: list[ClusterNode]) -> list[ClusterNode]:
    return cluster


def test_owner_lost_with_its_disk_subscribers_get_every_message_on_another_node(
        majority: list[ClusterNode]) -> None:
    """Issue 18 test (1): 3 nodes, majority readiness, R=2; 1,000 acknowledged QoS 1 messages queued for 50
    offline sessions on A; A killed and its disk deleted; the subscribers reconnect on C: 1,000 of 1,000."""
    a, b, c = majority
    ids, _topics, payloads = queue_offline(a, b, "lost")
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="A's replica operations acknowledged")
    lose(a)
    serving_without(c, a)
    received = collect_all(c, ids)
    assert set(received) == payloads
    recovered = metrics(c).get("queue_replica.messages_recovered", 0)
    assert recovered >= MESSAGES


def test_leave_of_a_dead_node_recovers_its_queues(default_mode: list[ClusterNode]) -> None:
    """Issue 18 test (5): the sessions of a dead node whose disk is gone are recreated elsewhere by
    `vmq-admin cluster leave node=DEAD`, with their messages, from the queue replicas. And the will of a
    persistent client connected to A when it died, kept in its replicated session record
    (vmqpy.broker.core.stored_will), is published by the node that recovers the session: its connection was lost."""
    a, b, c = default_mode
    ids, _topics, payloads = queue_offline(a, b, "leave")
    will_topic = unique("replicas/will/")
    watcher = b.client(5, unique("watcher-"))
    watcher.subscribe(will_topic, qos=1)
    willer = raw(a)
    willer.connect(unique("willer-"), clean=False, props=PERSISTENT,
                   will={"topic": will_topic, "payload": b"A died with me", "qos": 1})
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="A's replica operations acknowledged")
    lose(a)
    wait_until(lambda: not any(r["Node"] == a.name and r["Reachable"] for r in b.show()), 20, interval=0.2,
               what="B sees A unreachable")
    answer = b.admin("cluster", "leave", f"node={a.name}", "-k")
    assert answer.returncode == 0, answer.stderr
    assert f"{MESSAGES} messages queued on {a.name} are recovered from the queue replicas" in answer.stdout, \
        answer.stdout
    wait_until(lambda: cluster_ready([b, c]), 20, interval=0.2, what="B and C ready without A")
    assert watcher.get(20).payload == b"A died with me"
    watcher.assert_no_message(0.5)  # once
    received = collect_all(b, ids)
    assert set(received) == payloads


def raw(node: ClusterNode) -> RawClient:
    return RawClient(node.mqtt_port, node.host, 5)


def test_in_flight_messages_are_sent_again_with_dup_and_qos2_state_survives(majority: list[ClusterNode]) -> None:
    """Issue 18 tests (3) and (2): QoS 1 messages sent to a subscriber on A and not acknowledged when A is lost
    (disk included) are sent again with DUP and their packet ids on C; a QoS 2 publish A had received (PUBREC
    sent, PUBREL not yet) is not delivered twice when its publisher sends it again on C, and its PUBREL is
    answered with success; the QoS 2 subscriber gets it exactly once."""
    a, b, c = majority
    in_flight_topic, qos2_topic = unique("replicas/inflight/"), unique("replicas/qos2/")
    reader_id, qos2_sub_id, qos2_pub_id = unique("reader-"), unique("q2sub-"), unique("q2pub-")
    reader = raw(a)
    reader.connect(reader_id, clean=False, props=PERSISTENT)
    reader.subscribe(in_flight_topic, qos=1)
    subscriber = raw(a)
    subscriber.connect(qos2_sub_id, clean=False, props=PERSISTENT)
    subscriber.subscribe(qos2_topic, qos=2)
    subscriber.disconnect()
    wait_until(lambda: qos2_topic in b.admin("subscription", "show").stdout, 15, interval=0.2,
               what="B knows the subscriptions")
    publisher = b.client(5, unique("pub-"))
    for i in range(5):
        publisher.publish(in_flight_topic, f"in flight {i}".encode(), qos=1)
    first = reader.recv_publishes(5, timeout=10, ack=False)
    assert [p.dup for p in first] == [False] * 5
    qos2 = raw(a)
    qos2.connect(qos2_pub_id, clean=False, props=PERSISTENT)
    qos2.send(enc_publish(qos2_topic, b"exactly once", 2, packet_id=7, version=5))
    assert qos2.expect(PUBREC, 10).packet_id == 7  # A holds it; the PUBREL never reaches A
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="A's replica operations acknowledged")
    lose(a)
    serving_without(c, a)
    again = raw(c)
    assert again.connect(reader_id, clean=False, props=PERSISTENT, timeout=15).session_present
    resent = again.recv_publishes(5, timeout=15)
    assert sorted((p.packet_id, p.payload, p.dup) for p in resent) == sorted(
        (p.packet_id, p.payload, True) for p in first)
    qos2_again = raw(c)
    qos2_again.connect(qos2_pub_id, clean=False, props=PERSISTENT, timeout=15)
    qos2_again.send(enc_publish(qos2_topic, b"exactly once", 2, packet_id=7, dup=True, version=5))
    assert qos2_again.expect(PUBREC, 10).packet_id == 7
    qos2_again.send(enc_ack(PUBREL, 7, 5))
    complete = qos2_again.expect(PUBCOMP, 10)
    assert complete.packet_id == 7 and complete.reason_code in (None, 0), complete
    receiver = raw(c)
    receiver.connect(qos2_sub_id, clean=False, props=PERSISTENT, timeout=15)
    (delivered,) = receiver.recv_publishes(1, timeout=15)
    assert delivered.payload == b"exactly once" and delivered.qos == 2
    receiver.ack(receiver.expect(PUBREL, 10))  # PUBREC (sent by recv_publishes), PUBREL, PUBCOMP
    receiver.assert_silent(1.0)  # and no second copy
