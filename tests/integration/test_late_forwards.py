"""A session moves while a third node still routes to its old node (chaos finding 6): the old node passes the
late forwards on to the new owner and acknowledges them only once that one has them, so no acknowledged QoS 1
message is lost.

Three real nodes in `majority` readiness; n1 and n2 cannot talk (iptables), n3 reaches both. A persistent
session on n3 whose client id ranks n2 next; n3 leaves with -k, so the session moves to n2, and n1 (which
learns the new route only through n3's anti-entropy) keeps publishing QoS 1 to it throughout. Every message
acknowledged to the publisher must reach the subscriber.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.integration.clients import Closed, RawClient, unique
from tests.integration.cluster import ClusterNode, cut, heal, join_all, partition_chain
from tests.integration.conftest import wait_until
from vmqpy.cluster.leader import ranking

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering"),
              pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables is installed by make test")]

PERSISTENT = {"session_expiry_interval": 3600}


def client_ranking_next(nodes: list[str], want: str) -> str:
    for _ in range(10_000):
        client_id = unique("mover-")
        if ranking(client_id, nodes)[0] == want:
            return client_id
    raise AssertionError("no client id ranks the wanted node first")


def test_forwards_that_reach_the_old_node_after_a_handover_are_passed_on(tmp_path: Path) -> None:
    nodes = [ClusterNode(i, tmp_path, {"cluster.readiness": "majority"}) for i in (1, 2, 3)]
    try:
        for node in nodes:
            node.start()
        join_all(nodes)
        n1, n2, n3 = nodes
        client_id = client_ranking_next([n1.name, n2.name], n2.name)
        topic = f"{client_id}/t"
        sub = RawClient(n3.mqtt_port, n3.host, 5)
        sub.connect(client_id, clean=False, props=PERSISTENT)
        sub.subscribe((topic, 1))
        sub.disconnect()
        wait_until(lambda: client_id in n1.admin("subscription", "show", "--json").stdout, 10,
                   what="the subscription on n1")
        acknowledged: list[str] = []
        stop = threading.Event()
        errors: list[BaseException] = []

        def publish() -> None:
            pub: RawClient | None = None
            try:
                for n in range(400):
                    if stop.is_set():
                        break
                    if pub is None:
                        pub = RawClient(n1.mqtt_port, n1.host, 5)
                        if pub.connect(unique("pub-"), expect_rc=None).reason_code:  # refused: n1 not ready
                            pub.close()
                            pub = None
                            time.sleep(0.1)
                            continue
                    try:
                        ack = pub.publish(topic, f"m{n}", qos=1, timeout=1)
                    except (Closed, TimeoutError):  # a forward into the cut waits for the heal: not counted
                        pub.close()
                        pub = None
                        continue
                    if ack is not None and (ack.reason_code or 0) < 0x80:
                        acknowledged.append(f"m{n}")
                    time.sleep(0.01)
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)

        with partition_chain():
            cut(n1, n2)
            wait_until(lambda: not any(r["Reachable"] for r in n1.show() if r["Node"] == n2.name), 10,
                       what="n1 sees n2 unreachable")
            publisher = threading.Thread(target=publish, daemon=True)
            publisher.start()
            time.sleep(0.5)
            answer = n3.admin("cluster", "leave", f"node={n3.name}", "-k", "-i", "1", "-t", "15")
            assert answer.returncode == 0, answer.stdout + answer.stderr
            time.sleep(3.0)  # n1 goes on publishing while its route is stale
            stop.set()
            publisher.join(30)
            heal()
        assert not errors, repr(errors[0])
        assert acknowledged, "nothing was acknowledged"
        wait_until(lambda: any(r["Reachable"] for r in n1.show() if r["Node"] == n2.name), 15,
                   what="n1 reaches n2 again")
        receiver = RawClient(n2.mqtt_port, n2.host, 5)
        assert receiver.connect(client_id, clean=False, props=PERSISTENT, timeout=10).session_present
        got: set[str] = set()
        deadline = time.monotonic() + 20
        while not set(acknowledged) <= got and time.monotonic() < deadline:
            try:
                got.update(p.payload.decode() for p in receiver.recv_publishes(1, 2))
            except AssertionError:
                continue
        lost = sorted(set(acknowledged) - got, key=lambda m: int(m[1:]))
        assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged messages lost: {lost[:10]}"
    finally:
        for node in nodes:
            node.stop()


def test_no_message_is_passed_on_twice_once_the_sender_knows_the_new_route(tmp_path: Path) -> None:
    """After a takeover moved a session from n3 to n2, n1 (which knows the new route) still forwards to n3 for
    another subscriber there, and n3 passes them on to n2 as well (it cannot tell whether n1 routed them before
    it learned the new route): the moved subscriber gets each message once (Session.watch_forwards)."""
    nodes = [ClusterNode(i, tmp_path) for i in (1, 2, 3)]
    try:
        for node in nodes:
            node.start()
        join_all(nodes)
        n1, n2, n3 = nodes
        topic = unique("shared-topic/")
        mover, stayer = unique("mover-"), unique("stayer-")
        for client_id in (mover, stayer):
            sub = RawClient(n3.mqtt_port, n3.host, 5)
            sub.connect(client_id, clean=False, props=PERSISTENT)
            sub.subscribe((topic, 1))
            sub.disconnect()
        moved = RawClient(n2.mqtt_port, n2.host, 5)  # the takeover: the session moves from n3 to n2
        assert moved.connect(mover, clean=False, props=PERSISTENT, timeout=10).session_present

        def routed_to_n2(node: ClusterNode) -> bool:
            rows = node.admin("subscription", "show", f"client-id={mover}", "--json").stdout
            return n2.name in rows and n3.name not in rows

        wait_until(lambda: all(routed_to_n2(n) for n in nodes), 10, what="the new route everywhere")
        # Anti-entropy rounds (one a second per node, with a random peer): n3 learns what n1 holds from each
        # exchange between them either way, so after 6 s the chance it has no report of the new route is
        # (1/4)^6, about 0.02%.
        time.sleep(6.0)
        pub = RawClient(n1.mqtt_port, n1.host, 5)
        pub.connect(unique("pub-"))
        for n in range(20):
            pub.publish(topic, f"m{n}", qos=1)
        pub.disconnect()
        got = [p.payload.decode() for p in moved.recv_publishes(20, 10)]
        assert got == [f"m{n}" for n in range(20)]
        moved.assert_silent(1.0)  # no second copy passed on through n3
        moved.disconnect()
    finally:
        for node in nodes:
            node.stop()
