from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.reference import MATCH_TABLE, ref_matches
from tests.unit.broker.topic_strategies import filters, topics
from vmqpy.broker.core.retained import RetainedStore, _Node


def count_nodes(node: _Node[Any]) -> int:
    return 1 + sum(count_nodes(c) for c in node.children.values())


def assert_pruned(store: RetainedStore[Any]) -> None:
    def walk(node: _Node[Any], is_root: bool) -> int:
        below = (node.item is not None) + sum(walk(c, False) for c in node.children.values())
        if not is_root:
            assert below > 0, "an empty node was not pruned"
        return below

    assert walk(store._root, True) == len(store)


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCH_TABLE)
def test_single_topic_table(topic_filter: str, topic: str, expected: bool) -> None:
    store: RetainedStore[bytes] = RetainedStore()
    store.set(topic, b"payload")
    assert store.match(topic_filter) == ([(topic, b"payload")] if expected else [])


def test_all_table_topics_together() -> None:
    store: RetainedStore[str] = RetainedStore()
    all_topics = sorted({t for _, t, _ in MATCH_TABLE})
    for t in all_topics:
        store.set(t, t.upper())
    assert len(store) == len(all_topics)
    for f in sorted({f for f, _, _ in MATCH_TABLE}):
        got = store.match(f)
        assert sorted(got) == [(t, t.upper()) for t in all_topics if ref_matches(f, t)], f


def test_concrete_match_sets() -> None:
    store: RetainedStore[int] = RetainedStore()
    for i, t in enumerate(["a", "a/b", "a/b/c", "a//b", "/a", "b", "$SYS/load", "$SYS", "a/$x"]):
        store.set(t, i)

    def topics_of(f: str) -> list[str]:
        return sorted(t for t, _ in store.match(f))

    assert topics_of("#") == sorted(["/a", "a", "a//b", "a/$x", "a/b", "a/b/c", "b"])
    assert topics_of("a/#") == sorted(["a", "a//b", "a/$x", "a/b", "a/b/c"])
    assert topics_of("a/b/#") == sorted(["a/b", "a/b/c"])
    assert topics_of("+") == sorted(["a", "b"])
    assert topics_of("+/+") == sorted(["/a", "a/$x", "a/b"])
    assert topics_of("+/b") == sorted(["a/b"])
    assert topics_of("a/+/b") == sorted(["a//b"])
    assert topics_of("/+") == sorted(["/a"])
    assert topics_of("+/#") == sorted(["/a", "a", "a//b", "a/$x", "a/b", "a/b/c", "b"])
    assert topics_of("$SYS/#") == sorted(["$SYS", "$SYS/load"])
    assert topics_of("$SYS/+") == sorted(["$SYS/load"])
    assert topics_of("$SYS") == sorted(["$SYS"])
    assert topics_of("c/#") == sorted([])
    assert topics_of("a/b/c/d") == sorted([])


def test_set_get_replace_delete() -> None:
    store: RetainedStore[bytes] = RetainedStore()
    assert store.get("a/b") is None
    store.set("a/b", b"1")
    store.set("a/b", b"2")
    assert len(store) == 1
    assert store.get("a/b") == b"2"
    assert store.get("a") is None  # interior node, nothing retained there
    assert store.get("a/b/c") is None
    assert "a/b" in store and "a" not in store
    assert store.match("a/b") == [("a/b", b"2")]
    assert store.delete("a/b") is True
    assert store.delete("a/b") is False
    assert store.delete("x/y") is False
    assert store.get("a/b") is None
    assert len(store) == 0
    assert store.match("#") == []


def test_delete_prunes_only_empty_nodes() -> None:
    store: RetainedStore[int] = RetainedStore()
    store.set("a", 1)
    store.set("a/b/c", 2)
    store.set("a/x", 3)
    assert count_nodes(store._root) == 5  # root, a, a/b, a/b/c, a/x
    assert store.delete("a") is True
    assert count_nodes(store._root) == 5  # 'a' still has children
    assert store.delete("a/b") is False
    assert store.delete("a/b/c") is True
    assert count_nodes(store._root) == 3
    assert store.delete("a/x") is True
    assert count_nodes(store._root) == 1
    assert store._root.children == {}


def test_items() -> None:
    store: RetainedStore[int] = RetainedStore()
    for i, t in enumerate(["a", "a/b", "/", "$SYS/x"]):
        store.set(t, i)
    store.delete("a")
    assert sorted(store.items()) == [("$SYS/x", 3), ("/", 2), ("a/b", 1)]


def test_falsy_values_are_retained() -> None:
    store: RetainedStore[bytes] = RetainedStore()
    store.set("a", b"")
    assert len(store) == 1
    assert store.match("#") == [("a", b"")]
    assert store.get("a") == b""


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.tuples(st.booleans(), topics(), st.integers(0, 9)), max_size=30),
    probe=st.lists(filters(), min_size=1, max_size=8),
)
def test_match_equals_brute_force(ops: list[tuple[bool, str, int]], probe: list[str]) -> None:
    store: RetainedStore[int] = RetainedStore()
    model: dict[str, int] = {}
    for is_set, topic, value in ops:
        if is_set:
            store.set(topic, value)
            model[topic] = value
        else:
            assert store.delete(topic) is (topic in model)
            model.pop(topic, None)
    assert len(store) == len(model)
    assert sorted(store.items()) == sorted(model.items())
    assert_pruned(store)
    for f in probe:
        got = store.match(f)
        assert len(got) == len(set(got)), "duplicate results"
        assert sorted(got) == sorted((t, v) for t, v in model.items() if ref_matches(f, t))
    for t in model:
        assert store.get(t) == model[t]



_levels = st.sampled_from(["a", "b", "", "$s", "ret", "0"])
_topics = st.lists(_levels, min_size=1, max_size=4).map("/".join)


@given(st.lists(_topics, max_size=30), st.lists(st.tuples(_topics, st.integers()), max_size=60), st.booleans())
def test_set_many_is_set_in_order(before: list[str], items: list[tuple[str, int]], in_key_order: bool) -> None:
    """The restart's bulk insert (reusing the parent level of the topic before) leaves the tree `set` leaves."""
    if in_key_order:  # as a restart reads them
        items.sort(key=lambda item: item[0])
    one_by_one: RetainedStore[int] = RetainedStore()
    bulk: RetainedStore[int] = RetainedStore()
    for topic in before:
        one_by_one.set(topic, -1)
        bulk.set(topic, -1)
    for topic, value in items:
        one_by_one.set(topic, value)
    bulk.set_many(items)
    assert len(bulk) == len(one_by_one)
    assert sorted(bulk.items()) == sorted(one_by_one.items())
    for pattern in ("#", "+/#", "a/+", "ret/0/#", "$s/#", "+", "/"):
        assert sorted(bulk.match(pattern)) == sorted(one_by_one.match(pattern))
    for topic, _value in list(bulk.items()):
        bulk.delete(topic)
    assert_pruned(bulk)
