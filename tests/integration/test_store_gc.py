"""Garbage collection on real nodes: deletes leave no metadata behind once every member has them, also after
the membership changed (GC waits for every member to report under the same view, docs/replication.md 4)."""

from __future__ import annotations

import json

import pytest

from tests.integration.cluster import ClusterNode, join_all
from tests.integration.conftest import wait_until
from tests.integration.unjoined_nodes import nodes

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

__all__ = ["nodes"]  # the fixture this module's tests take


def store_stats(node: ClusterNode) -> dict[str, int]:
    answer = node.admin("metrics", "show", "--json")
    assert answer.returncode == 0, answer.stderr
    rows = json.loads(answer.stdout)
    return {r["Metric"][len("metadata."):]: r["Value"] for r in rows if r["Metric"].startswith("metadata.")}


def collected(nodes: list[ClusterNode]) -> bool:
    for node in nodes:
        stats = store_stats(node)
        if stats["gc_pending_dots"] or stats["tombstone_rows"] or stats["contexts_at_rest"]:
            return False
    return True


def subscriptions(node: ClusterNode, client_id: str) -> int:
    answer = node.admin("subscription", "show", f"client-id={client_id}", "--json")
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.count('"Filter"')


def churn_subscriptions(node: ClusterNode, client_id: str, count: int) -> None:
    """Subscribe to `count` filters, then unsubscribe from all: `count` puts and `count` deletes in the store."""
    client = node.client(version=4, client_id=client_id, clean=False)
    try:
        for i in range(count):
            client.subscribe(f"gc/{i}", qos=1)
        assert wait_until(lambda: subscriptions(node, client_id) == count, 10)
        for i in range(count):
            client.client.unsubscribe(f"gc/{i}")
        assert wait_until(lambda: subscriptions(node, client_id) == 0, 10)
    finally:
        client.disconnect()


def test_deletes_are_collected_everywhere_before_and_after_a_leave(nodes: list[ClusterNode]) -> None:
    join_all(nodes)
    churn_subscriptions(nodes[0], "gc-a", 20)
    assert wait_until(lambda: collected(nodes), 30), [store_stats(n) for n in nodes]
    before = store_stats(nodes[1])["gc_dots_pruned"]
    assert before >= 20, "the subscribe dots the unsubscribes superseded were collected"
    leave = nodes[0].admin("cluster", "leave", f"node={nodes[2].name}")
    assert leave.returncode == 0, leave.stderr
    churn_subscriptions(nodes[1], "gc-b", 20)
    assert wait_until(lambda: collected(nodes[:2]), 30), [store_stats(n) for n in nodes[:2]]
    assert store_stats(nodes[1])["gc_dots_pruned"] >= before + 20
