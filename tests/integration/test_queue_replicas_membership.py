"""Queue replicas follow membership changes (issue 18 test (6)): the rebalancer fills a node that joins with
the queues of the sessions whose replica node it becomes, and only then the node it replaces drops them; and a
replica cut off while the messages are written catches up after the heal (test (4)).

Real node processes on 127.0.0.11 upwards, real clients, the real vmq-admin; the helpers are
test_queue_replicas.py's (docs/replication.md section 11).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import ClusterNode, cluster_ready, cut, heal, partition_chain, start_cluster
from tests.integration.cluster_admin import metrics
from tests.integration.conftest import wait_until
from tests.integration.queue_replicas import MESSAGES, SUBSCRIBERS, collect_all, lose, queue_offline, serving_without
from vmqpy.cluster.leader import ranking

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy queue replicas")]

MAJORITY = {"cluster.readiness": "majority", "queue.failover_timeout": "0s"}


@pytest.fixture
def two_then_three(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    """A and B joined; C started (not joined)."""
    nodes = start_cluster(tmp_path, MAJORITY, count=2)
    try:
        nodes.append(ClusterNode(3, tmp_path, MAJORITY).start())
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def test_a_join_moves_replicas_to_the_new_node_and_r_copies_exist_after_it(
        two_then_three: list[ClusterNode]) -> None:
    """2 nodes, R=2: 50 offline sessions on A with 1,000 acknowledged messages, all copied to B. C joins: the
    sessions whose ranking puts C before B get their whole queue on C, then B drops them; A is lost with its
    disk and the subscribers get every message on C (from C's own copies and from B's)."""
    a, b, c = two_then_three
    ids, _topics, payloads = queue_offline(a, b, "join")
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="A's replica operations acknowledged")
    assert metrics(b).get("queue_replica.copies_messages") == MESSAGES

    answer = c.admin("cluster", "join", f"discovery-node={a.discovery}")
    assert answer.returncode == 0, answer.stderr
    wait_until(lambda: cluster_ready([a, b, c]), 20, interval=0.2, what="C joined")
    on_c = [cid for cid in ids if ranking(cid, [b.name, c.name])[0] == c.name]
    assert 0 < len(on_c) < SUBSCRIBERS  # 50 random client ids: both sides get some
    share = MESSAGES // SUBSCRIBERS

    def moved() -> bool:
        ma, mb, mc = metrics(a), metrics(b), metrics(c)
        return (ma.get("queue_replica.sessions_under_replicated") == 0
                and ma.get("queue_replica.operations_pending") == 0
                and mc.get("queue_replica.copies_messages") == share * len(on_c)
                and mb.get("queue_replica.copies_messages") == share * (SUBSCRIBERS - len(on_c)))

    wait_until(moved, 30, interval=0.3, what="C holds the moved sessions' queues and B dropped them")
    assert metrics(c).get("queue_replica.copies_sessions") == len(on_c)
    own = next(r for r in a.show() if r["Node"] == a.name)
    assert (own["Under-replicated sessions"], own["Under-replicated messages"]) == (0, 0)

    lose(a)
    serving_without(c, a)
    received = collect_all(c, ids)
    assert sorted(received) == sorted(payloads)


@pytest.fixture
def three(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    nodes = start_cluster(tmp_path, MAJORITY)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def replica_lines(node: ClusterNode) -> list[dict[str, Any]]:
    """The queue_replicas lines of `node`'s replication log (docs/replication-log.md)."""
    path = node.data_dir / "replication.log"
    lines = [json.loads(line) for line in path.read_text().splitlines() if '"queue_replicas"' in line]
    return [line for line in lines if line.get("event") == "queue_replicas"]


def test_a_replica_cut_off_during_the_writes_catches_up_after_the_heal(three: list[ClusterNode]) -> None:
    """Issue 18 test (4), majority mode: B is cut off from A while 1,000 messages for A's offline sessions are
    published on C and acknowledged (those whose replica node is B are under-replicated); after the heal A's
    operations are all acknowledged; A is lost with its disk: the subscribers get every message on C."""
    a, b, c = three
    with partition_chain():
        cut(a, b)
        wait_until(lambda: not any(r["Node"] == b.name and r["Reachable"] for r in a.show()), 20, interval=0.2,
                   what="A sees B unreachable")
        ids, _topics, payloads = queue_offline(a, c, "split")
        on_b = [cid for cid in ids if ranking(cid, [b.name, c.name])[0] == b.name]
        assert on_b
        assert metrics(a).get("queue_replica.under_replicated", 0) > 0
        heal()
    wait_until(lambda: cluster_ready([a, b, c]), 20, interval=0.2, what="healed")
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0
               and metrics(a).get("queue_replica.under_replicated") == 0, 30, interval=0.3,
               what="A's replica operations acknowledged after the heal")
    share = MESSAGES // SUBSCRIBERS
    assert metrics(b).get("queue_replica.copies_messages") == share * len(on_b)
    windows: list[list[dict[str, Any]]] = []  # each read of the lines, for the message

    def one_window() -> bool:
        windows.append(replica_lines(a))
        return [line["under_replicated"] for line in windows[-1]] == [True, False]

    try:
        wait_until(one_window, 10, interval=0.3, what="A's replication log: one window of under-replication, "
                   "started and ended")
    except AssertionError as late:
        raise AssertionError(f"{late}; its queue_replicas lines at the end: {windows[-1]}") from None
    assert replica_lines(a)[1]["peak_writes"] > 0  # the writes acknowledged with one copy missing
    lose(a)
    serving_without(c, a)
    received = collect_all(c, ids)
    assert sorted(received) == sorted(payloads)
