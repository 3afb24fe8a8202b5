"""Shared subscriptions across nodes: three real nodes, members of one `$share` group on several of them, and
each `shared_subscription_policy` (prefer_local, local_only, random) checked with real clients.

Every message published must reach exactly one member of each group the policy allows, and the members that get
it say which policy is in force: prefer_local keeps messages on the publishing node when it has a member,
local_only drops them for a group without a member there, random spreads them over the members on all nodes.

The nodes run on 127.0.0.31-33 (ClusterNode 21-23) so that partition tests, whose iptables rules name the
addresses 127.0.0.11-15, never cut these links when both run at the same time. One cluster serves the whole
module; each test uses its own topic and sets the policy it needs on the publishing node with `vmq-admin set`
(n2 starts with `shared_subscription_policy = random` in its config file).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.clients import PahoClient, unique
from tests.integration.cluster import ClusterNode, join_all
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]

FIRST_INDEX = 21  # 127.0.0.31
QUIET = 0.5  # how long to watch for an extra copy once every message has arrived somewhere

Factory = Callable[..., PahoClient]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterNode]]:
    workdir = tmp_path_factory.mktemp("shared")
    started: list[ClusterNode] = []
    try:
        for i in range(3):
            extra = {"shared_subscription_policy": "random"} if i == 1 else {}
            started.append(ClusterNode(FIRST_INDEX + i, workdir, extra).start())
        join_all(started)
        yield started
    finally:
        for node in started:
            node.stop()


@pytest.fixture
def connect(cluster: list[ClusterNode]) -> Iterator[Factory]:
    """Connect a client to a node; every client made here is disconnected when the test ends."""
    made: list[tuple[ClusterNode, PahoClient]] = []

    def make(node: ClusterNode, client_id: str, **kw: Any) -> PahoClient:
        client = node.client(5, client_id, **kw)
        made.append((node, client))
        return client

    yield make
    for node, client in made:
        client.disconnect()
        client.stop()
        if client in node.clients:
            node.clients.remove(client)


def api_key(node: ClusterNode) -> str:
    return (node.data_dir / "api.key").read_text().strip()


def subscriptions(node: ClusterNode) -> set[tuple[str, str]]:
    """(client id, filter) of every subscription the node's metadata store holds, through the HTTP API."""
    request = urllib.request.Request(f"{node.url}/api/v1/subscription/show?limit=100000",
                                     headers={"x-api-key": api_key(node)})
    with urllib.request.urlopen(request, timeout=5) as answer:
        rows = json.loads(answer.read())["table"]
    return {(row["Client"], row["Filter"]) for row in rows}


def wait_replicated(nodes: list[ClusterNode], expected: set[tuple[str, str]]) -> None:
    wait_until(lambda: all(expected <= subscriptions(node) for node in nodes), 10, interval=0.1,
               what=f"{len(expected)} subscriptions on every node")


def set_policy(node: ClusterNode, policy: str) -> None:
    answer = node.admin("set", f"shared_subscription_policy={policy}")
    assert answer.returncode == 0, answer.stderr
    shown = node.admin("show", "shared_subscription_policy")
    assert shown.returncode == 0 and policy in shown.stdout, shown.stdout


def drain(client: PahoClient) -> list[int]:
    out = []
    while not client.messages.empty():
        out.append(int(client.messages.get_nowait().payload))
    return out


def gather(members: dict[str, PahoClient], count: int, timeout: float = 10.0) -> dict[str, list[int]]:
    """What each member received: polled until `count` messages arrived in all, then for QUIET seconds more
    so that a copy too many shows up."""
    got: dict[str, list[int]] = {name: [] for name in members}
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in got.values()) < count and time.monotonic() < deadline:
        for name, client in members.items():
            got[name] += drain(client)
        time.sleep(0.02)
    time.sleep(QUIET)
    for name, client in members.items():
        got[name] += drain(client)
    return got


def assert_each_message_once(got: dict[str, list[int]], count: int) -> None:
    every = sorted(n for values in got.values() for n in values)
    assert every == list(range(count)), {name: sorted(v) for name, v in got.items()}


def publish_numbers(client: PahoClient, topic: str, count: int) -> None:
    for n in range(count):
        client.publish(topic, str(n).encode(), qos=1)


