"""Three real nodes behind the real HAProxy with the shipped configuration (deploy/haproxy/haproxy.cfg), and a
steady load of persistent QoS 1 clients through it that knows which messages were acknowledged.

`PROXY_PROTOCOL`: whether HAProxy sends the PROXY v2 header (`send-proxy-v2`, as shipped) and the nodes expect
it (`listener.tcp.default.proxy_protocol = on`). Off, the rendered configuration drops `send-proxy-v2`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from chaos.haproxy import Balancer, Server
from tests.integration.clients import PahoClient, unique
from tests.integration.cluster import ClusterNode, start_cluster
from tests.integration.cluster_admin import sessions
from tests.integration.conftest import wait_until

#: HAProxy sends the PROXY v2 header and the nodes' MQTT listeners expect it. On once the listeners parse it.
PROXY_PROTOCOL = True


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


# -- the cluster and HAProxy, started and stopped ------------------------------------------------------------------
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
    """HAProxy in front of `nodes`; stopped after."""
    proxy = HAProxy(workdir, nodes, PROXY_PROTOCOL)
    try:
        yield proxy.start()
    finally:
        proxy.stop()


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
