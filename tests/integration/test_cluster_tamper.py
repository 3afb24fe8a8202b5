"""A man in the middle of a live, plain cluster link: one flipped bit after the handshake closes the link, both
nodes log it, and the cluster links again and routes once the tampering stops (frame_auth.py; docs/security.md,
"Cluster links"). That nothing altered is ever delivered is shown byte by byte in
tests/unit/cluster/test_link_auth.py.

The new link does not go through the proxy: once joined, each node dials the other's own listener (the proxy
address was only the discovery address of the join)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ClusterNode, cluster_ready
from tests.integration.conftest import wait_until
from tests.integration.tamper_proxy import TamperingProxy

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

PROXY_SOURCE = "127.0.0.19"  # the proxy connects from here: the links it carries show this remote address
AUTH_FAILED = "cluster frame authentication failed, link closed"


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    started: list[ClusterNode] = []
    try:
        for i in (1, 2):
            started.append(ClusterNode(i, tmp_path).start())
        yield started
    finally:
        for node in started:
            node.stop()


def lines_with(node: ClusterNode, *parts: str) -> list[str]:
    return [line for line in node.log.read_text(errors="replace").splitlines() if all(p in line for p in parts)]


def test_a_flipped_bit_closes_the_link_is_logged_and_the_cluster_links_again(two_nodes: list[ClusterNode]) -> None:
    n1, n2 = two_nodes
    with TamperingProxy(n2.host, (n2.host, n2.cluster_port), PROXY_SOURCE) as proxy:
        # n1 joins through the proxy; n1's dial wins the one-link-per-pair rule (smaller name), so n2's own dial
        # back is refused as a duplicate and the link through the proxy is the one in use
        answer = n1.admin("cluster", "join", f"discovery-node={n2.name}:{proxy.address[1]}")
        assert answer.returncode == 0, answer.stderr
        wait_until(lambda: cluster_ready([n1, n2]), 20, interval=0.2, what="joined through the proxy")
        assert lines_with(n2, "cluster link up", f"peer={n1.name}", f"remote={PROXY_SOURCE}:")
        assert proxy.connections >= 1
        forwarded = proxy.bytes_forwarded
        wait_until(lambda: proxy.bytes_forwarded > forwarded, 5, what="frames through the proxy (heartbeats)")

        links_up_before = len(lines_with(n2, "cluster link up", f"peer={n1.name}"))
        proxy.tamper()
        wait_until(lambda: proxy.flipped == 1, 10, what="a chunk from n1 flipped")
        wait_until(lambda: lines_with(n2, AUTH_FAILED, f"peer={n1.name}"), 10, what="n2 logs the altered frame")
        (failure,) = lines_with(n2, AUTH_FAILED)
        assert "warning" in failure and f"remote={PROXY_SOURCE}:" in failure
        assert "malformed" not in failure
        # n2 told n1 why, in a BYE sealed with its own key (the proxy does not touch that direction)
        wait_until(lambda: lines_with(n1, "cluster link down", f"peer={n2.name}", "frame authentication failed"),
                   10, what="n1 learns why the link closed")

        # the tampering stopped (one flip): the nodes link again and route
        wait_until(lambda: len(lines_with(n2, "cluster link up", f"peer={n1.name}")) > links_up_before, 20,
                   interval=0.2, what="a new link between n1 and n2")
        wait_until(lambda: cluster_ready([n1, n2]), 20, interval=0.2, what="the cluster ready again")
        assert len(lines_with(n2, AUTH_FAILED)) == 1 and proxy.flipped == 1

    topic = f"tamper/{uuid.uuid4().hex[:8]}"
    subscriber = n2.client(5, f"sub-{uuid.uuid4().hex[:8]}")
    subscriber.subscribe(topic, qos=1)
    wait_until(lambda: '"Filter"' in n1.admin("subscription", "show", "--json").stdout, 10, interval=0.2,
               what="the subscription replicated to n1")
    n1.client(5, f"pub-{uuid.uuid4().hex[:8]}").publish(topic, b"after the tampering", qos=1)
    (message,) = subscriber.collect(1, 10)
    assert message.payload == b"after the tampering"
