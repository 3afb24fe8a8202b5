"""`persistent_session_placement = assigned` (docs/deployment.md, "Assigned server"): a three-node cluster of real
node processes, real paho-mqtt clients. A 5.0 client asking for a persistent session at another node than its
client id's assigned one gets CONNACK 0x9C with a Server Reference and follows it (the few lines of
`connect_following` are the pattern docs/deployment.md shows users); a 3.1.1 client is served where it lands;
a clean connect of a client id whose persistent session lives elsewhere is sent there once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster import Cluster
from tests.integration.clients import PahoClient
from tests.integration.cluster import JOIN_DEADLINE_S, ClusterNode
from tests.integration.cluster_admin import sessions
from tests.integration.conftest import wait_until
from vmqpy.cluster.leader import ranking

USE_ANOTHER_SERVER = 0x9C
ADVERTISED_3 = "broker-3.example.net:18830"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    workdir: Path = tmp_path_factory.mktemp("placement")
    common = {"persistent_session_placement": "assigned", "allow_anonymous": "on"}
    nodes = [ClusterNode(1, workdir, common), ClusterNode(2, workdir, common),
             ClusterNode(3, workdir, {**common, "listener.tcp.default.advertise": ADVERTISED_3})]
    cluster = Cluster(list(nodes))
    try:
        cluster.start()
        cluster.join(JOIN_DEADLINE_S)
        yield nodes
    finally:
        cluster.stop()


def assigned_to(nodes: list[ClusterNode], index: int, prefix: str) -> str:
    """A client id whose assigned server (every member reachable) is node `index` (from 0)."""
    names = [n.name for n in nodes]
    for i in range(10_000):
        if ranking(f"{prefix}{i}", names)[0] == names[index]:
            return f"{prefix}{i}"
    raise AssertionError("no such client id")


def reason(rc: Any) -> int:
    return int(rc.value if hasattr(rc, "value") else rc)


def connect_following(node: ClusterNode, client_id: str, clean: bool = False,
                      expiry: int | None = 3600) -> tuple[PahoClient, list[str]]:
    """Connect at `node`; on CONNACK 0x9C connect again at the Server Reference (at most 3 hops). The client
    connected, and the references it followed."""
    host, port, followed = node.host, node.mqtt_port, []
    for _hop in range(3):
        client = PahoClient(port, 5, client_id, clean=clean, session_expiry=expiry, host=host)
        node.clients.append(client)
        _flags, rc, props = client.connect(expect_success=False)
        if reason(rc) != USE_ANOTHER_SERVER:
            assert not rc.is_failure, f"CONNACK {rc}"
            return client, followed
        reference = str(props.ServerReference)
        followed.append(reference)
        client.stop()
        host, _, port_text = reference.rpartition(":")
        port = int(port_text)
    raise AssertionError(f"redirected more than 3 times: {followed}")


def test_a_persistent_client_is_sent_to_its_assigned_server_and_its_session_stays_there(
        nodes: list[ClusterNode]) -> None:
    n1, n2, n3 = nodes
    cid = assigned_to(nodes, 1, "dev-")
    client, followed = connect_following(n1, cid)
    assert followed == [f"{n2.host}:{n2.mqtt_port}"]
    client.subscribe("placement/a", qos=1)
    client.stop()
    publisher = n1.client(5, "placement-pub")
    for i in range(3):
        publisher.publish("placement/a", f"m{i}", qos=1)
    again, followed = connect_following(n3, cid)
    assert followed == [f"{n2.host}:{n2.mqtt_port}"], "the assigned server does not depend on where one lands"
    assert sorted(m.payload for m in again.collect(3, timeout=10)) == [b"m0", b"m1", b"m2"]
    _served_at_home, followed = connect_following(n2, cid)
    assert followed == []


def test_the_server_reference_is_the_advertised_address(nodes: list[ClusterNode]) -> None:
    n1 = nodes[0]
    client = PahoClient(n1.mqtt_port, 5, assigned_to(nodes, 2, "adv-"), clean=False, session_expiry=60,
                        host=n1.host)
    n1.clients.append(client)
    _flags, rc, props = client.connect(expect_success=False)
    assert reason(rc) == USE_ANOTHER_SERVER
    assert props.ServerReference == ADVERTISED_3


def test_a_clean_session_is_served_anywhere(nodes: list[ClusterNode]) -> None:
    n1 = nodes[0]
    _client, followed = connect_following(n1, assigned_to(nodes, 1, "clean-"), clean=True, expiry=None)
    assert followed == []


def test_a_3_1_1_client_is_served_where_it_lands(nodes: list[ClusterNode]) -> None:
    n1 = nodes[0]
    cid = assigned_to(nodes, 2, "old-")
    client = PahoClient(n1.mqtt_port, 4, cid, clean=False, host=n1.host)
    n1.clients.append(client)
    _flags, rc, _props = client.connect()
    assert reason(rc) == 0
    assert "cannot be redirected" in n1.log.read_text()


def test_a_clean_connect_goes_once_to_where_the_persistent_session_is(nodes: list[ClusterNode]) -> None:
    n1, n2, _n3 = nodes
    cid = assigned_to(nodes, 1, "back-")
    first, _ = connect_following(n1, cid)  # a persistent session on n2
    first.stop()
    wait_until(lambda: any(r["client_id"] == cid and r["node"] == n2.name for r in sessions(n1)), 10,
               what="n1 knows the session is on n2")
    clean, followed = connect_following(n1, cid, clean=True, expiry=None)
    assert followed == [f"{n2.host}:{n2.mqtt_port}"], "sent to the node that holds the session"
    clean.stop()
    wait_until(lambda: not any(r["client_id"] == cid for r in sessions(n1)), 10,
               what="n1 knows the session ended")
    _later, followed = connect_following(n1, cid, clean=True, expiry=None)
    assert followed == [], "the session ended with the clean connect: served wherever it lands"
