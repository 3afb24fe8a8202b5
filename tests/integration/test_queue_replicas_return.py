"""Queue replicas (issue 18): the old owner comes back with its old disk after a replica took over.

Real node processes on 127.0.0.11 upwards (majority readiness, `queue.failover_timeout = 0s`), real paho
clients, the real vmq-admin. A holds offline persistent QoS 2 sessions with queued messages; A is killed with
`kill -9`, its disk kept; the subscribers reconnect on C, which recovers their messages from the queue
replicas; then A starts again from its old disk and hands its (stale) queues over to C. The rule
(docs/replication.md, "Divergent copies"): the later owner's queue wins, the old owner's handover adds only
messages C never had, so no QoS 2 message is delivered a second time and none is missing.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.clients import PahoClient
from tests.integration.cluster import ClusterNode, heal, partition_chain, start_cluster
from tests.integration.cluster_admin import metrics
from tests.integration.conftest import wait_until
from tests.integration.partitions import isolate
from tests.integration.queue_replicas import MESSAGES, SUBSCRIBERS, lose, majority, queue_offline, serving_without

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy queue replicas")]

__all__ = ["majority"]  # the fixture this module's tests take


def sessions_on(node: ClusterNode, ids: list[str]) -> int:
    """How many of the client ids `vmq-admin session show` lists as held by `node` (moving ones included)."""
    answer = node.admin("session", "show", f"--node={node.name}", "--client_id", "--json")
    assert answer.returncode == 0, answer.stderr
    listed = {row["client_id"] for row in json.loads(answer.stdout)}
    return len(listed & set(ids))


def reconnect_all(node: ClusterNode, ids: list[str], payloads: set[bytes]) -> tuple[list[PahoClient],
                                                                                   Counter[bytes]]:
    """Every subscriber reconnects (persistent) on `node`, stays connected, and reads its share: all of
    `payloads`, each once. (the clients, how often each payload arrived)"""
    clients = [node.client(5, cid, clean=False, session_expiry=3600) for cid in ids]
    received: Counter[bytes] = Counter()
    share = MESSAGES // SUBSCRIBERS
    for client in clients:
        received.update(bytes(m.payload) for m in client.collect(share, 30))
    assert set(received) == payloads and max(received.values()) == 1
    return clients, received


def nothing_twice_after_handover(old: ClusterNode, new: ClusterNode, ids: list[str], clients: list[PahoClient],
                                 received: Counter[bytes], payloads: set[bytes]) -> None:
    """`old` finds `new` named as the owner of its sessions and hands each over (its whole old queue): once
    that is done, the subscribers (still connected to `new`) got no message a second time, and none is
    missing; `new` counts each message of the handover it already had as skipped."""
    wait_until(lambda: sessions_on(old, ids) == 0, 60, interval=0.5, what="the old owner handed its sessions over")
    skipped = metrics(new).get("broker.handover_already_recovered", 0)
    deadline = time.monotonic() + 3.0  # what the new owner passes on of the handed-over queues: read it
    while time.monotonic() < deadline:
        for client in clients:
            while not client.messages.empty():
                received[bytes(client.messages.get_nowait().payload)] += 1
        time.sleep(0.1)
    duplicated = sorted(p for p, n in received.items() if n > 1)
    assert not duplicated, f"{len(duplicated)} messages delivered twice, e.g. {duplicated[:3]}"
    assert set(received) == payloads
    assert skipped >= MESSAGES


def replicated(owner: ClusterNode) -> None:
    wait_until(lambda: metrics(owner).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="the owner's replica operations acknowledged")


def unreachable_from(node: ClusterNode, lost: ClusterNode) -> bool:
    return not any(r["Node"] == lost.name and r["Reachable"] for r in node.show())


@pytest.mark.parametrize("qos", [2, 1])
def test_old_owner_back_with_its_disk_delivers_nothing_twice_and_loses_nothing(
        majority: list[ClusterNode], qos: int) -> None:
    """Issue 18, divergent copies: 1,000 acknowledged messages for 50 offline sessions on A; A killed (disk
    kept); the subscribers reconnect on C and get all 1,000 (recovered from the replicas), acknowledging
    each; A starts again with its old queues and hands them over to C: the subscribers, still connected,
    get none of them a second time (QoS 2: exactly once; QoS 1: the same rule applies), and C counts each
    message it already had as skipped."""
    a, b, c = majority
    ids, _topics, payloads = queue_offline(a, b, f"return{qos}", qos=qos)
    replicated(a)
    a.kill9()  # its data directory stays: it comes back with its old queues
    serving_without(c, a)
    clients, received = reconnect_all(c, ids, payloads)
    a.start()
    wait_until(lambda: not unreachable_from(c, a), 30, interval=0.2, what="C sees A again")
    nothing_twice_after_handover(a, c, ids, clients, received, payloads)


def test_old_owner_cut_off_past_the_failover_timeout_delivers_nothing_twice_after_the_heal(
        majority: list[ClusterNode]) -> None:
    """The same with A alive but cut off from B and C (iptables) for longer than `queue.failover_timeout`:
    C recovers the sessions from B's copies; after the heal A hands its queues over; QoS 2, nothing twice."""
    a, b, c = majority
    ids, _topics, payloads = queue_offline(a, b, "cutoff", qos=2)
    replicated(a)
    with partition_chain():
        isolate(majority, a)
        serving_without(c, a)
        clients, received = reconnect_all(c, ids, payloads)
        heal()
        wait_until(lambda: not unreachable_from(c, a), 30, interval=0.2, what="C sees A again")
        nothing_twice_after_handover(a, c, ids, clients, received, payloads)


