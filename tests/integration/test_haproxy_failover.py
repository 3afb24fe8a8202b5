"""Failover behind the real HAProxy (issue 16): the node holding the most persistent sessions of a steady QoS 1
load is killed with `kill -9` (its disk stays). HAProxy's health check takes it out, its clients reconnect
through HAProxy to the other nodes, and no acknowledged QoS 1 message is lost, once the killed node is back:

- `cluster.readiness = majority`: the two other nodes stay ready and take the sessions over (from the metadata
  store, their old node being unreachable); the load goes on; the restarted node hands the messages it had
  queued for them to their new nodes (docs/deployment.md, "What a client sees ... when the cluster splits");
- stop-serving (the default): the cluster is not ready while a member is unreachable, so every publish is
  refused (5.0 PUBACK 0x83 / no PUBACK) and nothing is acknowledged until the node is back; then everything
  acknowledged is delivered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from chaos.haproxy import HAPROXY
from tests.integration.cluster import ClusterNode, cluster_ready
from tests.integration.cluster_admin import sessions
from tests.integration.conftest import wait_until
from tests.integration.haproxy_cluster import (
    HAProxy,
    Load,
    all_online_once,
    readiness,
    running_cluster,
    running_haproxy,
)

pytestmark = [
    pytest.mark.vmqpy_only("a vmqpy cluster behind HAProxy"),
    pytest.mark.skipif(not HAPROXY.exists(), reason="HAProxy is not installed (scripts/debian-deps.sh)"),
]

SUBSCRIBERS = 60  # about 20 persistent sessions per node


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    with running_cluster(tmp_path_factory.mktemp("failover-cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def haproxy(nodes: list[ClusterNode], tmp_path_factory: pytest.TempPathFactory) -> Iterator[HAProxy]:
    with running_haproxy(tmp_path_factory.mktemp("failover-haproxy"), nodes) as proxy:
        yield proxy


def busiest(load: Load, nodes: list[ClusterNode]) -> tuple[ClusterNode, int]:
    """The node holding the most sessions of the load's subscribers, and how many."""
    held = {n.name: 0 for n in nodes}
    for row in sessions(nodes[0]):
        if row["client_id"] in load.subs and row["is_online"]:
            held[row["node"]] += 1
    name = max(held, key=lambda n: held[n])
    return next(n for n in nodes if n.name == name), held[name]


def counters(nodes: list[ClusterNode]) -> str:
    """The nodes' counters that tell where a message went, for a failure's message."""
    wanted = ("drop", "handover", "handed", "adopt", "forward", "moved", "pass", "refused", "migration")
    lines = []
    for node in nodes:
        values = {r["Metric"]: r["Value"] for r in node.api("metrics/show")}
        lines.append(f"{node.name}: " + ", ".join(f"{k}={v}" for k, v in sorted(values.items())
                                                 if any(w in k for w in wanted) and v))
    return "\n".join(lines)


def kill_and_restart(target: ClusterNode, nodes: list[ClusterNode], haproxy: HAProxy, load: Load,
                     majority: bool) -> None:
    running = [n for n in nodes if n is not target]
    target.kill9()
    wait_until(lambda: haproxy.server_status()[target.short] != "UP", 15, interval=0.2, what="HAProxy takes it out")
    if majority:
        wait_until(lambda: all_online_once(load, running, avoid=target.name), 45, interval=0.5,
                   what="every client online once on the two other nodes")
        time.sleep(2.0)  # traffic while the node is down
    else:
        time.sleep(1.5)  # the last acknowledgements of before the kill come in
        acknowledged = sum(len(a) for a in load.acked.values())
        time.sleep(2.0)  # the cluster is not ready: publishes are refused, none acknowledged
        assert sum(len(a) for a in load.acked.values()) == acknowledged, "stop-serving acknowledged publishes"
    target.stop()
    target.start()
    wait_until(lambda: cluster_ready(nodes), 45, interval=0.3, what="the restarted node ready again")
    wait_until(lambda: haproxy.server_status()[target.short] == "UP", 20, interval=0.2, what="HAProxy takes it back")
    wait_until(lambda: all_online_once(load, nodes), 45, interval=0.5, what="every client online once")


@pytest.mark.parametrize("mode", ["majority", "all"])
def test_a_killed_node_loses_no_acknowledged_message(nodes: list[ClusterNode], haproxy: HAProxy, mode: str) -> None:
    with readiness(nodes, mode):
        load = Load(haproxy, subscribers=SUBSCRIBERS).start()
        try:
            wait_until(lambda: all_online_once(load, nodes), 30, interval=0.3, what="the load connected")
            time.sleep(1.0)
            target, held = busiest(load, nodes)
            assert held >= 10, f"{target.name} holds only {held} sessions"
            kill_and_restart(target, nodes, haproxy, load, majority=mode == "majority")
            time.sleep(1.0)  # traffic after the restart
            try:
                load.finish()
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{counters(nodes)}") from None
        finally:
            load.stop()