def test_prefer_local_keeps_messages_here_and_spreads_a_group_without_local_member_over_the_others(
    cluster: list[ClusterNode], connect: Factory
) -> None:
    n1, n2, n3 = cluster
    set_policy(n1, "prefer_local")
    topic = unique("shared/prefer/")
    g = {"g-n1a": n1, "g-n1b": n1, "g-n2": n2, "g-n3": n3}  # members of g on every node, two on n1
    h = {"h-n2": n2, "h-n3": n3}  # members of h on the other nodes only
    clients: dict[str, PahoClient] = {}
    expected = set()
    for group, members in (("g", g), ("h", h)):
        for name, node in members.items():
            client_id = unique(name + "-")
            clients[name] = connect(node, client_id)
            clients[name].subscribe(f"$share/{group}/{topic}", qos=1)
            expected.add((client_id, f"$share/{group}/{topic}"))
    wait_replicated(cluster, expected)
    count = 30
    publish_numbers(connect(n1, unique("pub-")), topic, count)
    got_g = gather({name: clients[name] for name in g}, count)
    got_h = gather({name: clients[name] for name in h}, count)
    assert_each_message_once(got_g, count)
    assert_each_message_once(got_h, count)
    assert got_g["g-n2"] == [] and got_g["g-n3"] == []  # n1 has members: g is served on n1 only
    assert got_g["g-n1a"] and got_g["g-n1b"]  # spread over the local members
    assert got_h["h-n2"] and got_h["h-n3"]  # no member on n1: spread over the members elsewhere


def test_local_only_serves_members_on_the_publishing_node_and_nobody_else(
    cluster: list[ClusterNode], connect: Factory
) -> None:
    n1, n2, n3 = cluster
    set_policy(n1, "local_only")
    try:
        topic = unique("shared/local/")
        sleeper_id = unique("k-n1-asleep-")
        sleeper = connect(n1, sleeper_id, clean=False, session_expiry=300)
        sleeper.subscribe(f"$share/k/{topic}", qos=1)
        roles = {"g-n1": (n1, "g"), "g-n2": (n2, "g"), "h-n2": (n2, "h"), "h-n3": (n3, "h"), "k-n2": (n2, "k")}
        clients: dict[str, PahoClient] = {}
        expected = {(sleeper_id, f"$share/k/{topic}")}
        for name, (node, group) in roles.items():
            client_id = unique(name + "-")
            clients[name] = connect(node, client_id)
            clients[name].subscribe(f"$share/{group}/{topic}", qos=1)
            expected.add((client_id, f"$share/{group}/{topic}"))
        witnesses = {}  # plain subscribers: once they have every message, every forward has arrived
        for node in (n2, n3):
            client_id = unique("plain-")
            witnesses[node.name] = connect(node, client_id)
            witnesses[node.name].subscribe(topic, qos=1)
            expected.add((client_id, topic))
        wait_replicated(cluster, expected)
        sleeper.disconnect()  # k's member on n1 is offline now: its messages wait in its session
        sleeper.stop()
        count = 20
        publish_numbers(connect(n1, unique("pub-")), topic, count)
        for witness in witnesses.values():
            assert sorted(int(m.payload) for m in witness.collect(count, 10)) == list(range(count))
        got = gather(clients, count)
        assert got["g-n1"] == list(range(count))  # the member on n1 gets all of g, in order
        assert got["g-n2"] == [] and got["h-n2"] == [] and got["h-n3"] == [] and got["k-n2"] == []
        again = connect(n1, sleeper_id, clean=False, session_expiry=300)
        assert sorted(int(m.payload) for m in again.collect(count, 10)) == list(range(count))
    finally:
        set_policy(n1, "prefer_local")


def test_random_spreads_messages_over_members_on_every_node(cluster: list[ClusterNode], connect: Factory) -> None:
    n1, n2, n3 = cluster
    shown = n2.admin("show", "shared_subscription_policy")  # from n2's config file
    assert shown.returncode == 0 and "random" in shown.stdout, shown.stdout
    topic = unique("shared/random/")
    roles = {"n1": n1, "n2": n2, "n3": n3}
    clients: dict[str, PahoClient] = {}
    expected = set()
    for name, node in roles.items():
        client_id = unique(f"g-{name}-")
        clients[name] = connect(node, client_id)
        clients[name].subscribe(f"$share/g/{topic}", qos=1)
        expected.add((client_id, f"$share/g/{topic}"))
    wait_replicated(cluster, expected)
    count = 60
    publish_numbers(connect(n2, unique("pub-")), topic, count)
    got = gather(clients, count)
    assert_each_message_once(got, count)
    assert all(got[name] for name in roles), {name: len(v) for name, v in got.items()}  # here and elsewhere


def test_a_bad_policy_is_refused_at_run_time(cluster: list[ClusterNode]) -> None:
    answer = cluster[0].admin("set", "shared_subscription_policy=round_robin")
    assert answer.returncode != 0 and "prefer_local, local_only, random" in answer.stderr, answer.stderr
    shown = cluster[0].admin("show", "shared_subscription_policy")
    assert shown.returncode == 0 and "prefer_local" in shown.stdout, shown.stdout