def delivered_after_a_loss(a: ClusterNode, b: ClusterNode, c: ClusterNode, tag: str, majority: bool = True
                           ) -> tuple[list[str], Counter[bytes], set[bytes]]:
    """1,000 QoS 2 messages queued for 50 offline sessions on A (published on B); A killed with its disk kept;
    the subscribers reconnect on C, get all of them (recovered from the replicas) and go offline again.
    (client ids, how often each payload arrived, the payloads)"""
    ids, _topics, payloads = queue_offline(a, b, tag, qos=2)
    replicated(a)
    a.kill9()
    if majority:
        serving_without(c, a)
    else:  # trade_consistency: C serves without a majority
        wait_until(lambda: unreachable_from(c, a), 20, interval=0.2, what="C sees A unreachable")
    on_c, received = reconnect_all(c, ids, payloads)
    for client in on_c:
        client.disconnect()
    return ids, received, payloads


def test_a_session_moved_on_to_a_third_node_gets_nothing_twice_when_the_old_owner_returns(
        majority: list[ClusterNode]) -> None:
    """Issue 18, divergent copies across a move: A killed (disk kept); the subscribers reconnect on C, which
    recovers their QoS 2 messages from the replicas; they get all 1,000, go offline, and reconnect on B, so C
    hands the sessions over to B (with the names of what it recovered: the lineage); then A starts again and
    hands its stale queues over to B: the subscribers, connected to B, get none of them a second time."""
    a, b, c = majority
    ids, received, payloads = delivered_after_a_loss(a, b, c, "moved")
    on_b = [b.client(5, cid, clean=False, session_expiry=3600) for cid in ids]
    wait_until(lambda: sessions_on(c, ids) == 0, 30, interval=0.5, what="C handed the sessions over to B")
    assert metrics(b).get("broker.lineage_inherited", 0) >= MESSAGES
    a.start()
    wait_until(lambda: not unreachable_from(b, a), 30, interval=0.2, what="B sees A again")
    nothing_twice_after_handover(a, b, ids, on_b, received, payloads)


def test_a_session_recovered_twice_gets_nothing_twice_when_the_first_owner_returns(tmp_path: Path) -> None:
    """Issue 18, divergent copies after two losses (trade_consistency, R = 3): A killed (disk kept); the
    subscribers reconnect on C, which recovers their 1,000 QoS 2 messages from the replicas and delivers them;
    C is lost with its disk; the subscribers reconnect on B, which recovers the sessions from C's copies, and
    with them the names of what C had taken from A (the lineage, replicated with the copies); A starts again
    and hands its stale queues over to B: nothing is delivered twice."""
    a, b, c = nodes = start_cluster(tmp_path, {"trade_consistency": "on", "queue.replicas": "3",
                                               "queue.failover_timeout": "0s"})
    try:
        ids, received, payloads = delivered_after_a_loss(a, b, c, "twice", majority=False)
        wait_until(lambda: metrics(b).get("queue_replica.copies_lineage", 0) >= SUBSCRIBERS, 20, interval=0.3,
                   what="B holds C's copies with their lineage")
        lose(c)
        wait_until(lambda: unreachable_from(b, c), 20, interval=0.2, what="B sees C unreachable")
        on_b = [b.client(5, cid, clean=False, session_expiry=3600) for cid in ids]
        wait_until(lambda: metrics(b).get("broker.lineage_inherited", 0) >= MESSAGES, 20, interval=0.3,
                   what="B inherited the lineage from C's copies")
        a.start()
        wait_until(lambda: not unreachable_from(b, a), 30, interval=0.2, what="B sees A again")
        nothing_twice_after_handover(a, b, ids, on_b, received, payloads)
    finally:
        for node in nodes:
            node.stop()
