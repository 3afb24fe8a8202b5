"""cluster.discovery with real node processes on 127.0.0.11-13 (docs/cluster.md, "Joining at start-up"): nodes
whose configurations list each other, started in a shuffled order with delays or side by side, end as one
cluster with no `vmq-admin cluster join`; a restart joins nothing again and duplicates no member; a node made to
leave does not come back by itself, not even after a restart; a node listing a peer that is down keeps serving
and retrying without flooding its log."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.ports import free_port
from tests.integration.cluster import ClusterNode, start_all
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.timeout(240)

FAST = {"cluster.discovery_interval": "200ms", "cluster.discovery_max_interval": "2s", "log.console": "json"}
JOINED = "cluster discovery: joined"
IDLE = "cluster discovery: nothing to do"
FAILED = "cluster discovery: cannot join yet"


def listing_each_other(workdir: Path, count: int, extra: dict[str, Any] | None = None) -> list[ClusterNode]:
    """`count` nodes whose cluster.discovery lists all of them (each node itself too: it is ignored)."""
    nodes = [ClusterNode(i, workdir, {**FAST, **(extra or {})}) for i in range(1, count + 1)]
    peers = ", ".join(node.discovery for node in nodes)
    for node in nodes:
        node.settings["cluster.discovery"] = peers
    return nodes


def records(node: ClusterNode, since: int = 0) -> list[dict[str, Any]]:
    """The node's JSON log records from byte `since` of its log."""
    out = []
    with node.log.open("rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a line being written
    return out


def events(node: ClusterNode, event: str, since: int = 0) -> list[dict[str, Any]]:
    return [r for r in records(node, since) if str(r.get("event", "")).startswith(event)]


def members(node: ClusterNode) -> list[str] | None:
    answer = node.admin("cluster", "show", "--json")
    if answer.returncode != 0:
        return None
    return sorted(row["Node"] for row in json.loads(answer.stdout))


def one_cluster(nodes: list[ClusterNode]) -> bool:
    """Every node shows exactly these members, each once, all ready."""
    names = sorted(node.name for node in nodes)
    for node in nodes:
        answer = node.admin("cluster", "show", "--json")
        if answer.returncode != 0:
            return False
        rows = json.loads(answer.stdout)
        if sorted(row["Node"] for row in rows) != names or not all(row["Ready"] for row in rows):
            return False
    return True


def left_idle(node: ClusterNode, since: int) -> bool:
    """The node logged that discovery does nothing because it left its cluster."""
    return any("left its cluster" in str(r.get("why")) for r in events(node, IDLE, since))


def stop_all(nodes: list[ClusterNode]) -> None:
    for node in nodes:
        node.stop()


def test_three_nodes_listing_each_other_become_one_cluster(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    nodes = listing_each_other(tmp_path, 3)
    order = rng.sample(nodes, len(nodes))
    try:
        for node in order:
            node.start()
            time.sleep(rng.uniform(0.0, 1.5))  # a staggered start, not an assertion about time
        wait_until(lambda: one_cluster(nodes), 60, interval=0.5, what=f"one cluster of 3 (start order "
                   f"{[n.short for n in order]}, seed {seed})")
        wait_until(lambda: all(events(n, IDLE) for n in nodes), 30, what="every node settled")

        # A restart of a joined node does nothing: no join, the same incarnation, no member twice.
        restarted = rng.choice(nodes)
        incarnations = {row["Node"]: row["Incarnation"] for row in nodes[0].show()}
        since = restarted.log.stat().st_size
        restarted.stop()
        restarted.start()
        wait_until(lambda: one_cluster(nodes), 60, interval=0.5, what="the cluster of 3 after a restart")
        wait_until(lambda: events(restarted, IDLE, since), 30, what="the restarted node settled")
        assert events(restarted, JOINED, since) == []
        assert events(restarted, FAILED, since) == []
        for node in nodes:
            rows = node.show()
            assert len(rows) == 3
            assert {row["Node"]: row["Incarnation"] for row in rows} == incarnations

        # The anchor (lowest name) is made to leave: it stays out, although its configuration still lists the
        # others, also after a restart; the two others do not try to bring it back.
        leaving, *remaining = sorted(nodes, key=lambda n: n.name)
        marks = {n.name: n.log.stat().st_size for n in nodes}
        answer = remaining[0].admin("cluster", "leave", f"node={leaving.name}")
        assert answer.returncode == 0, answer.stderr
        wait_until(lambda: members(leaving) == [leaving.name], 30, what="the node that left alone")
        wait_until(lambda: left_idle(leaving, marks[leaving.name]), 30, what="discovery idle on the node that left")
        wait_until(lambda: one_cluster(remaining), 30, interval=0.5, what="the two remaining members")
        # n2 is the anchor now; n3 is in a cluster with it
        wait_until(lambda: all(events(n, IDLE, marks[n.name]) for n in remaining), 30, what="the others settled")
        leaving.stop()
        since = leaving.log.stat().st_size
        leaving.start()
        wait_until(lambda: left_idle(leaving, since), 30, what="discovery idle on the restarted node that left")
        assert members(leaving) == [leaving.name]
        assert leaving.health()[0] == 503
        assert one_cluster(remaining)
        for node in nodes:
            assert events(node, JOINED, marks[node.name]) == []
            assert events(node, FAILED, marks[node.name]) == []
    finally:
        stop_all(nodes)


@pytest.mark.parametrize("attempt", [1, 2])
def test_two_nodes_started_side_by_side_join_each_other_once(tmp_path: Path, attempt: int) -> None:
    """Both are new and alone: each may try the other at the same moment (the anchor too, being alone)."""
    nodes = listing_each_other(tmp_path, 2)
    try:
        start_all(nodes)
        wait_until(lambda: one_cluster(nodes), 60, interval=0.5, what="one cluster of 2")
        for node in nodes:
            assert len(node.show()) == 2
    finally:
        stop_all(nodes)


def test_a_peer_that_is_down_is_retried_without_flooding_the_log(tmp_path: Path) -> None:
    node = ClusterNode(1, tmp_path, {"cluster.discovery_interval": "100ms", "cluster.discovery_max_interval": "5s",
                                     "log.console": "json", "log.console.level": "debug"})
    down = f"n9@127.0.0.19:{free_port('127.0.0.19')}"  # nothing listens there
    node.settings["cluster.discovery"] = f"{node.discovery}, {down}"
    try:
        node.start()
        start = time.monotonic()
        wait_until(lambda: len(events(node, FAILED)) >= 6, 60, what="six failed attempts")
        elapsed = time.monotonic() - start
        failures = events(node, FAILED)
        warnings = [r for r in failures if r.get("level") == "warning"]
        assert all(r["peer"] == down and "127.0.0.19" in r["reason"] for r in failures)
        # one warning, then one per cluster.discovery_max_interval (5 s): the rest are debug lines
        assert 1 <= len(warnings) <= 2 + elapsed / 5.0, (len(warnings), elapsed)
        assert len(warnings) < len(failures)
        # meanwhile the node serves on its own (a cluster of one)
        assert node.health()[0] == 200
        client = node.client(client_id="alone")  # CONNACK success, or AssertionError
        client.subscribe("alone/t", qos=1)
        client.publish("alone/t", b"served", qos=1)
        assert client.get().payload == b"served"
        # and it stops at SIGTERM while discovery retries (its task ends with the node: a clean exit, not a kill)
        process = node.proc
        assert process is not None
        node.stop()
        assert process.returncode == 0, node.log_tail()
    finally:
        node.stop()
