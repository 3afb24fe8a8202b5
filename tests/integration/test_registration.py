"""Registration through the client id's leader and sessions moving between real nodes (VerneMQ's cluster
suite scenarios, as our own tests): one live session per client id, queues that follow their client."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import DISCONNECT, PUBLISH, Closed, RawClient, unique
from tests.integration.cluster import ClusterNode, start_cluster
from tests.integration.conftest import chosen_seed, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

SEED = chosen_seed()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    print(f"random seed {SEED}")
    nodes = start_cluster(tmp_path_factory.mktemp("registration"))
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def admin_rows(node: ClusterNode, *args: str) -> list[dict[str, Any]]:
    """The rows of a `vmq-admin ... --json` command on `node`."""
    answer = node.admin(*args, "--json")
    assert answer.returncode == 0, answer.stderr
    rows: list[dict[str, Any]] = json.loads(answer.stdout)
    return rows


SESSION_COLUMNS = ("--is_online", "--queued", "--waiting_acks")


def sessions(node: ClusterNode, client_id: str) -> list[dict[str, Any]]:
    """The sessions of `client_id` held by `node` (session show answers for the cluster: `--node` keeps one)."""
    return admin_rows(node, "session", "show", f"--client_id={client_id}", f"--node={node.name}", *SESSION_COLUMNS)


def sessions_all(node: ClusterNode) -> list[dict[str, Any]]:
    """Every session held by `node`."""
    return admin_rows(node, "session", "show", "--client_id", f"--node={node.name}", *SESSION_COLUMNS, "limit=100000")


def online_count(nodes: list[ClusterNode], client_id: str) -> int:
    return sum(1 for n in nodes for row in sessions(n, client_id) if row["is_online"])


def session_count(nodes: list[ClusterNode], client_id: str) -> int:
    return sum(len(sessions(n, client_id)) for n in nodes)


def raw(node: ClusterNode, version: int = 5) -> RawClient:
    return RawClient(node.mqtt_port, node.host, version)


PERSISTENT = {"session_expiry_interval": 3600}


def persistent_subscriber(node: ClusterNode, client_id: str, topic: str) -> None:
    client = raw(node)
    client.connect(client_id, clean=False, props=PERSISTENT)
    client.subscribe((topic, 1))
    client.disconnect()


def publish_from(node: ClusterNode, topic: str, payloads: list[str]) -> None:
    pub = raw(node)
    pub.connect(unique("pub-"))
    for payload in payloads:
        pub.publish(topic, payload, qos=1)
    pub.disconnect()


def drain(client: RawClient, n: int, timeout: float = 10.0) -> list[str]:
    return [p.payload.decode() for p in client.recv_publishes(n, timeout)]


def test_250_racing_connects_of_one_client_id_leave_one_session(cluster: list[ClusterNode]) -> None:
    """5 threads x 50 CONNECTs of one client id on random nodes: each one either is the last, or was taken
    over (5.0 DISCONNECT 0x8E); at the end the cluster holds exactly one session, online. (Owner records
    written in the same millisecond on two nodes once left none: tests/unit/cluster/test_registration_stamps.py.)"""
    client_id = unique("racer-")
    rng = random.Random(SEED)
    plans = [[rng.choice(cluster) for _ in range(50)] for _ in range(5)]
    clients: list[RawClient] = []
    lock = threading.Lock()
    errors: list[str] = []

    def run(plan: list[ClusterNode]) -> None:
        for node in plan:
            try:
                client = raw(node)
                ack = client.connect(client_id, expect_rc=None, timeout=15)
            except (OSError, TimeoutError, Closed) as exc:
                with lock:
                    errors.append(f"{node.name}: {exc!r}")
                continue
            with lock:
                if ack.reason_code != 0:
                    errors.append(f"{node.name}: CONNACK {ack.reason_code:#x}")
                clients.append(client)

    threads = [threading.Thread(target=run, args=(plan,)) for plan in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:5]
    assert len(clients) == 250
    try:
        wait_until(lambda: online_count(cluster, client_id) == 1, 10, what="one online session")
    except AssertionError as exc:
        rows = {n.name: sessions(n, client_id) for n in cluster}
        owners = {n.name: [r for r in admin_rows(n, "metadata", "dump", "prefix=session") if client_id in str(r)]
                  for n in cluster}
        raise AssertionError(f"{exc}: sessions {rows}, store {owners}") from None
    assert session_count(cluster, client_id) == 1
    alive = [c for c in clients if c.is_open(timeout=2.0)]
    assert len(alive) == 1
    for client in clients:
        if client is alive[0]:
            continue
        packets = client.wait_closed(5)
        assert [(p.type, p.reason_code) for p in packets][-1:] == [(DISCONNECT, 0x8E)], packets
    for client in clients:
        client.close()


def test_persistent_subscriber_gets_every_message_reconnecting_to_random_nodes(cluster: list[ClusterNode]) -> None:
    """20 QoS 1 messages published on another node while the subscriber is offline, five times, each time
    reconnecting to a random node: all delivered, with session present."""
    rng = random.Random(SEED + 1)
    client_id, topic = unique("wanderer-"), unique("wander/")
    home = rng.choice(cluster)
    persistent_subscriber(home, client_id, topic)
    for round_ in range(5):
        publish_from(rng.choice(cluster), topic, [f"{round_}-{i}" for i in range(20)])
        node = rng.choice(cluster)
        client = raw(node)
        ack = client.connect(client_id, clean=False, props=PERSISTENT, timeout=10)
        assert ack.session_present, f"round {round_} on {node.name}"
        assert sorted(drain(client, 20)) == sorted(f"{round_}-{i}" for i in range(20)), f"round {round_}"
        client.assert_silent(0.3)  # nothing twice
        client.disconnect()
    wait_until(lambda: session_count(cluster, client_id) == 1, 10, what="one session left in the cluster")


def test_racing_persistent_connects_leave_one_session_present_from_the_second_on(cluster: list[ClusterNode]) -> None:
    client_id = unique("persist-race-")
    rng = random.Random(SEED + 2)
    targets = [rng.choice(cluster) for _ in range(5)]
    acks: list[bool] = []
    clients: list[RawClient] = []
    lock = threading.Lock()

    def run(node: ClusterNode) -> None:
        client = raw(node)
        ack = client.connect(client_id, clean=False, props=PERSISTENT, timeout=15)
        with lock:
            acks.append(ack.session_present)
            clients.append(client)

    threads = [threading.Thread(target=run, args=(n,)) for n in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(acks) == 5
    assert sorted(acks) == [False, True, True, True, True]  # only the first registration created it
    wait_until(lambda: online_count(cluster, client_id) == 1, 10, what="one online session")
    wait_until(lambda: session_count(cluster, client_id) == 1, 10, what="one session")
    for client in clients:
        client.close()


def test_queue_moves_even_when_the_connect_that_moves_it_is_closed_at_once(cluster: list[ClusterNode]) -> None:
    n1, n2, n3 = cluster
    client_id, topic = unique("dropper-"), unique("drop/")
    persistent_subscriber(n1, client_id, topic)
    payloads = [f"m{i}" for i in range(20)]
    publish_from(n3, topic, payloads)
    wait_until(lambda: any(r["queued"] == 20 for r in sessions(n1, client_id)), 10, what="20 queued on n1")
    from tests.integration.clients import enc_connect

    quitter = raw(n2)
    quitter.send(enc_connect(client_id, 5, False, props=PERSISTENT))
    quitter.close()
    wait_until(lambda: any(r["queued"] + r["waiting_acks"] == 20 for r in sessions(n2, client_id)), 10,
               what="the queue on n2")
    assert sessions(n1, client_id) == []
    client = raw(n3)
    assert client.connect(client_id, clean=False, props=PERSISTENT).session_present
    assert sorted(drain(client, 20)) == sorted(payloads)
    client.assert_silent(0.3)
    client.disconnect()


def test_takeover_of_a_live_session_on_another_node_moves_inflight_and_queue(cluster: list[ClusterNode]) -> None:
    """A subscriber with unacknowledged in-flight messages is taken over from another node: the new
    connection gets them again (DUP, same packet ids), then the rest of the queue, nothing lost."""
    n1, n2, n3 = cluster
    client_id, topic = unique("inflight-"), unique("inflight/")
    old = raw(n1)
    old.connect(client_id, clean=False, props={**PERSISTENT, "receive_maximum": 5})
    old.subscribe((topic, 1))
    payloads = [f"x{i}" for i in range(30)]
    publish_from(n3, topic, payloads)
    first = old.recv_publishes(5, timeout=10, ack=False)  # 5 in flight, never acknowledged
    new = raw(n2)
    ack = new.connect(client_id, clean=False, props=PERSISTENT, timeout=10)
    assert ack.session_present
    closing = old.wait_closed(5)
    assert [(p.type, p.reason_code) for p in closing if p.type == DISCONNECT] == [(DISCONNECT, 0x8E)]
    got = new.recv_publishes(30, timeout=15)
    resent = got[:5]
    assert [(p.packet_id, p.dup) for p in resent] == [(p.packet_id, True) for p in first]
    assert sorted(p.payload.decode() for p in got) == sorted(payloads)
    new.assert_silent(0.3)
    new.disconnect()
    assert all(p.type == PUBLISH for p in got)


def queued_total(nodes: list[ClusterNode]) -> int:
    return sum(r["queued"] + r["waiting_acks"] for node in nodes for r in sessions_all(node))


def test_leave_k_hands_100_queues_over_and_every_message_is_delivered(tmp_path: Path) -> None:
    nodes = start_cluster(tmp_path)
    n1, n2, n3 = nodes
    try:
        prefix = unique("leaver-")
        ids = [f"{prefix}{i}" for i in range(100)]
        for cid in ids:
            persistent_subscriber(n3, cid, f"{cid}/t")
        online = raw(n3)  # a 5.0 client still connected is told where to go
        online.connect(unique("online-"))
        pub = raw(n1)
        pub.connect(unique("pub-"))
        for cid in ids:
            pub.publish(f"{cid}/t", cid, qos=1)
        pub.disconnect()
        wait_until(lambda: queued_total([n3]) == 100, 10, what="100 messages queued on n3")
        answer = n1.admin("cluster", "leave", f"node={n3.name}", "-k", "-i", "1", "-t", "60")
        assert answer.returncode == 0, answer.stdout + answer.stderr + n3.log_tail()
        assert "Done" in answer.stdout and "100 persistent sessions" in answer.stdout, answer.stdout
        closing = online.wait_closed(5)
        assert [(p.type, p.reason_code) for p in closing if p.type == DISCONNECT] == [(DISCONNECT, 0x9C)]
        assert [p.props.get("server_reference") for p in closing if p.type == DISCONNECT] != [None]
        wait_until(lambda: queued_total([n1, n2]) == 100, 10, what="100 messages on n1 and n2")
        rng = random.Random(SEED + 3)
        for cid in ids:
            client = raw(rng.choice([n1, n2]))
            assert client.connect(cid, clean=False, props=PERSISTENT, timeout=10).session_present, cid
            assert drain(client, 1) == [cid]
            client.disconnect()
        assert queued_total([n1, n2]) == 0
    finally:
        for node in nodes:
            node.stop()


def test_a_dead_node_made_to_leave_gets_its_sessions_recreated(tmp_path: Path) -> None:
    nodes = start_cluster(tmp_path)
    n1, n2, n3 = nodes
    try:
        prefix = unique("orphan-")
        ids = [f"{prefix}{i}" for i in range(10)]
        for cid in ids:
            persistent_subscriber(n3, cid, f"{cid}/t")
        wait_until(lambda: len([r for r in sessions_all(n1) if r["client_id"] in ids]) == 0 and
                   subscription_count(n1, prefix) == 10, 10, what="subscriptions replicated to n1")
        n3.kill9()
        wait_until(lambda: not any(r["Reachable"] for r in n1.show() if r["Node"] == n3.name), 10,
                   what="n3 unreachable")
        answer = n1.admin("cluster", "leave", f"node={n3.name}", "-k")
        assert answer.returncode == 0, answer.stdout + answer.stderr
        assert "10 of its persistent sessions are recreated" in answer.stdout, answer.stdout
        assert "cannot be recovered" in answer.stdout
        # Every subscription was replicated before the kill: none of n3's writes is unaccounted for.
        assert "; 0 of its metadata writes (dots) are unaccounted for" in answer.stdout, answer.stdout
        wait_until(lambda: sum(1 for n in (n1, n2) for r in sessions_all(n) if r["client_id"] in ids) == 10, 10,
                   what="10 sessions recreated")
        pub = raw(n1)
        pub.connect(unique("pub-"))
        for cid in ids:
            pub.publish(f"{cid}/t", cid, qos=1)
        pub.disconnect()
        for cid in ids:
            client = raw(n2)
            assert client.connect(cid, clean=False, props=PERSISTENT, timeout=10).session_present, cid
            assert drain(client, 1) == [cid]
            client.disconnect()
    finally:
        for node in nodes:
            node.stop()


def subscription_count(node: ClusterNode, prefix: str) -> int:
    return sum(1 for r in admin_rows(node, "subscription", "show", "limit=100000") if r["Client"].startswith(prefix))
