"""Queues of offline persistent sessions made on one node of a test cluster, the loss of that node with its disk,
and the subscribers collecting their messages on another node (docs/replication.md)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import PahoClient, RawClient, unique
from tests.integration.cluster import ClusterNode, start_cluster
from tests.integration.cluster_admin import ready
from tests.integration.conftest import wait_until

SUBSCRIBERS = 50
MESSAGES = 1000
PERSISTENT = {"session_expiry_interval": 3600}


@pytest.fixture
def majority(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    """Three nodes with majority readiness whose queues fail over at once; stopped after."""
    nodes = start_cluster(tmp_path, {"cluster.readiness": "majority", "queue.failover_timeout": "0s"})
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def queue_offline(owner: ClusterNode, publisher_node: ClusterNode, tag: str,
                  qos: int = 1) -> tuple[list[str], list[str], set[bytes]]:
    """SUBSCRIBERS persistent sessions on `owner`, offline, each subscribed to its own topic; MESSAGES
    acknowledged publishes on `publisher_node` spread over them. (client ids, topics, payloads)."""
    ids = [unique(f"{tag}-sub{i}-") for i in range(SUBSCRIBERS)]
    topics = [unique(f"replicas/{tag}/{i}/") for i in range(SUBSCRIBERS)]
    for cid, topic in zip(ids, topics, strict=True):  # a raw client: no network thread to start and stop
        client = RawClient(owner.mqtt_port, owner.host, 5)
        client.connect(cid, clean=False, props=PERSISTENT)
        client.subscribe((topic, qos))
        client.disconnect()
    wait_until(lambda: all(topics[-1] in n.admin("subscription", "show").stdout for n in (publisher_node,)), 15,
               interval=0.2, what="the publisher's node knows the subscriptions")
    publisher = publisher_node.client(5, unique(f"{tag}-pub-"))
    payloads: set[bytes] = set()
    pending = []
    for i in range(MESSAGES):  # paho keeps up to 20 in flight; every one is waited for below
        payload = f"{tag} message {i}".encode()
        pending.append(publisher.publish(topics[i % SUBSCRIBERS], payload, qos=qos, wait=False))
        payloads.add(payload)
    for info in pending:  # its PUBACK / PUBCOMP: acknowledged
        info.wait_for_publish(30)
        assert info.is_published(), "a publish was not acknowledged within 30 s"
    publisher.stop()
    return ids, topics, payloads


def lose(node: ClusterNode) -> None:
    """kill -9, and the disk is gone."""
    node.kill9()
    shutil.rmtree(node.data_dir)
    node.data_dir.mkdir(parents=True)


def serving_without(node: ClusterNode, lost: ClusterNode) -> None:
    """Until `node` sees `lost` unreachable and serves again (majority readiness): its view of the two others
    can settle a moment after the first (a CONNECT in between is refused: not ready)."""
    wait_until(lambda: not any(r["Node"] == lost.name and r["Reachable"] for r in node.show()) and ready(node), 20,
               interval=0.2, what=f"{node.name} sees {lost.name} unreachable and serves")


def collect_all(node: ClusterNode, ids: list[str], qos: int = 1) -> list[bytes]:
    """Every subscriber reconnects (persistent) on `node` and reads its share of the messages."""
    received: list[bytes] = []
    share = MESSAGES // SUBSCRIBERS
    clients: list[PahoClient] = []
    for cid in ids:
        clients.append(node.client(5, cid, clean=False, session_expiry=3600))
    for client in clients:
        received += [m.payload for m in client.collect(share, 30)]
    for client in clients:
        client.assert_no_message(0.2)
    return received
