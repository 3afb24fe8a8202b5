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

`PROXY_PROTOCOL`: whether HAProxy sends the PROXY v2 header (`send-proxy-v2`, as shipped) and the nodes expect
it (`listener.tcp.default.proxy_protocol = on`). Off, the rendered configuration drops `send-proxy-v2`.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from chaos.haproxy import HAPROXY, SHIPPED, Balancer, Server
from tests.integration.clients import PahoClient, enc_connect, unique
from tests.integration.cluster import ClusterNode, cluster_ready, port_open, start_cluster
from tests.integration.conftest import wait_until

#: HAProxy sends the PROXY v2 header and the nodes' MQTT listeners expect it. On once the listeners parse it.
PROXY_PROTOCOL = True

pytestmark = [
    pytest.mark.vmqpy_only("a vmqpy cluster behind HAProxy"),
    pytest.mark.skipif(not HAPROXY.exists(), reason="HAProxy is not installed (scripts/debian-deps.sh)"),
]


# -- HAProxy ------------------------------------------------------------------------------------------------------
class HAProxy(Balancer):
    """The shared HAProxy runner (chaos/haproxy.py) in front of the test's nodes, and their clients through it."""

    def __init__(self, workdir: Path, nodes: list[ClusterNode], proxy_protocol: bool) -> None:
        super().__init__(workdir, [Server(n.short, n.host, n.mqtt_port, n.http_port) for n in nodes],
                         proxy_protocol)
        self.nodes = nodes

    def client(self, client_id: str, version: int, **kw: Any) -> PahoClient:
        """A persistent client through HAProxy, not connected yet."""
        expiry = 3600 if version == 5 else None
        return PahoClient(self.port, version, client_id, clean=False, session_expiry=expiry, host=self.host, **kw)


# -- the nodes as seen by the admin API ---------------------------------------------------------------------------
def sessions(node: ClusterNode) -> list[dict[str, Any]]:
    """`vmq-admin session show` of the whole cluster: client id, node, online."""
    answer = node.admin("session", "show", "--client_id", "--node", "--is_online", "limit=10000", "--json")
    assert answer.returncode == 0, answer.stderr
    rows: list[dict[str, Any]] = json.loads(answer.stdout)
    return rows


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
@contextlib.contextmanager
def running_cluster(workdir: Path) -> Iterator[list[ClusterNode]]:
    """Three joined nodes whose MQTT listeners expect the PROXY header when HAProxy sends it; stopped after."""
    extra = {"listener.tcp.default.proxy_protocol": "on"} if PROXY_PROTOCOL else {}
    started = start_cluster(workdir, extra)
    try:
        yield started
    finally:
        for node in started:
            node.stop()


@contextlib.contextmanager
def running_haproxy(workdir: Path, nodes: list[ClusterNode]) -> Iterator[HAProxy]:
    proxy = HAProxy(workdir, nodes, PROXY_PROTOCOL)
    try:
        yield proxy.start()
    finally:
        proxy.stop()


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


# -- the load: persistent QoS 1 subscribers and publishers through HAProxy ----------------------------------------
#: QoS 1 PUBLISHes a publisher of the load holds unacknowledged at most (paho's queue limit): paho resends every
#: PUBLISH it holds at a reconnect at once, whatever the node's Receive Maximum (max_inflight_messages, 20), and
#: keeps the ones whose write failed; a node closes a connection that goes over (0x93).
IN_FLIGHT = 10


