"""NodeClock (bitmapped version vector): table tests and properties over random dot deliveries."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvv.dots import Counters
from dvv.errors import InvalidClockError
from dvv.node_clock import NodeClock, normalise
from dvv.version_vector import VersionVector

from .histories import PROPS, DotHistory, brute_dots, node_clock_histories

B1 = NodeClock(
    {"a": (12, 0), "b": (7, 0), "c": (4, 0), "d": (5, 0), "e": (5, 0), "f": (7, 10), "g": (5, 10), "h": (5, 14)}
)
B2 = NodeClock(
    {"a": (5, 14), "b": (5, 14), "c": (5, 14), "d": (5, 14), "e": (15, 0), "f": (5, 14), "g": (7, 10), "h": (7, 10)}
)


def test_normalise_base_5_bitmap_0b11_gives_base_7() -> None:
    assert normalise(5, 0b11) == (7, 0)
    assert normalise(5, 0b10) == (5, 0b10)
    assert normalise(0, 0b1011) == (2, 0b10)
    assert NodeClock({"a": (5, 3)}).entry("a") == (7, 0)


def test_values() -> None:
    assert NodeClock().values("a") == []
    assert NodeClock({"a": (5, 3)}).values("a") == [1, 2, 3, 4, 5, 6, 7]
    assert NodeClock({"a": (2, 5)}).values("a") == [1, 2, 3, 5]
    assert NodeClock({"a": (5, 0b1110)}).values("a") == [1, 2, 3, 4, 5, 7, 8, 9]


def test_published_missing_dots_example() -> None:
    """a at base 12 holds 6, 10, 11, 12 that a at base 5 with bitmap 0b1110 (dots 7, 8, 9) lacks."""
    have = NodeClock({"a": (12, 0)})
    lacks = NodeClock({"a": (5, 0b1110)})
    assert have.missing_dots(lacks, ["a"]) == {"a": [6, 10, 11, 12]}
    assert lacks.missing_dots(have, ["a"]) == {}


def test_missing_dots_table() -> None:
    every = ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert B1.missing_dots(B2, []) == {}
    assert B1.missing_dots(B2, every) == {"a": [6, 10, 11, 12], "b": [6], "f": [6, 11], "h": [8]}
    assert B1.missing_dots(B2, ["a", "c", "d", "e", "f", "g", "h"]) == {"a": [6, 10, 11, 12], "f": [6, 11], "h": [8]}
    assert NodeClock({"a": (2, 2), "b": (3, 0)}).missing_dots(NodeClock(), ["a"]) == {"a": [1, 2, 4]}
    assert NodeClock({"a": (2, 2), "b": (3, 0)}).missing_dots(NodeClock(), ["a", "b"]) == {
        "a": [1, 2, 4],
        "b": [1, 2, 3],
    }
    assert NodeClock().missing_dots(B1, every) == {}
    assert B1.missing_dots(B2) == B1.missing_dots(B2, every)


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        ((12, 0), (5, 14), [6, 10, 11, 12]),
        ((7, 0), (5, 14), [6]),
        ((4, 0), (5, 14), []),
        ((5, 0), (5, 14), []),
        ((5, 0), (15, 0), []),
        ((7, 10), (5, 14), [6, 11]),
        ((5, 10), (7, 10), []),
        ((5, 14), (7, 10), [8]),
        ((0, 0b1010), (0, 0b1000), [2]),
        ((3, 0b100), (0, 0), [1, 2, 3, 6]),
    ],
)
def test_missing_dots_per_entry(mine: tuple[int, int], theirs: tuple[int, int], expected: list[int]) -> None:
    result = NodeClock({"x": mine}).missing_dots(NodeClock({"x": theirs}), ["x"])
    assert result == ({"x": expected} if expected else {})


def test_add() -> None:
    assert NodeClock({"a": (5, 3)}).add(("b", 0)) == NodeClock({"a": (7, 0), "b": (0, 0)})
    assert NodeClock({"a": (5, 3)}).add(("a", 1)) == NodeClock({"a": (7, 0)})
    assert NodeClock({"a": (5, 3)}).add(("a", 8)) == NodeClock({"a": (8, 0)})
    assert NodeClock({"a": (5, 3)}).add(("b", 8)) == NodeClock({"a": (7, 0), "b": (0, 128)})
    assert NodeClock({"x": (2, 5)}).add(("x", 4)) == NodeClock({"x": (5, 0)})
    assert NodeClock({"x": (2, 5)}).add(("x", 6)) == NodeClock({"x": (3, 6)})
    assert NodeClock({"x": (2, 4)}).add(("x", 6)) == NodeClock({"x": (2, 12)})
    with pytest.raises(InvalidClockError):
        NodeClock().add(("a", -1))


def test_merge_and_join() -> None:
    assert NodeClock({"a": (5, 3)}).merge(NodeClock({"a": (2, 4)})) == NodeClock({"a": (7, 0)})
    assert NodeClock({"a": (5, 3)}).merge(NodeClock({"b": (2, 4)})) == NodeClock({"a": (7, 0), "b": (2, 4)})
    assert NodeClock({"a": (5, 3), "c": (1, 2)}).merge(NodeClock({"b": (2, 4), "c": (5, 3)})) == NodeClock(
        {"a": (7, 0), "b": (2, 4), "c": (7, 0)}
    )
    assert NodeClock({"a": (5, 3)}).join(NodeClock({"b": (2, 4)})) == NodeClock({"a": (7, 0)})
    assert NodeClock({"a": (5, 3), "c": (1, 2)}).join(NodeClock({"b": (2, 4), "c": (5, 3)})) == NodeClock(
        {"a": (7, 0), "c": (7, 0)}
    )
    tracked = NodeClock.with_ids(["a", "b"])
    assert tracked.join(NodeClock({"b": (3, 0), "z": (9, 0)})) == NodeClock({"a": (0, 0), "b": (3, 0)})


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ((5, 3), (2, 4), (7, 0)),
        ((2, 2), (3, 0), (4, 0)),  # {1, 2, 4} | {1, 2, 3}
        ((2, 2), (3, 4), (4, 0b10)),  # {1, 2, 4} | {1, 2, 3, 6}
        ((3, 2), (1, 16), (3, 6)),
    ],
)
def test_merge_entries(x: tuple[int, int], y: tuple[int, int], expected: tuple[int, int]) -> None:
    merged = NodeClock({"k": x}).merge(NodeClock({"k": y})).entry("k")
    assert merged == NodeClock({"k": expected}).entry("k")
    assert merged == NodeClock({"k": y}).merge(NodeClock({"k": x})).entry("k")


def test_base_event_contains() -> None:
    clock = NodeClock({"a": (5, 3), "b": (2, 4), "c": (1, 2), "d": (5, 2)})
    assert clock.base() == VersionVector({"a": 7, "b": 2, "c": 1, "d": 5})
    assert NodeClock({"a": (7, 0)}).event("a") == (8, NodeClock({"a": (8, 0)}))
    assert NodeClock({"a": (5, 3)}).event("b") == (1, NodeClock({"a": (7, 0), "b": (1, 0)}))
    counter, after = NodeClock({"a": (2, 0b100)}).event("a")  # holds 1, 2, 5: never reuse below 5
    assert counter == 6 and after.contains(("a", 6))
    assert clock.contains(("b", 2)) and clock.contains(("b", 5)) and not clock.contains(("b", 3))
    assert ("d", 7) in clock and ("d", 6) not in clock and ("zz", 1) not in clock


def test_repr_and_equality() -> None:
    assert repr(NodeClock({"a": (5, 0b1110)})) == "NodeClock({'a': (5, 0b1110)})"
    assert NodeClock({"a": (5, 3)}) == NodeClock([("a", (7, 0))])
    assert hash(NodeClock({"a": (5, 3)})) == hash(NodeClock({"a": (7, 0)}))
    assert NodeClock({"a": (0, 0)}) != NodeClock()  # a tracked id is part of the state


def test_missing_dots_10_nodes_10000_apart_under_1ms() -> None:
    ids = [f"node{i}" for i in range(10)]
    ahead = NodeClock({n: (20_000, 0b1010) for n in ids})
    behind = NodeClock({n: (10_000, 0b100) for n in ids})
    result = ahead.missing_dots(behind, ids)
    assert {n: len(c) for n, c in result.items()} == dict.fromkeys(ids, 10_000 - 1 + 2)
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        ahead.missing_dots(behind, ids)
        best = min(best, time.perf_counter() - start)
    assert best < 1e-3, f"missing_dots took {best * 1e3:.3f} ms"


# -- properties ------------------------------------------------------------------------------------
@PROPS
@given(node_clock_histories())
def test_missing_dots_equals_brute_force_difference(h: DotHistory) -> None:
    clocks = h.clocks
    for x in clocks:
        for y in clocks:
            ids = list(h.nodes)
            got = x.missing_dots(y, ids)
            expected = {}
            for node in ids:
                if node in x.ids():
                    diff = sorted(brute_dots(x, node) - brute_dots(y, node))
                    if diff:
                        expected[node] = diff
            assert got == expected
            assert all(isinstance(c, Counters) for c in got.values())


@PROPS
@given(node_clock_histories(max_clocks=3))
def test_merge_is_union_commutative_associative_idempotent(h: DotHistory) -> None:
    a, b, c = (h.clocks * 3)[:3]
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a
    for node in h.nodes:
        assert brute_dots(a.merge(b), node) == brute_dots(a, node) | brute_dots(b, node)
        assert set(a.values(node)) == brute_dots(a, node)
    joined = a.join(b)
    assert joined.ids() == a.ids()
    for node in a.ids():
        assert brute_dots(joined, node) == brute_dots(a, node) | brute_dots(b, node)


@PROPS
@given(node_clock_histories(max_clocks=2))
def test_entries_stay_normalised_and_events_are_fresh(h: DotHistory) -> None:
    for clock in h.clocks:
        for node, (base, bitmap) in clock.items():
            assert bitmap & 1 == 0
            assert base >= 0
            counter, after = clock.event(node)
            assert not clock.contains((node, counter))
            assert after.contains((node, counter))
            assert counter > max(brute_dots(clock, node), default=0)
        assert clock.base() == VersionVector({n: e[0] for n, e in clock.items()})


@PROPS
@given(node_clock_histories(max_clocks=1), st.randoms(use_true_random=False))
def test_add_order_does_not_matter(h: DotHistory, rnd: object) -> None:
    import random

    assert isinstance(rnd, random.Random)
    clock = h.clocks[0]
    dots = list(clock.dots())
    rnd.shuffle(dots)
    rebuilt = NodeClock.with_ids(clock.ids()).add_all(dots)
    assert rebuilt == clock
    one_by_one = NodeClock.with_ids(clock.ids())
    for dot in reversed(dots):
        one_by_one = one_by_one.add(dot)
    assert one_by_one == clock
