"""VerneMQ's operator commands, run as written with the real `vmq-admin` against two real nodes: `session show`
for the whole cluster with its column flags, `session disconnect [--cleanup]` wherever the client is,
`retain delete`, the HTTP short paths and health endpoints."""

from __future__ import annotations

import pytest

from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's operator interface")]

ADMINISTRATIVE_ACTION = 0x98


def test_session_show_and_disconnect_span_the_cluster(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    a = n1.client(5, "ops-a", clean=False, session_expiry=3600)
    a.client.reconnect_delay_set(min_delay=120, max_delay=120)  # stay away once disconnected
    a.subscribe("ops/#", qos=1)
    n2.client(4, "ops-b")
    # asked on n2, the answer lists the sessions of both nodes, with VerneMQ's default columns and the node
    listed = n2.rows("session", "show")
    assert {(r["client_id"], r["node"], r["is_online"]) for r in listed} == {
        ("ops-a", n1.name, True), ("ops-b", n2.name, True),
    }  # fmt: skip
    assert list(listed[0]) == ["client_id", "is_online", "mountpoint", "peer_host", "peer_port", "user", "node"]
    assert all(r["peer_host"] == "127.0.0.1" and isinstance(r["peer_port"], int) for r in listed), listed
    # VerneMQ's column flags: alone they choose columns, with a value they filter; --topic/--qos list subscriptions
    assert n2.rows("session", "show", "--client_id=ops-a", "--node", "--topic", "--qos") == [
        {"client_id": "ops-a", "node": n1.name, "topic": "ops/#", "qos": 1},
    ]
    assert n1.rows("session", "show", "--client_id", "--is_online=true", "--clean_session", "--protocol") == [
        {"client_id": "ops-a", "is_online": True, "clean_session": False, "protocol": 5},
        {"client_id": "ops-b", "is_online": True, "clean_session": True, "protocol": 4},
    ]
    # the same over HTTP, VerneMQ's query form and its short path
    key = n2.api_key()
    status, body = n2.get("/api/v1/session/show?--client_id&--is_online", key)
    assert status == 200 and sorted(r["client_id"] for r in body["table"]) == ["ops-a", "ops-b"]
    assert n2.get("/api/v1/sessions", key)[1]["table"] == n2.get("/api/v1/session/show", key)[1]["table"]

    # disconnect, asked on n2, reaches the client on n1: DISCONNECT 0x98, the persistent session stays
    answer = n2.admin("session", "disconnect", "client-id=ops-a")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() == f"ops-a on {n1.name}: disconnected"
    reason = a.disconnects.get(timeout=10)
    assert getattr(reason, "value", reason) == ADMINISTRATIVE_ACTION
    wait_until(lambda: n2.rows("session", "show", "--client_id=ops-a", "--is_online")
               == [{"client_id": "ops-a", "is_online": False}], 10, what="ops-a offline")  # fmt: skip
    assert any(r["Client"] == "ops-a" for r in n2.rows("subscription", "show"))
    # --cleanup ends the session: it and its subscriptions are gone from every node
    answer = n2.admin("session", "disconnect", "--client_id=ops-a", "--cleanup")
    assert answer.returncode == 0 and "session removed" in answer.stdout, answer
    assert n2.rows("session", "show", "--client_id=ops-a") == []
    for node in pair:
        wait_until(lambda node=node: not any(r["Client"] == "ops-a" for r in node.rows("subscription", "show")),
                   10, what=f"ops-a's subscription gone on {node.name}")  # fmt: skip
    unknown = n1.admin("session", "disconnect", "client-id=nobody")
    assert unknown.returncode != 0 and "no session of client id 'nobody' in the cluster" in unknown.stderr


def test_retain_delete_is_replicated(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    n1.client(5, "ops-pub").publish("ops/kept", b"v1", qos=1, retain=True)
    wait_until(lambda: len(n2.rows("retain", "show", "topic=ops/kept")) == 1, 10, what="retained on n2")
    answer = n2.admin("retain", "delete", "topic=ops/kept")
    assert answer.returncode == 0 and answer.stdout.strip() == "deleted the retained message of ops/kept", answer
    wait_until(lambda: n1.rows("retain", "show", "topic=ops/kept") == [], 10, what="delete reached n1")
    late = n1.client(5, "ops-late")
    late.subscribe("ops/#", qos=1)
    assert late.messages.empty()
    again = n1.admin("retain", "delete", "topic=ops/kept")
    assert again.returncode != 0 and "no retained message on 'ops/kept'" in again.stderr
    wildcard = n1.admin("retain", "delete", "topic=ops/#")
    assert wildcard.returncode != 0 and "not a topic name" in wildcard.stderr


def test_health_endpoints_and_status_json(pair: list[ClusterNode]) -> None:
    n1, n2 = pair
    assert n1.get("/health/ping") == (200, {"status": "ok"})
    assert n1.get("/health") == (200, {"status": "ok"})
    assert n1.get("/status.json")[0] == 401  # it lists clients and counts: the API key is needed
    n2.client(5, "ops-status")
    status, body = n1.get("/status.json", n1.api_key())
    assert status == 200 and "note" not in body, body
    by_node = {r["node"]: r for r in body["nodes"]}
    assert set(by_node) == {n1.name, n2.name}
    assert by_node[n2.name]["sessions_online"] == 1 and by_node[n1.name]["sessions_online"] == 0
    assert all(r["ready"] and sorted(r["members"]) == sorted([n1.name, n2.name]) for r in body["nodes"])
    cluster = n1.get("/api/v1/cluster", n1.api_key())[1]["table"]
    assert sorted(r["Node"] for r in cluster) == sorted([n1.name, n2.name])
