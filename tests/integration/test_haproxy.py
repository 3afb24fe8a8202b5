"""The shipped HAProxy configuration (deploy/haproxy/haproxy.cfg) run by the real HAProxy in front of three real
nodes on 127.0.0.11-13; every MQTT client connects through HAProxy only.

- the shipped file is valid for the installed HAProxy (`haproxy -c -f`), as shipped and as the tests render it;
- stickiness: persistent clients reconnecting again and again land on the node that holds their session every
  time (no session moves between nodes, read from the nodes' metrics), and HAProxy's stick table (runtime API,
  `show table`) names that node for every client id;
- drain: under a steady QoS 1 load of persistent subscribers and publishers, `vmq-admin node drain` empties one
  node; its /health answers 503 `draining` and HAProxy takes it out; its MQTT port refuses connections; 5.0
  clients get DISCONNECT 0x8B; every client reconnects through HAProxy to another node; no acknowledged message
  is lost and no client id has two live sessions; `vmq-admin node stop` then stops it, and it comes back;
- a rolling restart (drain, stop, start, rejoin, one node after the other) under the same load loses nothing.

The cluster, HAProxy and the load are tests/integration/haproxy_cluster.py's (`PROXY_PROTOCOL` there).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.haproxy import HAPROXY, SHIPPED
from tests.integration.clients import enc_connect, unique
from tests.integration.cluster import ClusterNode, cluster_ready, port_open
from tests.integration.cluster_admin import sessions
from tests.integration.conftest import wait_until
from tests.integration.haproxy_cluster import (
    PROXY_PROTOCOL,
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


# -- the nodes as seen by the admin API ---------------------------------------------------------------------------
def moves(nodes: list[ClusterNode]) -> int:
    """Sessions moved between nodes so far, summed over the running nodes: handovers asked for by the new node
    and live connections disconnected because their session went to another node."""
    total = 0
    for node in nodes:
        values = {r["Metric"]: r["Value"] for r in node.api("metrics/show")}
        total += int(values.get("registration.handovers_requested", 0))
        total += int(values.get("broker.session_taken_over_remote", 0))
    return total


# -- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    with running_cluster(tmp_path_factory.mktemp("haproxy-cluster")) as started:
        yield started


@pytest.fixture(scope="module")
def haproxy(nodes: list[ClusterNode], tmp_path_factory: pytest.TempPathFactory) -> Iterator[HAProxy]:
    with running_haproxy(tmp_path_factory.mktemp("haproxy"), nodes) as proxy:
        yield proxy


# -- the configuration --------------------------------------------------------------------------------------------
def test_the_shipped_configuration_is_valid(tmp_path: Path) -> None:
    shipped = subprocess.run([str(HAPROXY), "-c", "-f", str(SHIPPED)], capture_output=True, text=True, timeout=30)
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    text = SHIPPED.read_text()
    for needed in ("tcp-request inspect-delay", "mqtt_is_valid", "stick-table type string len 256",
                   "mqtt_field_value(connect,client_identifier)", "send-proxy-v2", "option httpchk GET /health",
                   "check port", "stats socket"):
        assert needed in text, needed


# -- drain and stop on their own ----------------------------------------------------------------------------------
def test_a_drain_that_times_out_names_what_is_left_and_a_second_drain_finishes(tmp_path: Path) -> None:
    """One node, three clients. At one client a second, a 0.5 s drain can tell one client to go (the bucket starts
    with one token): it fails naming the two left, and the node stays drained; a second drain empties it; `node
    stop` ends the process with status 0."""
    node = ClusterNode(4, tmp_path).start()
    try:
        for i in range(3):
            node.client(4 if i else 5, client_id=f"{unique('timeout')}-{i}")
        first = node.admin("node", "drain", "--rate=1", "--timeout=500ms")
        assert first.returncode != 0
        assert "timed out after 0.5s: disconnected 1 clients; 2 connections left" in first.stderr, first.stderr
        status, body = node.health()
        assert status == 503 and body["reason"].startswith("draining"), (status, body)
        second = node.admin("node", "drain", "--rate=100")
        assert second.returncode == 0, second.stderr
        assert f"{node.name} drained: disconnected 2 clients; 0 connections left" in second.stdout, second.stdout
        assert node.admin("node", "stop").returncode == 0
        assert node.proc is not None
        assert node.proc.wait(30) == 0, node.log_tail()
    finally:
        node.stop()


# -- stickiness ---------------------------------------------------------------------------------------------------
CLIENTS = 32  # not a multiple of the node count: without stickiness, a rotation would move them
RECONNECTS = 5


def test_reconnects_land_where_the_session_is(nodes: list[ClusterNode], haproxy: HAProxy) -> None:
    ids = [f"{unique('sticky')}-{i}" for i in range(CLIENTS)]
    versions = {cid: 5 if i % 2 else 4 for i, cid in enumerate(ids)}
    for cid in ids:  # first connect: HAProxy picks a node, the session is made there
        client = haproxy.client(cid, versions[cid])
        client.connect()
        client.subscribe(f"sticky/{cid}", qos=1)
        client.disconnect()
        client.stop()
    before = moves(nodes)
    for _ in range(RECONNECTS):
        for cid in ids:
            client = haproxy.client(cid, versions[cid])
            flags, _rc, _props = client.connect()
            assert flags.session_present, f"{cid}: its session was not found where it landed"
            client.disconnect()
            client.stop()
    assert moves(nodes) == before, "a reconnect landed on another node than its session's"
    held = {r["client_id"]: r["node"] for r in sessions(nodes[0]) if r["client_id"] in versions}
    assert sorted(held) == sorted(ids)
    assert len(set(held.values())) >= 2, f"every client on one node proves nothing: {held}"
    table = haproxy.stick_table()
    by_name = {n.name: n.short for n in nodes}
    assert {cid: table.get(cid) for cid in ids} == {cid: by_name[held[cid]] for cid in ids}


def test_a_client_id_longer_than_32_bytes_keeps_its_own_entry(nodes: list[ClusterNode], haproxy: HAProxy) -> None:
    """Ids that differ only after byte 32 are two entries (with `len 32` they would be one)."""
    prefix = "x" * 40 + unique("long")
    ids = [prefix + "-a", prefix + "-b"]
    for cid in ids:
        client = haproxy.client(cid, 5)
        client.connect()
        client.disconnect()
        client.stop()
    table = haproxy.stick_table()
    assert all(cid in table for cid in ids), sorted(k for k in table if k.startswith("x"))


@pytest.mark.skipif(not PROXY_PROTOCOL, reason="HAProxy does not send the PROXY header in this configuration")
def test_the_node_sees_the_clients_own_address(nodes: list[ClusterNode], haproxy: HAProxy) -> None:
    """A client connecting from 127.0.0.50 through HAProxy (which connects to the node from 127.0.0.1) is listed
    with 127.0.0.50 by `vmq-admin session show`: the address came in the PROXY v2 header."""
    cid = unique("real-address")
    with socket.create_connection((haproxy.host, haproxy.port), timeout=5, source_address=("127.0.0.50", 0)) as sock:
        sock.sendall(enc_connect(cid, version=4, clean=True))
        assert sock.recv(4) == b"\x20\x02\x00\x00", "no CONNACK accepted"
        rows = wait_until(lambda: [r for r in sessions_with_peer(nodes[0]) if r["client_id"] == cid], 10,
                          what="the session listed")
        assert rows[0]["peer_host"] == "127.0.0.50", rows


def sessions_with_peer(node: ClusterNode) -> list[dict[str, Any]]:
    answer = node.admin("session", "show", "--client_id", "--peer_host", "limit=10000", "--json")
    assert answer.returncode == 0, answer.stderr
    rows: list[dict[str, Any]] = json.loads(answer.stdout)
    return rows


# -- drain and restart under the load ---------------------------------------------------------------------------
def drain_and_restart(node: ClusterNode, nodes: list[ClusterNode], haproxy: HAProxy, load: Load) -> None:
    """`node drain`, checks while it is drained, `node stop`, start again, rejoin; HAProxy takes it back."""
    running = [n for n in nodes if n is not node]
    held = sum(1 for r in sessions(node) if r["client_id"] in set(load.client_ids()) and r["node"] == node.name
               and r["is_online"])
    answer = node.admin("node", "drain", "--rate=20", "--timeout=30")
    assert answer.returncode == 0, answer.stdout + answer.stderr
    said = re.match(rf"{re.escape(node.name)} drained: disconnected (\d+) clients; 0 connections left",
                    answer.stdout.strip())
    assert said is not None and int(said.group(1)) >= held, (held, answer.stdout)
    status, body = node.health()
    assert status == 503 and body["reason"].startswith("draining"), (status, body)
    assert not port_open(node.host, node.mqtt_port), "a drained node still accepts MQTT connections"
    wait_until(lambda: haproxy.server_status()[node.short] != "UP", 10, interval=0.2, what="HAProxy takes it out")
    try:
        wait_until(lambda: all_online_once(load, running, avoid=node.name), 30, interval=0.3)
    except AssertionError:
        rows = [r for r in sessions(running[0]) if r["client_id"] in set(load.client_ids())]
        raise AssertionError(f"not every client back online once, away from {node.name}: {rows}") from None
    stopped = node.admin("node", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert node.proc is not None
    assert node.proc.wait(30) == 0, node.log_tail()  # a clean exit
    node.stop()
    node.start()
    wait_until(lambda: cluster_ready(nodes), 30, interval=0.3, what="the restarted node ready again")
    wait_until(lambda: haproxy.server_status()[node.short] == "UP", 15, interval=0.2, what="HAProxy takes it back")


def holding_most_v5(load: Load, nodes: list[ClusterNode]) -> tuple[ClusterNode, list[str]]:
    """The node with the most 5.0 subscribers of the load, and their client ids."""
    on: dict[str, list[str]] = {n.name: [] for n in nodes}
    for row in sessions(nodes[0]):
        sub = load.subs.get(row["client_id"])
        if sub is not None and sub.version == 5 and row["is_online"]:
            on[row["node"]].append(row["client_id"])
    busiest = max(on, key=lambda name: len(on[name]))
    assert on[busiest], on
    return next(n for n in nodes if n.name == busiest), on[busiest]


def test_drain_moves_every_client_and_loses_nothing(nodes: list[ClusterNode], haproxy: HAProxy) -> None:
    load = Load(haproxy).start()
    try:
        wait_until(lambda: all_online_once(load, nodes), 15, interval=0.2, what="the load connected")
        target, on_target_v5 = holding_most_v5(load, nodes)
        time.sleep(1.0)  # a second of traffic before the drain
        drain_and_restart(target, nodes, haproxy, load)
        told = [load.subs[cid].disconnects_wait(0.1) for cid in on_target_v5]
        assert all(rc is not None and rc.value == 0x8B for rc in told), told
        time.sleep(1.0)  # a second of traffic after it
        load.finish()
    finally:
        load.stop()


#: publishes refused per restart at most under majority readiness: a restarted node that links to one member a
#: few milliseconds before the other makes two equal majorities for that long, and the tie-break by name may
#: pick the one without a serving node (docs/deployment.md, "Rolling restarts"). The load publishes 150 times a
#: second: a whole-cluster pause, as in stop-serving, would be refused hundreds of times.
BLIP_REFUSALS_PER_RESTART = 5


def test_rolling_restart_under_majority_readiness_loses_nothing(nodes: list[ClusterNode], haproxy: HAProxy) -> None:
    """With `cluster.readiness = majority` the two running nodes stay ready while the third restarts: at most a
    blip of refused publishes (5.0 PUBACK 0x83) per restart, and none acknowledged is lost."""
    with readiness(nodes, "majority"):
        load = Load(haproxy).start()
        try:
            wait_until(lambda: all_online_once(load, nodes), 15, interval=0.2, what="the load connected")
            for node in nodes:
                drain_and_restart(node, nodes, haproxy, load)
            wait_until(lambda: all_online_once(load, nodes), 30, interval=0.3, what="every client online once")
            load.finish()
            assert load.refusals <= BLIP_REFUSALS_PER_RESTART * len(nodes), load.refused
        finally:
            load.stop()
