"""cluster.discovery's decisions (vmqpy/cluster/discovery_plan.py): the peer list's syntax, whom a node tries and
when it tries nobody (tables), the properties "never itself, every peer not yet a member, the anchor first, a
bounded wait", a simulation of nodes that list each other and start in any order (they end as one cluster), and
the keys in a configuration file (bad values refused with their line)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy import config
from vmqpy.cluster.discovery_plan import (
    ANCHOR,
    BUSY,
    LEFT,
    NO_PEERS,
    Peer,
    Situation,
    Warned,
    parse_peers,
    peers_of,
    plan,
    retry_delay,
    warn_now,
)
from vmqpy.config_values import ConfigError


def peer(n: int) -> Peer:
    return Peer(f"n{n}@127.0.0.{10 + n}", f"127.0.0.{10 + n}", 44053)


def name(n: int) -> str:
    return peer(n).name


N1, N2, N3, N4 = (peer(i) for i in range(1, 5))
ALL = (N1, N2, N3, N4)

# ------------------------------------------------------------------------------------------------ the syntax


@pytest.mark.parametrize(
    ("text", "peers"),
    [
        ("", ()),
        ("   ", ()),
        ("n1@127.0.0.11", ("n1@127.0.0.11:44053",)),
        ("n1@127.0.0.11:45000, n2@127.0.0.12", ("n1@127.0.0.11:45000", "n2@127.0.0.12:44053")),
        ("n2@h2,n1@h1", ("n2@h2:44053", "n1@h1:44053")),  # the given order
        ("n1@h1, n1@h1:44053", ("n1@h1:44053",)),  # the same peer twice: once
    ],
)
def test_peer_list(text: str, peers: tuple[str, ...]) -> None:
    assert parse_peers(text) == peers


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("n1@h1,,n2@h2", "entry 2 of 'n1@h1,,n2@h2' is empty"),
        ("n1@h1,", "entry 2"),
        ("n1", "entry 1: expected NAME@HOST[:PORT]"),
        ("n1@h1, n2 @h2", "entry 2"),
        ("n1@h1:0", "entry 1: port 0 out of range"),
        ("n1@h1:70000", "port 70000 out of range"),
        ("n1@h1:1, n1@h1:2", "n1@h1 is listed twice with different ports"),
    ],
)
def test_bad_peer_list(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_peers(text)


def test_peers_of() -> None:
    assert peers_of(parse_peers("n2@127.0.0.12:45000")) == (Peer("n2@127.0.0.12", "127.0.0.12", 45000),)
    assert str(Peer("n2@h", "h", 45000)) == "n2@h:45000"  # as `cluster join discovery-node=` takes it


# ------------------------------------------------------------------------------------------------ the plan


def at(me: int, members: set[int] | None = None, departed: set[int] | None = None, **kw: bool) -> Situation:
    return Situation(name(me), frozenset(name(m) for m in (members or {me}) | {me}),
                     frozenset(name(d) for d in departed or ()), **kw)


@pytest.mark.parametrize(
    ("situation", "peers", "targets", "idle"),
    [
        # a new node that is not the anchor tries every other listed peer, the anchor (lowest name) first
        (at(3), ALL, (N1, N2, N4), ""),
        (at(2), (N3, N1), (N1, N3), ""),
        # itself in the list is ignored
        (at(2), (N2, N1), (N1,), ""),
        (at(1), (N1,), (), NO_PEERS),
        (at(1), (), (), NO_PEERS),
        # settled once the anchor is a member (a restart of a joined node does nothing)
        (at(3, {1, 2, 3}), ALL[:3], (), "in a cluster with n1@127.0.0.11"),
        (at(3, {1, 3}), ALL, (), "in a cluster with n1@127.0.0.11"),
        # in a cluster with another listed peer, but not the anchor: go on, to the anchor only
        (at(3, {2, 3}), ALL[:3], (N1,), ""),
        (at(4, {3, 4}), ALL, (N1, N2), ""),
        # the anchor is settled when not alone, and tries the others when alone
        (at(1, {1, 2}), ALL[:3], (), ANCHOR),
        (at(1), ALL[:3], (N2, N3), ""),
        # a peer removed from the cluster (departed, not a member again) is never tried, nor the anchor
        (at(3, {2, 3}, departed={1}), ALL[:3], (), "in a cluster with n2@127.0.0.12"),
        (at(3, departed={1}), ALL[:3], (N2,), ""),
        (at(2, {2, 3}, departed={1}), ALL[:3], (), ANCHOR),
        # a node that left its cluster tries nobody; nor while a join or a leave runs
        (at(3, left=True), ALL, (), LEFT),
        (at(3, busy=True), ALL, (), BUSY),
        (at(3, {2, 3}, left=True, busy=True), ALL, (), LEFT),
    ],
)
def test_plan(situation: Situation, peers: tuple[Peer, ...], targets: tuple[Peer, ...], idle: str) -> None:
    decided = plan(situation, peers)
    assert decided.targets == targets
    assert decided.idle == idle


numbers = st.integers(min_value=1, max_value=9)


@settings(max_examples=300, deadline=None)
@given(me=numbers, listed=st.sets(numbers, max_size=9), members=st.sets(numbers, max_size=9),
       departed=st.sets(numbers, max_size=3))
def test_never_itself_every_peer_anchor_first(me: int, listed: set[int], members: set[int],
                                              departed: set[int]) -> None:
    departed -= members  # departed and a member again: a member
    peers = tuple(peer(n) for n in listed)
    situation = at(me, members, departed)
    targets = plan(situation, peers).targets
    names = [p.name for p in targets]
    assert situation.me not in names
    assert list(names) == sorted(names)
    assert not set(names) & situation.members
    assert not set(names) & situation.departed
    eligible = {name(n) for n in listed if n != me and n not in departed}
    lowest = min([situation.me, *eligible])
    settled = len(situation.members) > 1 if lowest == situation.me else lowest in situation.members
    if eligible and not settled:
        assert set(names) == eligible - situation.members  # every peer not yet a member, each once
        assert names[0] == lowest or lowest == situation.me
    else:
        assert names == []


@settings(max_examples=300, deadline=None)
@given(rounds=st.integers(min_value=0, max_value=10**6), draw=st.floats(min_value=0, max_value=0.999999),
       shortest=st.floats(min_value=0.01, max_value=10), longest=st.floats(min_value=10, max_value=600))
def test_retry_delay_bounded(rounds: int, draw: float, shortest: float, longest: float) -> None:
    delay = retry_delay(rounds, shortest, longest, lambda: draw)
    assert shortest / 2 <= delay <= longest


@pytest.mark.parametrize(
    ("last", "reason", "now", "warned"),
    [
        (None, "refused", 0.0, True),  # the first failure
        (Warned("refused", 0.0), "refused", 29.9, False),  # the same reason within the period: debug
        (Warned("refused", 0.0), "refused", 30.0, True),  # once a period
        (Warned("refused", 0.0), "timed out", 1.0, True),  # a new reason at once
    ],
)
def test_warn_now(last: Warned | None, reason: str, now: float, warned: bool) -> None:
    assert warn_now(last, reason, now, 30.0) is warned


# ------------------------------------------------------------------------------------------------ simulation


class Simulation:
    """Nodes that join as the plan says: a join of an up peer merges the two clusters (what the replicated
    membership does); nodes come up at random steps; a node's turn tries its targets in order until one is up."""

    def __init__(self, count: int, lists: dict[int, set[int]], rng: random.Random) -> None:
        self.rng = rng
        self.lists = {n: tuple(peer(p) for p in lists[n]) for n in range(1, count + 1)}
        self.cluster = {n: frozenset({n}) for n in range(1, count + 1)}
        self.up: set[int] = set()
        self.down = list(range(1, count + 1))
        rng.shuffle(self.down)

    def targets(self, n: int) -> tuple[Peer, ...]:
        return plan(at(n, set(self.cluster[n])), self.lists[n]).targets

    def join(self, n: int, other: int) -> None:
        merged = self.cluster[n] | self.cluster[other]
        for m in merged:
            self.cluster[m] = merged

    def step(self) -> None:
        if self.down and (not self.up or self.rng.random() < 0.3):
            self.up.add(self.down.pop())
            return
        n = self.rng.choice(sorted(self.up))
        for target in self.targets(n):
            other = int(target.name[1:].split("@")[0])
            if other in self.up:
                self.join(n, other)
                return

    def settled(self) -> bool:
        return not self.down and all(not self.targets(n) for n in self.up)