@dataclass
class Load:
    """`subscribers` persistent clients, each on its own topic, fed by `publishers` persistent clients in turn;
    everything through HAProxy, paho reconnecting by itself."""

    haproxy: HAProxy
    subscribers: int = 9
    publishers: int = 3
    interval: float = 0.02  # between two publishes of one publisher
    tag: str = field(default_factory=lambda: unique("load"))
    subs: dict[str, PahoClient] = field(default_factory=dict)
    pubs: dict[str, PahoClient] = field(default_factory=dict)
    acked: dict[str, set[str]] = field(default_factory=dict)  # topic -> payloads with a successful PUBACK
    refused: dict[str, dict[int, int]] = field(default_factory=dict)  # publisher -> mid -> failure reason code
    refusals: int = 0  # PUBACKs with a failure reason code (5.0: 0x83 while the node is not ready)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)  # what stopped a publisher thread

    def client_ids(self) -> list[str]:
        return [*self.subs, *self.pubs]

    def start(self) -> Load:
        for i in range(self.subscribers):
            cid = f"{self.tag}-s{i}"
            sub = self.haproxy.client(cid, 5 if i % 3 else 4)
            sub.client.reconnect_delay_set(1, 2)
            sub.connect()
            sub.subscribe(f"{self.tag}/{cid}", qos=1)
            self.subs[cid] = sub
            self.acked[f"{self.tag}/{cid}"] = set()
        for i in range(self.publishers):
            cid = f"{self.tag}-p{i}"
            pub = self.haproxy.client(cid, 5 if i % 2 else 4, max_inflight=IN_FLIGHT)
            pub.client.reconnect_delay_set(1, 2)
            pub.client.max_queued_messages_set(IN_FLIGHT)
            refused: dict[int, int] = {}
            self.refused[cid] = refused
            pub.client.on_publish = partial(_note_refusal, refused)
            pub.connect()
            self.pubs[cid] = pub
            thread = threading.Thread(target=self._publish, args=(i, cid, pub), daemon=True)
            self.threads.append(thread)
            thread.start()
        return self

    def _publish(self, index: int, cid: str, pub: PahoClient) -> None:
        try:
            self._publish_until_stopped(index, cid, pub)
        except BaseException as exc:
            self.errors.append(exc)
            raise

    def _publish_until_stopped(self, index: int, cid: str, pub: PahoClient) -> None:
        topics = sorted(self.acked)
        pending: list[tuple[str, str, Any]] = []
        seq = 0
        deadline = time.monotonic() + 600  # bounded, whatever happens
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if not pub.client.is_connected() or len(pending) >= IN_FLIGHT:
                pending = self._collect(cid, pending)
                time.sleep(self.interval)
                continue
            topic = topics[seq % len(topics)]
            payload = f"p{index}-{seq}"
            pending.append((topic, payload, pub.client.publish(topic, payload, qos=1)))
            seq += 1
            pending = self._collect(cid, pending)
            time.sleep(self.interval)
        settle = time.monotonic() + 20  # the last PUBACKs (after a reconnect: the resent messages')
        while pending and time.monotonic() < settle:
            pending = self._collect(cid, pending)
            time.sleep(0.05)

    def _collect(self, cid: str, pending: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
        """Record the acknowledged publishes; the ones still waiting for their PUBACK. A publish paho refused
        (the client was between two connections) or the node refused (a PUBACK with a failure reason code,
        which paho counts as published) was never acknowledged: it is not waited for."""
        still = []
        for topic, payload, info in pending:
            try:
                done = info.is_published()
            except (RuntimeError, ValueError):  # not sent (no connection), or not queued (paho's queue is full)
                continue
            if done and self.refused[cid].pop(info.mid, None) is not None:
                self.refusals += 1
            elif done:
                self.acked[topic].add(payload)
            else:
                still.append((topic, payload, info))
        return still

    def finish(self) -> None:
        """Stop publishing, wait for the last acknowledgements, then until every acknowledged message reached its
        subscriber (AssertionError naming what is missing)."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)
        assert not self.errors, f"a publisher stopped: {self.errors!r}"
        received: dict[str, set[str]] = {f"{self.tag}/{cid}": set() for cid in self.subs}

        def drained() -> bool:
            for sub in self.subs.values():
                while not sub.messages.empty():
                    message = sub.messages.get_nowait()
                    received[message.topic].add(message.payload.decode())
            return all(self.acked[t] <= received[t] for t in self.acked)

        with contextlib.suppress(AssertionError):
            wait_until(drained, 30, interval=0.1)
        missing = {t: sorted(self.acked[t] - received[t])[:10] for t in self.acked if self.acked[t] - received[t]}
        total = sum(len(a) for a in self.acked.values())
        assert total > 0, "nothing was acknowledged: the load did not run"
        assert not missing, f"acknowledged QoS 1 messages lost (of {total}): {missing}"

    def stop(self) -> None:
        self.stopping.set()
        for client in [*self.subs.values(), *self.pubs.values()]:
            client.disconnect()
            client.stop()


def _note_refusal(refused: dict[int, int], client: Any, userdata: Any, mid: int, reason_code: Any,
                  properties: Any) -> None:
    """paho's on_publish (its thread): remember the PUBACKs that refuse."""
    if reason_code is not None and reason_code.is_failure:
        refused[mid] = reason_code.value


def all_online_once(load: Load, nodes: list[ClusterNode], avoid: str | None = None) -> bool:
    """Every client id of the load has exactly one session, online, on a node other than `avoid`."""
    rows = [r for r in sessions(nodes[0]) if r["client_id"] in set(load.client_ids())]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["client_id"]] = counts.get(row["client_id"], 0) + 1
    return (sorted(counts) == sorted(load.client_ids()) and set(counts.values()) == {1}
            and all(r["is_online"] and r["node"] != avoid for r in rows))


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


@contextlib.contextmanager
def readiness(nodes: list[ClusterNode], mode: str) -> Iterator[None]:
    """`cluster.readiness = mode` on every node, at run time and for its restarts; back to the default after."""
    for node in nodes:
        node.settings["cluster.readiness"] = mode
        assert node.admin("set", f"cluster.readiness={mode}").returncode == 0
    try:
        yield
    finally:
        for node in nodes:
            del node.settings["cluster.readiness"]
            if node.pid is not None:
                node.admin("set", "cluster.readiness=all")


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
