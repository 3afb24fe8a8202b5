"""Membership churn on real nodes (issue 34): a `cluster leave -k` that cannot finish ends with a member that
serves, and a node that joins takes no client before the cluster's records are here; nothing acknowledged is lost.

The scenario of the `membership-churn` experiment, made deterministic: three real nodes, a persistent session
with acknowledged messages queued on n3 whose client id ranks n2 next (the node its session moves to when n3
leaves), n2 cut off from n1 and n3 with iptables (so that handover cannot finish), and `leave n3 -k` run on n1.
The leave is given up on n3 (by its own deadline, or by a `cluster join` run on it): n3 opens its listeners
again, says so, and after the heal its client finds every acknowledged message.

The join: a node that left joins again as a new incarnation with an empty store. Until the discovery node's
records are here it knows no subscriber, so it must not acknowledge a publish; the join is held open by pausing
the discovery node (SIGSTOP), so the window lasts the whole JOIN_TIMEOUT instead of a few milliseconds.
"""

from __future__ import annotations

import shutil
import threading

import pytest

from tests.integration.clients import RawClient, unique
from tests.integration.cluster import ClusterNode, cluster_ready, cut, heal, partition_chain, port_open
from tests.integration.conftest import wait_until
from vmqpy.cluster.leader import ranking

pytestmark = [
    pytest.mark.integration,
    pytest.mark.vmqpy_only("vmqpy clustering"),
    pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is installed by make test"),
]

PERSISTENT = {"session_expiry_interval": 3600}
MESSAGES = 20


def health(node: ClusterNode) -> tuple[int, str]:
    """The status of `node`'s /health and the reason it gives."""
    status, body = node.health()
    return status, str(body.get("reason", ""))


def queue_on(n3: ClusterNode, publisher_node: ClusterNode, target: ClusterNode) -> tuple[str, list[str]]:
    """A persistent session on n3 with MESSAGES acknowledged QoS 1 messages queued for it, whose client id
    ranks `target` first among the other two nodes."""
    others = sorted({publisher_node.name, target.name})
    client_id = next(
        cid for cid in (unique("stranded-") for _ in range(1000)) if ranking(cid, others)[0] == target.name
    )
    sub = RawClient(n3.mqtt_port, n3.host, 5)
    sub.connect(client_id, clean=False, props=PERSISTENT)
    sub.subscribe((f"{client_id}/t", 1))
    sub.disconnect()
    wait_until(
        lambda: (
            publisher_node.admin("subscription", "show", f"client-id={client_id}", "--json").stdout.count('"Filter"')
            == 1
        ),
        10,
        what="the subscription replicated",
    )
    pub = RawClient(publisher_node.mqtt_port, publisher_node.host, 5)
    pub.connect(unique("pub-"))
    acked = []
    for i in range(MESSAGES):
        ack = pub.publish(f"{client_id}/t", f"m{i}", qos=1)
        assert ack is not None and (ack.reason_code or 0) < 0x80, ack
        acked.append(f"m{i}")
    pub.disconnect()
    return client_id, acked


def drain(node: ClusterNode, client_id: str, want: list[str]) -> list[str]:
    client = RawClient(node.mqtt_port, node.host, 5)
    ack = client.connect(client_id, clean=False, props=PERSISTENT, timeout=10)
    assert ack.session_present, f"{client_id}: no session on {node.name}"
    got = [p.payload.decode() for p in client.recv_publishes(len(want), 15)]
    client.disconnect()
    return got


