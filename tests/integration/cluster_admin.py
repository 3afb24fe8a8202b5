"""What the real `vmq-admin` says on a node of a test cluster: whether it is ready, the sessions of the whole
cluster, its metrics."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.cluster import ClusterNode


def ready(node: ClusterNode) -> bool:
    """`vmq-admin node status`: the node says it is ready."""
    answer = node.admin("node", "status", "--json")
    return answer.returncode == 0 and json.loads(answer.stdout)[0]["Ready"] is True


def sessions(node: ClusterNode) -> list[dict[str, Any]]:
    """`vmq-admin session show` of the whole cluster: client id, node, online."""
    answer = node.admin("session", "show", "--client_id", "--node", "--is_online", "limit=10000", "--json")
    assert answer.returncode == 0, answer.stderr
    rows: list[dict[str, Any]] = json.loads(answer.stdout)
    return rows


def metrics(node: ClusterNode) -> dict[str, Any]:
    """`vmq-admin metrics show` on the node: metric name -> value."""
    answer = node.admin("metrics", "show", "--json")
    assert answer.returncode == 0, answer.stderr
    return {row["Metric"]: row["Value"] for row in json.loads(answer.stdout)}
