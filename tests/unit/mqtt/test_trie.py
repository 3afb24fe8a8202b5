from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from tests.unit.broker.reference import MATCH_TABLE, ref_matches
from tests.unit.broker.topic_strategies import filters, topics
from vmqpy.mqtt.trie import SubscriptionTrie, _Node


def names(matches: list[tuple[str, Any, Any]]) -> list[str]:
    return sorted(f for f, _, _ in matches)


def count_nodes(node: _Node[Any, Any]) -> int:
    n = 1
    for child in node.children.values():
        n += count_nodes(child)
    for wild in (node.plus, node.hash):
        if wild is not None:
            n += count_nodes(wild)
    return n


def assert_pruned(trie: SubscriptionTrie[Any, Any]) -> None:
    """Every non-root node leads to at least one entry, and cached tuples agree with the entries."""

    def walk(node: _Node[Any, Any], is_root: bool) -> int:
        entries_below = len(node.entries)
        if node.matches is not None:
            assert node.matches == [(node.filter, k, v) for k, v in node.entries.items()]
        for child in [*node.children.values(), node.plus, node.hash]:
            if child is not None:
                entries_below += walk(child, False)
        if not is_root:
            assert entries_below > 0, "an empty node was not pruned"
        return entries_below

    assert walk(trie._root, True) == len(trie)


# -- table tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCH_TABLE)
def test_reference_matcher_table(topic_filter: str, topic: str, expected: bool) -> None:
    assert ref_matches(topic_filter, topic) is expected


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCH_TABLE)
def test_single_filter_table(topic_filter: str, topic: str, expected: bool) -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add(topic_filter, "client", 1)
    assert trie.match(topic) == ([(topic_filter, "client", 1)] if expected else [])


def test_all_table_filters_together() -> None:
    trie: SubscriptionTrie[str, str] = SubscriptionTrie()
    all_filters = sorted({f for f, _, _ in MATCH_TABLE})
    for f in all_filters:
        trie.add(f, "k", f)
    for topic in sorted({t for _, t, _ in MATCH_TABLE}):
        got = trie.match(topic)
        assert names(got) == [f for f in all_filters if ref_matches(f, topic)], topic
        assert all(v == f for f, _, v in got)


def test_concrete_match_sets() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    for f in ["#", "+", "+/+", "/+", "a", "a/#", "a/+", "a/b", "a//b", "/a", "$SYS/#", "+/b", "a/b/#"]:
        trie.add(f, "c", 0)
    assert names(trie.match("a")) == ["#", "+", "a", "a/#"]
    assert names(trie.match("a/b")) == ["#", "+/+", "+/b", "a/#", "a/+", "a/b", "a/b/#"]
    assert names(trie.match("/a")) == ["#", "+/+", "/+", "/a"]
    assert names(trie.match("a//b")) == ["#", "a/#", "a//b"]
    assert names(trie.match("$SYS/b")) == ["$SYS/#"]
    assert names(trie.match("$SYS")) == ["$SYS/#"]
    assert names(trie.match("x/y/z")) == ["#"]


def test_empty_trie() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    assert trie.match("a") == []
    assert trie.match("$SYS") == []
    assert len(trie) == 0
    assert trie.filters() == 0
    assert trie.remove("a", "x") is False


# -- add / remove / counts --------------------------------------------------------------------------


def test_add_returns_new_or_replaced_and_replaces_value() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    assert trie.add("a/+", "c1", 1) is True
    assert trie.add("a/+", "c1", 2) is False
    assert trie.match("a/x") == [("a/+", "c1", 2)]
    assert trie.get("a/+", "c1") == 2
    assert len(trie) == 1
    assert trie.filters() == 1


def test_several_keys_per_filter_and_counts() -> None:
    trie: SubscriptionTrie[Any, int] = SubscriptionTrie()
    assert trie.add("a/#", "c1", 1)
    assert trie.add("a/#", "c2", 2)
    assert trie.add("a/#", ("$share", "g", "c3"), 3)  # keys are opaque hashables
    assert trie.add("a/b", "c1", 4)
    assert len(trie) == 4
    assert trie.filters() == 2
    assert sorted(trie.match("a/b"), key=repr) == sorted(
        [("a/#", "c1", 1), ("a/#", "c2", 2), ("a/#", ("$share", "g", "c3"), 3), ("a/b", "c1", 4)], key=repr
    )
    assert trie.remove("a/#", "c2") is True
    assert len(trie) == 3
    assert trie.filters() == 2
    assert trie.remove("a/#", "c2") is False
    assert trie.remove("a/#", "c1") is True
    assert trie.remove("a/#", ("$share", "g", "c3")) is True
    assert trie.filters() == 1
    assert trie.match("a/b") == [("a/b", "c1", 4)]
    assert trie.match("a") == []


def test_remove_unknown() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a/b/c", "c1", 1)
    assert trie.remove("a/b", "c1") is False  # node exists but holds no entry
    assert trie.remove("a/b/c", "c2") is False  # wrong key
    assert trie.remove("a/+/c", "c1") is False
    assert trie.remove("a/b/c/#", "c1") is False
    assert trie.remove("#", "c1") is False
    assert len(trie) == 1
    assert count_nodes(trie._root) == 4