def test_a_leave_that_cannot_finish_in_a_netsplit_leaves_a_member_that_serves(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    client_id, acked = queue_on(n3, n1, n2)
    with partition_chain():
        cut(n1, n2)
        cut(n3, n2)
        wait_until(
            lambda: not cluster_ready([n1]) and not cluster_ready([n3]), 10, interval=0.1, what="n1 and n3 not ready"
        )
        answer = n1.admin("cluster", "leave", f"node={n3.name}", "-k", "-i", "1", "-t", "3")
        assert answer.returncode != 0, answer.stdout
        said = answer.stdout + answer.stderr
        # Still a member, in its own view and n1's, and its MQTT listener accepts connections again.
        assert port_open(n3.host, n3.mqtt_port), f"n3's listener is closed after the unfinished leave\n{said}"
        assert n3.name in {row["Node"] for row in n1.show()}
        assert "gave the leave up" in said and "serves" in said, said
        assert "leaving" not in health(n3)[1]
        heal()
        wait_until(lambda: cluster_ready(cluster), 15, interval=0.2, what="ready after the heal")
    assert port_open(n3.host, n3.mqtt_port)
    assert drain(n3, client_id, acked) == acked


def test_a_join_run_while_the_node_drains_gives_the_leave_up(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    client_id, acked = queue_on(n3, n1, n2)
    answers: list[str] = []
    with partition_chain():
        cut(n1, n2)
        cut(n3, n2)
        wait_until(
            lambda: not cluster_ready([n1]) and not cluster_ready([n3]), 10, interval=0.1, what="n1 and n3 not ready"
        )

        def leave() -> None:
            answer = n1.admin("cluster", "leave", f"node={n3.name}", "-k", "-i", "1", "-t", "60")
            answers.append(f"{answer.returncode}\n{answer.stdout}{answer.stderr}")

        command = threading.Thread(target=leave, daemon=True)
        command.start()
        wait_until(lambda: "leaving" in health(n3)[1], 10, interval=0.1, what="n3 draining")
        assert not port_open(n3.host, n3.mqtt_port)
        joined = n3.admin("cluster", "join", f"discovery-node={n1.discovery}")
        assert joined.returncode == 0, joined.stderr
        assert "given up" in joined.stdout, joined.stdout
        command.join(30)
        assert answers and not answers[0].startswith("0\n"), answers
        assert "a cluster join was run on it" in answers[0], answers[0]
        assert port_open(n3.host, n3.mqtt_port)
        heal()
        wait_until(lambda: cluster_ready(cluster), 15, interval=0.2, what="ready after the heal")
    assert drain(n3, client_id, acked) == acked


def test_a_node_that_joins_again_acknowledges_no_publish_before_it_knows_the_subscribers(
        cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    client_id = unique("waiting-")
    sub = RawClient(n1.mqtt_port, n1.host, 5)
    sub.connect(client_id, clean=False, props=PERSISTENT)
    sub.subscribe((f"{client_id}/t", 1))
    sub.disconnect()
    left = n1.admin("cluster", "leave", f"node={n3.name}")
    assert left.returncode == 0, left.stderr
    wait_until(lambda: health(n3)[0] == 503 and "left" in health(n3)[1], 15, interval=0.2, what="n3 out")
    answers: list[int] = []
    n1.pause()
    n2.pause()
    try:
        def join() -> None:
            answers.append(n3.admin("cluster", "join", f"discovery-node={n1.discovery}").returncode)

        command = threading.Thread(target=join, daemon=True)
        command.start()
        wait_until(lambda: "left" not in health(n3)[1], 10, interval=0.05, what="n3 a new incarnation")
        acked: list[str] = []
        pub = RawClient(n3.mqtt_port, n3.host, 5)
        connack = pub.connect(unique("pub-"), expect_rc=None)
        if connack.reason_code == 0:
            ack = pub.publish(f"{client_id}/t", "during the join", qos=1)
            if ack is not None and (ack.reason_code or 0) < 0x80:
                acked.append("during the join")
        pub.close()
        command.join(30)
    finally:
        n1.resume()
        n2.resume()
    assert answers and answers[0] != 0, "the join cannot finish while its discovery node is paused"
    assert acked == [], "n3 acknowledged a publish while it knew no subscriber"
    assert connack.reason_code == 0x88, connack
    # It stays out of service until a join succeeds, and then serves.
    assert "joining" in health(n3)[1]
    joined = n3.admin("cluster", "join", f"discovery-node={n1.discovery}")
    assert joined.returncode == 0, joined.stderr
    wait_until(lambda: cluster_ready(cluster), 15, interval=0.2, what="ready after the join")
    assert drain(n1, client_id, []) == []
