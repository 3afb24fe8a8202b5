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

from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until
from tests.integration.test_queue_replicas import (
    MESSAGES,
    SUBSCRIBERS,
    majority,
    metrics,
    queue_offline,
)

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy queue replicas")]

__all__ = ["majority"]  # the fixture, reused


def sessions_on(node: ClusterNode, ids: list[str]) -> int:
    """How many of the client ids `vmq-admin session show` lists as held by `node` (moving ones included)."""
    answer = node.admin("session", "show", f"--node={node.name}", "--client_id", "--json")
    assert answer.returncode == 0, answer.stderr
    listed = {row["client_id"] for row in json.loads(answer.stdout)}
    return len(listed & set(ids))


@pytest.mark.parametrize("qos", [2, 1])
def test_old_owner_back_with_its_disk_delivers_nothing_twice_and_loses_nothing(
        majority: list[ClusterNode], tmp_path: Path, qos: int) -> None:
    """Issue 18, divergent copies: 1,000 acknowledged messages for 50 offline sessions on A; A killed (disk
    kept); the subscribers reconnect on C and get all 1,000 (recovered from the replicas), acknowledging
    each; A starts again with its old queues and hands them over to C: the subscribers, still connected,
    get none of them a second time (QoS 2: exactly once; QoS 1: the same rule applies), and C counts each
    message it already had as skipped."""
    a, b, c = majority
    ids, _topics, payloads = queue_offline(a, b, f"return{qos}", qos=qos)
    wait_until(lambda: metrics(a).get("queue_replica.operations_pending") == 0, 20, interval=0.2,
               what="A's replica operations acknowledged")
    a.kill9()  # its data directory stays: it comes back with its old queues
    wait_until(lambda: not any(r["Node"] == a.name and r["Reachable"] for r in c.show()), 20, interval=0.2,
               what="C sees A unreachable")
    clients = [c.client(5, cid, clean=False, session_expiry=3600) for cid in ids]
    received: Counter[bytes] = Counter()
    share = MESSAGES // SUBSCRIBERS
    for client in clients:
        received.update(m.payload for m in client.collect(share, 30))
    assert set(received) == payloads and max(received.values()) == 1
    a.start()
    wait_until(lambda: any(r["Node"] == a.name and r["Reachable"] for r in c.show()), 30, interval=0.2,
               what="C sees A again")
    # A finds C named as the owner of its sessions and hands each over (its whole old queue) to C
    wait_until(lambda: sessions_on(a, ids) == 0, 60, interval=0.5, what="A handed its sessions over")
    skipped = metrics(c).get("broker.handover_already_recovered", 0)
    deadline = time.monotonic() + 3.0  # what C passes on of the handed-over queues is on its way: read it
    while time.monotonic() < deadline:
        for client in clients:
            while not client.messages.empty():
                received[client.messages.get_nowait().payload] += 1
        time.sleep(0.1)
    duplicated = sorted(p for p, n in received.items() if n > 1)
    assert not duplicated, f"{len(duplicated)} messages delivered twice, e.g. {duplicated[:3]}"
    assert set(received) == payloads
    assert skipped >= MESSAGES
