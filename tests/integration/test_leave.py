"""`cluster leave` that sticks (issue 22): a removed node learns it under any timing, stays out across restarts,
serves no client, and comes back only through `cluster join`, as a new incarnation with an empty store.

Real nodes on 127.0.0.11 upwards, the real vmq-admin, real MQTT clients. The leave/rejoin cycles run
LEAVE_CYCLES times (3 in `make test`, 30 in `make test-long`; `LEAVE_CYCLES=30 .venv/bin/python -m pytest
tests/integration/test_leave.py -k cycles` is the long run of docs/cluster.md), with the random seed printed.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import Closed, RawClient, unique
from tests.integration.cluster import ClusterNode, cluster_ready, join_all
from tests.integration.conftest import chosen_seed, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

SEED = chosen_seed()
CYCLES = int(os.environ.get("LEAVE_CYCLES", "3"))
PERSISTENT = {"session_expiry_interval": 3600}
SERVER_UNAVAILABLE = 0x88


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    nodes = [ClusterNode(i, tmp_path).start() for i in (1, 2)]
    try:
        join_all(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def names(node: ClusterNode) -> set[str]:
    return {r["Node"] for r in node.show()}


def incarnation(node: ClusterNode) -> int:
    (row,) = [r for r in node.show() if r["Node"] == node.name]
    return int(row["Incarnation"])


def refuses_clients(node: ClusterNode) -> bool:
    client = RawClient(node.mqtt_port, node.host, 5)
    try:
        ack = client.connect(unique("probe-"), expect_rc=None)
        return ack.reason_code == SERVER_UNAVAILABLE and "left its cluster" in str(ack.props.get("reason_string"))
    finally:
        client.close()


def is_out(left: ClusterNode, rest: list[ClusterNode]) -> bool:
    """`left` knows it left (only itself in its view, /health 503) and no remaining node counts it."""
    if names(left) != {left.name}:
        return False
    status, _body = left.health()
    return status == 503 and all(left.name not in names(n) for n in rest)


def assert_out_and_stays_out(left: ClusterNode, rest: list[ClusterNode], watch: float = 3.0) -> None:
    wait_until(lambda: is_out(left, rest), 15, interval=0.2, what=f"{left.name} out of the cluster")
    assert refuses_clients(left)
    # It does not link back by itself: the views stay apart for a while (a relink would show within a second).
    deadline = time.monotonic() + watch
    while time.monotonic() < deadline:
        assert is_out(left, rest), (left.log_tail(), [n.log_tail() for n in rest])
        time.sleep(0.3)
    assert "link refused" in left.log.read_text() or "was removed from the cluster" in left.log.read_text()


def rejoin(node: ClusterNode, discovery: ClusterNode, everyone: list[ClusterNode]) -> None:
    answer = node.admin("cluster", "join", f"discovery-node={discovery.discovery}")
    assert answer.returncode == 0, answer.stdout + answer.stderr + node.log_tail()
    wait_until(lambda: cluster_ready(everyone), 20, interval=0.2, what="every node sees every node ready")


def test_a_node_that_leaves_learns_it_stays_out_and_rejoins_as_a_new_incarnation(pair: list[ClusterNode]) -> None:
    c1, c2 = pair
    before = incarnation(c2)
    # A retained message every node holds; deleted on c1 while c2 is out: c2's old store must not bring it back.
    topic = unique("kept/")
    publisher = RawClient(c2.mqtt_port, c2.host, 5)
    publisher.connect(unique("pub-"))
    publisher.publish(topic, b"old", qos=1, retain=True)
    publisher.disconnect()
    wait_until(lambda: c1.admin("retain", "show", "--json").stdout.count(topic) == 1, 10, what="retained on c1")

    answer = c1.admin("cluster", "leave", f"node={c2.name}")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert_out_and_stays_out(c2, [c1])
    status, body = c2.health()
    assert status == 503 and "left its cluster" in json.dumps(body)

    # A restart keeps it out: it remembers the removal (DATA_DIR/left).
    c2.stop()
    c2.start()
    assert_out_and_stays_out(c2, [c1], watch=1.0)

    eraser = RawClient(c1.mqtt_port, c1.host, 5)
    eraser.connect(unique("pub-"))
    eraser.publish(topic, b"", qos=1, retain=True)
    eraser.disconnect()

    rejoin(c2, c1, pair)
    assert incarnation(c2) != before
    assert not (c2.data_dir / "left").exists()
    for node in pair:
        sub = RawClient(node.mqtt_port, node.host, 5)
        sub.connect(unique("sub-"))
        sub.subscribe((topic, 1))
        sub.assert_silent(0.5)  # the deleted retained message did not come back with c2
        sub.disconnect()


def test_a_node_removed_while_down_learns_it_at_first_contact(tmp_path: Path) -> None:
    nodes = [ClusterNode(i, tmp_path).start() for i in (1, 2, 3)]
    try:
        join_all(nodes)
        n1, n2, n3 = nodes
        n3.kill9()
        wait_until(lambda: not any(r["Reachable"] for r in n1.show() if r["Node"] == n3.name), 10,
                   what="n3 unreachable")
        answer = n1.admin("cluster", "leave", f"node={n3.name}")
        assert answer.returncode == 0, answer.stdout + answer.stderr
        wait_until(lambda: cluster_ready([n1, n2]), 15, interval=0.2, what="n1 and n2 ready as two")
        n3.start()  # its old data directory: it still believes it is a member, until its first contact
        assert_out_and_stays_out(n3, [n1, n2])
        assert "removed from the cluster" in n3.log.read_text()
        rejoin(n3, n2, nodes)
    finally:
        for node in nodes:
            node.stop()


def test_leave_refusals_name_the_cause(pair: list[ClusterNode]) -> None:
    c1, c2 = pair
    answer = c1.admin("cluster", "leave", f"node={c2.name}")
    assert answer.returncode == 0, answer.stderr
    wait_until(lambda: is_out(c2, [c1]), 15, interval=0.2, what="c2 out")
    again = c2.admin("cluster", "leave", f"node={c1.name}")
    assert again.returncode != 0 and "left its cluster" in again.stderr, again.stderr
    alone = c1.admin("cluster", "leave", f"node={c1.name}")
    assert alone.returncode != 0 and "only member" in alone.stderr, alone.stderr


def queue_persistent(node: ClusterNode, client_id: str, topic: str) -> None:
    client = RawClient(node.mqtt_port, node.host, 5)
    client.connect(client_id, clean=False, props=PERSISTENT)
    client.subscribe((topic, 1))
    client.disconnect()


def test_leave_rejoin_cycles(pair: list[ClusterNode]) -> None:
    """Each cycle: persistent sessions on c2 with messages queued (acknowledged to their publisher, some sent
    while the leave runs), a leave (with -k on odd cycles; from c1 or from c2 itself), random delays; then
    c2 is out on both views and serves no client, every acknowledged message reaches its subscriber on c1
    (when -k moved the sessions), and c2 joins again."""
    print(f"random seed {SEED}, {CYCLES} cycles")
    rng = random.Random(SEED)
    c1, c2 = pair
    for cycle in range(CYCLES):
        kill_sessions = cycle % 2 == 1
        commander = rng.choice(pair)
        ids = [unique(f"cyc{cycle}-") for _ in range(3)]
        for cid in ids:
            queue_persistent(c2, cid, f"{cid}/t")
        wait_until(lambda ids=ids: all(c1.admin("subscription", "show", f"client-id={cid}", "--json").stdout
                                       .count('"Filter"') == 1 for cid in ids), 10, what="subscriptions replicated")
        acknowledged: dict[str, list[str]] = {cid: [] for cid in ids}
        stop = threading.Event()
        errors: list[BaseException] = []

        def publish(stop: threading.Event = stop, acked: dict[str, list[str]] = acknowledged,
                    errors: list[BaseException] = errors) -> None:
            try:
                publish_until(stop, acked)
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

        def publish_until(stop: threading.Event, acked: dict[str, list[str]], ids: list[str] = ids) -> None:
            # A QoS 1 publish forwarded to a node that leaves before acknowledging it closes the publisher's
            # connection without a PUBACK (docs/cluster.md): like any client, it connects again and goes on.
            pub: RawClient | None = None
            n = 0
            while not stop.is_set() and n < 200:
                if pub is None:
                    pub = RawClient(c1.mqtt_port, c1.host, 5)
                    pub.connect(unique("pub-"))
                cid = ids[n % len(ids)]
                payload = f"{cid}:{n}"
                n += 1
                try:
                    ack = pub.publish(f"{cid}/t", payload, qos=1)
                except Closed:
                    pub = None
                    continue
                if ack is not None and (ack.reason_code or 0) < 0x80:
                    acked[cid].append(payload)
                time.sleep(0.01)
            if pub is not None:
                pub.disconnect()

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        time.sleep(rng.uniform(0.05, 0.5))
        args = ["cluster", "leave", f"node={c2.name}"] + (["-k", "-i", "1", "-t", "30"] if kill_sessions else [])
        answer = commander.admin(*args)
        assert answer.returncode == 0, f"cycle {cycle} (seed {SEED}): {answer.stdout}{answer.stderr}"
        time.sleep(rng.uniform(0.0, 0.5))
        stop.set()
        publisher.join(30)
        assert not errors, f"cycle {cycle} (seed {SEED}): the publisher on c1 failed: {errors[0]!r}"
        assert_out_and_stays_out(c2, [c1], watch=rng.uniform(0.5, 1.5))
        if kill_sessions:
            for cid in ids:
                client = RawClient(c1.mqtt_port, c1.host, 5)
                assert client.connect(cid, clean=False, props=PERSISTENT, timeout=10).session_present, cid
                want = acknowledged[cid]
                got = [p.payload.decode() for p in client.recv_publishes(len(want), 10)] if want else []
                assert got == want, f"cycle {cycle} (seed {SEED}) {cid}: lost {sorted(set(want) - set(got))}"
                client.disconnect()
        time.sleep(rng.uniform(0.0, 0.3))
        rejoin(c2, c1, pair)
