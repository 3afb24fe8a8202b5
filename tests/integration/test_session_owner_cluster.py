"""Sessions belong to their user across the cluster (docs/security.md, "Sessions belong to their user"): the owner
travels in the replicated owner record, so a node that never held the session refuses another user, or starts it
clean, before it asks the owner node to hand the session over. Real nodes on 127.0.0.11+ (run under the lock),
the same password and ACL files on each, paho-mqtt clients.

alice's persistent session `alice-phone` lives on n1 with 3 queued `secret/#` messages; eve connects to n2 with
client id `alice-phone` and no clean start.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.access_files import write_access_files
from tests.integration.clients import PahoClient, RawClient, unique
from tests.integration.cluster import ClusterNode, start_cluster
from tests.integration.conftest import wait_until
from tests.integration.session_owners import ACL, PASSWORDS, clients

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

__all__ = ["clients"]  # the fixture this module's tests take


def two_nodes(workdir: Path, **extra: Any) -> list[ClusterNode]:
    acl_file, passwd = write_access_files(workdir / "access", ACL, PASSWORDS)
    return start_cluster(workdir, {"acl_file": acl_file, "password_file": passwd, "auth.failed_login_delay": "100ms",
                                   **extra}, count=2)


@pytest.fixture
def cluster_clean(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    nodes = two_nodes(tmp_path)
    yield nodes
    for node in nodes:
        node.stop()


@pytest.fixture
def cluster_refuse(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    nodes = two_nodes(tmp_path, **{"session.foreign_user": "refuse"})
    yield nodes
    for node in nodes:
        node.stop()


def client_of(node: ClusterNode, clients: list[PahoClient], user: str, client_id: str = "",
              persistent: bool = False) -> PahoClient:
    client = PahoClient(node.mqtt_port, version=5, client_id=client_id or unique(f"{user}-"), clean=not persistent,
                        session_expiry=3600 if persistent else None, host=node.host)
    client.client.username_pw_set(user, PASSWORDS[user])
    clients.append(client)
    return client


def queued_for(node: ClusterNode, client_id: str) -> int:
    answer = node.admin("session", "show", f"--client_id={client_id}", f"--node={node.name}", "--queued", "--json")
    assert answer.returncode == 0, answer.stderr
    rows = json.loads(answer.stdout)
    return int(rows[0]["queued"]) if rows else -1


def owner_record_known(node: ClusterNode, client_id: str) -> bool:
    """Whether `node`'s metadata store holds the owner record of `client_id` (written with its user)."""
    answer = node.admin("metadata", "dump", "prefix=session", "--json")
    return answer.returncode == 0 and client_id in answer.stdout


def alice_on_n1(nodes: list[ClusterNode], clients: list[PahoClient]) -> PahoClient:
    n1, n2 = nodes
    alice = client_of(n1, clients, "alice", "alice-phone", persistent=True)
    alice.connect()
    alice.subscribe("secret/#", qos=1)
    alice.disconnect()
    alice.stop()
    writer = client_of(n1, clients, "writer")
    writer.connect()
    for n in range(3):
        writer.publish(f"secret/{n}", f"for alice only {n}", qos=1)
    wait_until(lambda: queued_for(n1, "alice-phone") == 3, 10, what="3 messages queued for alice on n1")
    wait_until(lambda: owner_record_known(n2, "alice-phone"), 10, what="n2 knows alice's owner record")
    return writer


def test_another_user_on_another_node_gets_a_clean_session(cluster_clean: list[ClusterNode],
                                                           clients: list[PahoClient]) -> None:
    n1, n2 = cluster_clean
    writer = alice_on_n1(cluster_clean, clients)
    eve = client_of(n2, clients, "eve", "alice-phone", persistent=True)
    flags, _rc, _props = eve.connect()
    assert not flags.session_present, "eve must not resume alice's session"
    eve.subscribe("eve/#", qos=1)
    writer.publish("eve/marker", b"marker", qos=1)
    assert [(m.topic, m.payload) for m in eve.until_marker("eve/marker", timeout=10)] == []
    wait_until(lambda: queued_for(n1, "alice-phone") == -1, 10, what="alice's session on n1 discarded")


def test_refused_on_another_node_and_the_owner_keeps_its_session_moving(cluster_refuse: list[ClusterNode],
                                                                        clients: list[PahoClient]) -> None:
    n1, n2 = cluster_refuse
    alice_on_n1(cluster_refuse, clients)
    for node in (n2, n1):
        raw = RawClient(node.mqtt_port, node.host, version=5)
        try:
            ack = raw.connect("alice-phone", clean=False, props={"session_expiry_interval": 3600}, expect_rc=None,
                              username="eve", password=PASSWORDS["eve"].encode())
            assert ack.reason_code == 0x87
        finally:
            raw.close()
    assert queued_for(n1, "alice-phone") == 3
    # alice takes her session to n2 (a takeover between nodes): its owner goes with it
    alice = client_of(n2, clients, "alice", "alice-phone", persistent=True)
    flags, _rc, _props = alice.connect()
    assert flags.session_present
    got = sorted((m.topic, m.payload) for m in alice.collect(3, timeout=10))
    assert got == [(f"secret/{n}", f"for alice only {n}".encode()) for n in range(3)]
    alice.disconnect()
    raw = RawClient(n2.mqtt_port, n2.host, version=4)
    try:
        ack = raw.connect("alice-phone", clean=False, expect_rc=None, username="eve",
                          password=PASSWORDS["eve"].encode())
        assert ack.reason_code == 5  # 3.1.1 not authorized, on the node the session moved to
    finally:
        raw.close()