def run(sim: Simulation) -> set[frozenset[int]]:
    for _ in range(10_000):
        if sim.settled():
            return set(sim.cluster.values())
        sim.step()
    raise AssertionError("the nodes never settled")


@settings(max_examples=200, deadline=None)
@given(count=st.integers(min_value=2, max_value=7), seed=st.integers(min_value=0, max_value=2**32))
def test_nodes_listing_each_other_end_as_one_cluster(count: int, seed: int) -> None:
    everyone = set(range(1, count + 1))
    assert run(Simulation(count, {n: everyone for n in everyone}, random.Random(seed))) == {frozenset(everyone)}


@settings(max_examples=200, deadline=None)
@given(count=st.integers(min_value=2, max_value=7), seed=st.integers(min_value=0, max_value=2**32),
       data=st.data())
def test_nodes_listing_the_lowest_end_as_one_cluster(count: int, seed: int, data: st.DataObject) -> None:
    """Each node lists any peers, as long as the lowest name is among them (or it is the lowest)."""
    everyone = set(range(1, count + 1))
    lists = {n: {1} | data.draw(st.sets(st.sampled_from(sorted(everyone)))) for n in everyone}
    assert run(Simulation(count, lists, random.Random(seed))) == {frozenset(everyone)}


def test_settled_on_any_listed_peer_would_split_four_nodes() -> None:
    """Why the anchor: {n1, n2} and {n3, n4} each hold a listed peer, yet n3 and n4 go on to n1."""
    assert plan(at(3, {3, 4}), ALL).targets == (N1, N2)
    assert plan(at(4, {3, 4}), ALL).targets == (N1, N2)
    assert plan(at(2, {1, 2}), ALL).targets == ()