def test_remove_prunes_only_empty_nodes() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a", "k", 1)
    trie.add("a/b/c", "k", 2)
    trie.add("a/+/#", "k", 3)
    assert count_nodes(trie._root) == 1 + 1 + 2 + 2  # root, a, a/b, a/b/c, a/+, a/+/#
    assert trie.remove("a/b/c", "k")
    assert count_nodes(trie._root) == 4  # a/b and a/b/c pruned
    assert trie.match("a/b/c") == [("a/+/#", "k", 3)]
    assert trie.remove("a", "k")
    assert count_nodes(trie._root) == 4  # 'a' still leads to a/+/#
    assert trie.match("a") == []  # '+' needs a level
    assert trie.match("a/x") == [("a/+/#", "k", 3)]
    assert trie.remove("a/+/#", "k")
    assert count_nodes(trie._root) == 1
    assert trie._root.children == {} and trie._root.plus is None and trie._root.hash is None


def test_prefix_filter_removed_keeps_longer_one() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a/#", "k", 1)
    trie.add("a", "k", 2)
    trie.add("#", "k", 3)
    trie.add("+", "k", 4)
    trie.remove("a", "k")
    assert names(trie.match("a")) == ["#", "+", "a/#"]
    trie.remove("#", "k")
    trie.remove("+", "k")
    assert names(trie.match("a")) == ["a/#"]
    assert_pruned(trie)


def test_match_returns_a_fresh_list() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a", "k", 1)
    first = trie.match("a")
    first.append(("x", "y", 2))
    assert trie.match("a") == [("a", "k", 1)]


def test_cached_tuples_follow_changes() -> None:
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    trie.add("a", "k1", 1)
    assert trie.match("a") == [("a", "k1", 1)]
    trie.add("a", "k2", 2)
    assert sorted(trie.match("a")) == [("a", "k1", 1), ("a", "k2", 2)]
    trie.add("a", "k1", 10)
    assert sorted(trie.match("a")) == [("a", "k1", 10), ("a", "k2", 2)]
    trie.remove("a", "k2")
    assert trie.match("a") == [("a", "k1", 10)]


def test_match_in_a_big_trie_finds_only_matching_filters() -> None:
    """30,000 unrelated filters beside the wildcards: match returns exactly the matching ones.

    (How match time scales with the number of filters is measured in bench/bench_broker.py, not asserted.)"""
    rng = random.Random(7)
    big: SubscriptionTrie[int, int] = SubscriptionTrie()
    for i, f in enumerate(["+/status/#", "dev/+/status", "#", "dev/+/+/x"]):
        big.add(f, i, i)
    for i in range(30_000):
        big.add(f"dev/{rng.randrange(10**6)}/{rng.choice(['status', 'cfg', 'x'])}/{i}", 100 + i, i)
    assert sorted(f for f, _, _ in big.match("dev/5/status")) == ["#", "dev/+/status"]
    assert sorted(f for f, _, _ in big.match("dev/5/cfg/x")) == ["#", "dev/+/+/x"]


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    subs=st.lists(st.tuples(filters(), st.integers(0, 3), st.integers()), max_size=25),
    probe=st.lists(topics(), min_size=1, max_size=8),
)
def test_match_equals_brute_force(subs: list[tuple[str, int, int]], probe: list[str]) -> None:
    trie: SubscriptionTrie[int, int] = SubscriptionTrie()
    model: dict[tuple[str, int], int] = {}
    for f, k, v in subs:
        assert trie.add(f, k, v) is ((f, k) not in model)
        model[(f, k)] = v
    for topic in probe:
        expected = sorted((f, k, v) for (f, k), v in model.items() if ref_matches(f, topic))
        got = trie.match(topic)
        assert len(got) == len(set(got)), "duplicate results"
        assert sorted(got) == expected
    assert len(trie) == len(model)
    assert trie.filters() == len({f for f, _ in model})


class TrieMachine(RuleBasedStateMachine):
    """SubscriptionTrie against a dict model, through arbitrary add/remove sequences."""

    added = Bundle("added")

    @initialize()
    def setup(self) -> None:
        self.trie: SubscriptionTrie[str, int] = SubscriptionTrie()
        self.model: dict[tuple[str, str], int] = {}

    @rule(target=added, f=filters(), key=st.sampled_from(["c1", "c2", "c3"]), value=st.integers(0, 9))
    def add(self, f: str, key: str, value: int) -> tuple[str, str]:
        assert self.trie.add(f, key, value) is ((f, key) not in self.model)
        self.model[(f, key)] = value
        return (f, key)

    @rule(entry=added)
    def remove_added(self, entry: tuple[str, str]) -> None:
        f, key = entry
        assert self.trie.remove(f, key) is (entry in self.model)
        self.model.pop(entry, None)

    @rule(f=filters(), key=st.sampled_from(["c1", "c2", "c3"]))
    def remove_any(self, f: str, key: str) -> None:
        assert self.trie.remove(f, key) is ((f, key) in self.model)
        self.model.pop((f, key), None)

    @rule(topic=topics())
    def match(self, topic: str) -> None:
        expected = sorted((f, k, v) for (f, k), v in self.model.items() if ref_matches(f, topic))
        assert sorted(self.trie.match(topic)) == expected

    @invariant()
    def counts_and_pruning(self) -> None:
        assert len(self.trie) == len(self.model)
        assert self.trie.filters() == len({f for f, _ in self.model})
        assert_pruned(self.trie)


TrieMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_trie_state_machine = TrieMachine.TestCase
