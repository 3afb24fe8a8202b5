"""Shared subscriptions across nodes: `shared_subscription_policy` (prefer_local, local_only, random).

Table tests of the pure choice (`pick_member`), the router with members here and elsewhere, the configuration
key, and a property over in-memory clusters of routers: every publish reaches at most one member per group,
exactly one whenever the policy allows a member, and local_only never forwards a group.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.fakes import RecordingSink
from vmqpy import config
from vmqpy.broker.core.router import (
    LOCAL_ONLY,
    PREFER_LOCAL,
    RANDOM,
    SHARED_POLICIES,
    GroupPick,
    Router,
    pick_member,
)
from vmqpy.broker.core.session import Session
from vmqpy.facade import RUNTIME_SETTINGS
from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry

# ---------------------------------------------------------------------------------------------- pick_member

PICKS = [
    # policy, local members, online local members, node of each remote member, the possible picks
    (PREFER_LOCAL, ["a"], {"a"}, ["n2", "n3"], GroupPick(client_id="a")),
    (PREFER_LOCAL, ["a", "b"], {"b"}, ["n2"], GroupPick(client_id="b")),
    (PREFER_LOCAL, ["a"], set(), ["n2"], GroupPick(client_id="a")),  # an offline member here beats remote ones
    (PREFER_LOCAL, [], set(), ["n2", "n2"], GroupPick(node="n2")),
    (PREFER_LOCAL, [], set(), [], None),
    (LOCAL_ONLY, ["a"], {"a"}, ["n2"], GroupPick(client_id="a")),
    (LOCAL_ONLY, ["a", "b"], {"a"}, ["n2"], GroupPick(client_id="a")),
    (LOCAL_ONLY, ["a"], set(), ["n2"], GroupPick(client_id="a")),
    (LOCAL_ONLY, [], set(), ["n2", "n3"], None),
    (LOCAL_ONLY, [], set(), [], None),
    (RANDOM, ["a"], set(), ["n3"], GroupPick(node="n3")),  # online first: the offline member here waits
    (RANDOM, ["a", "b"], set(), [], {GroupPick(client_id="a"), GroupPick(client_id="b")}),  # none online: any
    (RANDOM, ["a"], set(), [], GroupPick(client_id="a")),
    (RANDOM, [], set(), ["n2"], GroupPick(node="n2")),
    (RANDOM, [], set(), [], None),
]


@pytest.mark.parametrize(("policy", "local", "ready", "remote", "expected"), PICKS)
def test_pick_member(policy: str, local: list[str], ready: set[str], remote: list[str],
                     expected: GroupPick | set[GroupPick] | None) -> None:
    rng = random.Random(0)
    picks = {pick_member(policy, local, ready, remote, rng) for _ in range(50)}
    assert picks == (expected if isinstance(expected, set) else {expected})


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="round_robin"):
        pick_member("round_robin", ["a"], {"a"}, [], random.Random(0))
    router = Router({})
    with pytest.raises(ValueError):
        router.shared_policy = "local"
    assert router.shared_policy == PREFER_LOCAL


def count_picks(policy: str, local: list[str], remote: list[str], draws: int = 6000) -> Counter[str]:
    rng = random.Random(7)
    counts: Counter[str] = Counter()
    for _ in range(draws):
        pick = pick_member(policy, local, set(local), remote, rng)
        assert pick is not None
        counts[pick.client_id or str(pick.node)] += 1
    return counts


def test_random_is_uniform_over_the_members_of_every_node() -> None:
    # 1 member here, 2 on n2, 3 on n3: each of the 6 members gets about 1/6 of 6000 (n2 twice, n3 three times)
    counts = count_picks(RANDOM, ["a"], ["n2", "n2", "n3", "n3", "n3"])
    assert set(counts) == {"a", "n2", "n3"}
    for name, members in (("a", 1), ("n2", 2), ("n3", 3)):
        assert abs(counts[name] - 1000 * members) < 150, counts


def test_prefer_local_spreads_over_local_members_and_over_remote_members_when_none_is_here() -> None:
    here = count_picks(PREFER_LOCAL, ["a", "b"], ["n2"])
    assert set(here) == {"a", "b"} and abs(here["a"] - 3000) < 250, here
    elsewhere = count_picks(PREFER_LOCAL, [], ["n2", "n3", "n3"])
    assert abs(elsewhere["n2"] - 2000) < 250 and abs(elsewhere["n3"] - 4000) < 250, elsewhere


# ---------------------------------------------------------------------------------------------- the router


def entry(topic_filter: str, qos: int = 1) -> SubEntry:
    group = None
    match_filter = topic_filter
    if topic_filter.startswith("$share/"):
        _, group, match_filter = topic_filter.split("/", 2)
    return SubEntry(topic_filter, match_filter, SubOptions(qos), None, group)


def add_session(sessions: dict[str, Session], client_id: str, online: bool = True) -> tuple[Session, RecordingSink]:
    """A 5.0 session; an offline one is persistent (it queues QoS 1 messages)."""
    session = Session(client_id, protocol_level=5, expiry_interval=None if not online else 0, max_inflight=1000,
                      max_online=1000, max_offline=1000)
    sink = RecordingSink()
    if online:
        session.attach(sink, 65535, 0, 0.0)
    sessions[client_id] = session
    return session, sink


def received(session: Session, sink: RecordingSink) -> list[bytes]:
    """Payloads the session got: sent to its connection, or queued while it is offline."""
    return [p.payload for p in sink.publishes()] + [out.message.payload for out in session.queue]


def test_prefer_local_serves_the_group_here_and_forwards_no_group() -> None:
    sessions: dict[str, Session] = {}
    member, sink = add_session(sessions, "here")
    router = Router(sessions, random.Random(1))
    router.add("here", entry("$share/g/t/#"))
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    router.add_remote("n3", "r3", entry("t/+"))
    for n in range(20):
        result = router.route(Message("t/x", str(n).encode(), 1), 0.0)
        assert result.remote == {"n3": []}
    assert received(member, sink) == [str(n).encode() for n in range(20)]


def test_prefer_local_without_a_member_here_forwards_each_message_to_one_member_node() -> None:
    router = Router({}, random.Random(2))
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    router.add_remote("n3", "r3", entry("$share/g/t/#"))
    router.add_remote("n3", "p3", entry("t/#"))
    forwards = [router.route(Message("t/x", b"m", 1), 0.0).remote for _ in range(40)]
    for remote in forwards:
        assert remote in ({"n2": [("g", "t/#")], "n3": []}, {"n3": [("g", "t/#")]}), remote
    assert {tuple(sorted(r)) for r in forwards} == {("n2", "n3"), ("n3",)}


def test_local_only_without_a_member_here_drops_the_group_and_forwards_no_group() -> None:
    router = Router({}, random.Random(3), shared_policy=LOCAL_ONLY)
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    assert router.route(Message("t/x", b"m", 1), 0.0).remote == {}
    router.add_remote("n2", "p2", entry("t/#"))
    assert router.route(Message("t/x", b"m", 1), 0.0).remote == {"n2": []}


def test_local_only_serves_an_offline_member_here_rather_than_an_online_one_elsewhere() -> None:
    sessions: dict[str, Session] = {}
    member, sink = add_session(sessions, "here", online=False)
    router = Router(sessions, random.Random(4), shared_policy=LOCAL_ONLY)
    router.add("here", entry("$share/g/t/#"))
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    result = router.route(Message("t/x", b"kept", 1), 0.0)
    assert result.remote == {} and result.durable
    assert received(member, sink) == [b"kept"]


def test_random_spreads_one_copy_per_message_over_this_node_and_the_others() -> None:
    sessions: dict[str, Session] = {}
    member, sink = add_session(sessions, "here")
    router = Router(sessions, random.Random(5), shared_policy=RANDOM)
    router.add("here", entry("$share/g/t/#"))
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    router.add_remote("n3", "r3", entry("$share/g/t/#"))
    served: Counter[str] = Counter()
    for n in range(300):
        before = len(sink.publishes())
        remote = router.route(Message("t/x", str(n).encode(), 1), 0.0).remote
        here = len(sink.publishes()) - before
        elsewhere = [node for node, groups in remote.items() if ("g", "t/#") in groups]
        assert here + len(elsewhere) == 1, (here, remote)
        served[elsewhere[0] if elsewhere else "here"] += 1
    assert set(served) == {"here", "n2", "n3"} and min(served.values()) > 70, served
    assert sum(served.values()) == 300 and len(received(member, sink)) == served["here"]


def test_the_policy_changes_at_run_time() -> None:
    router = Router({}, random.Random(6))
    router.add_remote("n2", "r2", entry("$share/g/t/#"))
    assert router.route(Message("t/x", b"1", 1), 0.0).remote == {"n2": [("g", "t/#")]}
    router.shared_policy = LOCAL_ONLY
    assert router.route(Message("t/x", b"2", 1), 0.0).remote == {}
    router.shared_policy = RANDOM
    assert router.route(Message("t/x", b"3", 1), 0.0).remote == {"n2": [("g", "t/#")]}


def test_a_forwarded_message_goes_to_an_online_member_first_whatever_the_policy_here() -> None:
    sessions: dict[str, Session] = {}
    offline, offline_sink = add_session(sessions, "asleep", online=False)
    awake, awake_sink = add_session(sessions, "awake")
    router = Router(sessions, random.Random(8), shared_policy=LOCAL_ONLY)
    for client_id in ("asleep", "awake"):
        router.add(client_id, entry("$share/g/t/#"))
    for n in range(10):
        router.route(Message("t/x", str(n).encode(), 1), 0.0, only_groups=[("g", "t/#")])
    assert received(awake, awake_sink) == [str(n).encode() for n in range(10)]
    assert received(offline, offline_sink) == []


def test_groups_are_chosen_independently_and_a_client_in_two_groups_gets_one_copy_per_group_it_wins() -> None:
    sessions: dict[str, Session] = {}
    both, sink = add_session(sessions, "both")
    router = Router(sessions, random.Random(9))
    router.add("both", entry("$share/g/t/#"))
    router.add("both", entry("$share/h/t/+", qos=0))
    router.add_remote("n2", "r2", entry("$share/k/t/#"))
    result = router.route(Message("t/x", b"m", 1), 0.0)
    assert result.remote == {"n2": [("k", "t/#")]}
    (publish,) = sink.publishes()  # one PUBLISH for the client, at the highest QoS of the groups it serves
    assert publish.qos == 1 and received(both, sink) == [b"m"]


# ---------------------------------------------------------------------------------------------- configuration


def test_the_key_defaults_to_prefer_local_and_takes_each_policy(tmp_path: Path) -> None:
    assert config.load(None, environ={}).shared_subscription_policy == PREFER_LOCAL
    for policy in SHARED_POLICIES:
        path = tmp_path / "vmqpy.conf"
        path.write_text(f"shared_subscription_policy = {policy.upper()}\n")
        assert config.load(path, environ={}).shared_subscription_policy == policy
    assert config.SCHEMA["shared_subscription_policy"].parse("random") == RANDOM
    assert "shared_subscription_policy" in RUNTIME_SETTINGS


def test_a_bad_policy_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "vmqpy.conf"
    path.write_text("# policies\nshared_subscription_policy = round_robin\n")
    with pytest.raises(config.ConfigError) as error:
        config.load(path, environ={})
    assert str(error.value).startswith(f"{path}:2: bad value for shared_subscription_policy")
    assert "prefer_local, local_only, random" in str(error.value)


def test_the_config_choices_are_the_router_policies() -> None:
    for policy in SHARED_POLICIES:
        assert config.SCHEMA["shared_subscription_policy"].parse(policy) == policy
    with pytest.raises(ValueError):
        config.SCHEMA["shared_subscription_policy"].parse("sticky")


# ---------------------------------------------------------------------------------------------- the property

NODES = ("n1", "n2", "n3", "n4")
GROUPS = (("g", "t/#"), ("h", "t/+"), ("k", "t/x"))

# a member: (group index, node index, online)
members_strategy = st.lists(
    st.tuples(st.integers(0, len(GROUPS) - 1), st.integers(0, len(NODES) - 1), st.booleans()), max_size=12
)


class InMemoryCluster:
    """One router per node, every subscription known to the other nodes as remote, forwards delivered by hand."""

    def __init__(self, members: list[tuple[int, int, bool]], policy: str, seed: int) -> None:
        self.sessions: dict[str, dict[str, Session]] = {node: {} for node in NODES}
        self.routers = {node: Router(self.sessions[node], random.Random(seed + i), policy)
                        for i, node in enumerate(NODES)}
        self.members: dict[str, tuple[int, str, Session, RecordingSink]] = {}
        for number, (group, node_index, online) in enumerate(members):
            node = NODES[node_index]
            client_id = f"m{number}"
            session, sink = add_session(self.sessions[node], client_id, online)
            self.members[client_id] = (group, node, session, sink)
            name, match_filter = GROUPS[group]
            sub = entry(f"$share/{name}/{match_filter}")
            for other, router in self.routers.items():
                if other == node:
                    router.add(client_id, sub)
                else:
                    router.add_remote(node, client_id, sub)

    def publish(self, node: str, payload: bytes) -> dict[str, list[tuple[str, str]]]:
        message = Message("t/x", payload, 1)
        remote = self.routers[node].route(message, 0.0).remote
        for target, groups in remote.items():
            assert target != node
            self.routers[target].route(message, 0.0, only_groups=groups)
        return remote

    def receivers(self, payload: bytes) -> dict[int, list[tuple[str, str]]]:
        """Per group index, the (node, client id) of the members that got `payload`."""
        got: dict[int, list[tuple[str, str]]] = {}
        for client_id, (group, node, session, sink) in self.members.items():
            got.setdefault(group, [])
            got[group] += [(node, client_id)] * received(session, sink).count(payload)
        return got


@settings(max_examples=300, deadline=None)
@given(members=members_strategy, policy=st.sampled_from(SHARED_POLICIES), publisher=st.sampled_from(NODES),
       seed=st.integers(0, 2**32 - 1), messages=st.integers(1, 4))
def test_every_group_gets_a_message_at_most_once_and_exactly_once_when_the_policy_allows_a_member(
    members: list[tuple[int, int, bool]], policy: str, publisher: str, seed: int, messages: int
) -> None:
    cluster = InMemoryCluster(members, policy, seed)
    for n in range(messages):
        payload = f"msg{n}".encode()
        remote = cluster.publish(publisher, payload)
        got = cluster.receivers(payload)
        for group in range(len(GROUPS)):
            nodes_with_members = {NODES[i] for g, i, _online in members if g == group}
            receivers = got.get(group, [])
            assert len(receivers) <= 1, (policy, group, receivers)
            local = publisher in nodes_with_members
            allowed = local if policy == LOCAL_ONLY else bool(nodes_with_members)
            assert len(receivers) == int(allowed), (policy, group, members, receivers)
            if receivers and policy != RANDOM and local:
                assert receivers[0][0] == publisher  # prefer_local and local_only serve the group here
        if policy == LOCAL_ONLY:
            assert all(groups == [] for groups in remote.values()), remote
        for node, forwarded in remote.items():  # a group is forwarded only to a node with a member of it
            for name_and_filter in forwarded:
                assert any(GROUPS[g] == name_and_filter and NODES[i] == node for g, i, _online in members)