# ------------------------------------------------------------------------------------------------ in a file


def test_the_keys_in_a_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "vmqpy.conf"
    path.write_text("listener.vmq.clustering = 127.0.0.12:44053\n"
                    "cluster.discovery = n1@127.0.0.11:45000, n2@127.0.0.12, n3@127.0.0.13\n"
                    "cluster.discovery_interval = 500ms\ncluster.discovery_max_interval = 1m\n")
    loaded = config.load(path, environ={})
    assert loaded.cluster_discovery == ("n1@127.0.0.11:45000", "n2@127.0.0.12:44053", "n3@127.0.0.13:44053")
    assert (loaded.cluster_discovery_interval, loaded.cluster_discovery_max_interval) == (0.5, 60.0)
    assert config.value_of(loaded, "cluster.discovery") == "n1@127.0.0.11:45000,n2@127.0.0.12:44053,n3@127.0.0.13:44053"
    assert config.load(None, environ={}).cluster_discovery == ()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("listener.vmq.clustering = 127.0.0.12:44053\ncluster.discovery = n1@h1,n2\n",
         "vmqpy.conf:2: bad value for cluster.discovery: entry 2: expected NAME@HOST[:PORT], got 'n2'"),
        ("listener.vmq.clustering = 127.0.0.12:44053\ncluster.discovery_interval = 0s\n",
         "vmqpy.conf:2: bad value for cluster.discovery_interval"),
        ("cluster.discovery = n1@h1\n",
         "vmqpy.conf:1: cluster.discovery needs listener.vmq.clustering"),
    ],
)
def test_bad_keys_refused_with_their_line(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.load(path, environ={})
