"""The dot -> key index: live dots stay, pending (superseded or deleted) dots go once every member holds them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.metadata.dot_index import DotIndex

K1 = ("p", ("k1",))
K2 = ("p", ("k2",))


def test_prune_forgets_pending_dots_up_to_each_nodes_floor_and_keeps_live_ones() -> None:
    index = DotIndex()
    for dot, fk in ((("a", 1), K1), (("a", 2), K1), (("a", 3), K2), (("b", 1), K2), (("b", 2), K2)):
        index.add(dot, fk)
    index.supersede(("a", 1), K1)  # (a, 2) overwrote it
    index.supersede(("a", 3), K2)  # (b, 2) overwrote both
    index.supersede(("b", 1), K2)
    floors = {"a": 1, "b": 5}
    assert index.prune(floors.__getitem__) == [(("a", 1), K1, True), (("b", 1), K2, False)]
    assert index.copy() == {"a": {2: K1, 3: K2}, "b": {2: K2}}
    assert index.awaits(K2) and not index.awaits(K1)
    assert (index.indexed(), index.pending()) == (3, 1)
    assert index.prune(dict.fromkeys("ab", 3).__getitem__) == [(("a", 3), K2, True)]
    assert not index.has_pending() and index.pending_nodes() == []
    assert index.dump() == ({"a": [2], "b": [2]}, {})


def test_a_pending_row_read_back_never_displaces_a_live_dot() -> None:
    index = DotIndex()
    index.add(("a", 4), K1)
    assert not index.restore_pending(("a", 4), K2), "live in an object row: the object wins"
    assert index.restore_pending(("a", 3), K1)
    assert index.copy() == {"a": {3: K1, 4: K1}}
    assert index.pending_nodes() == ["a"] and index.awaits(K1)


OPS = st.tuples(st.sampled_from(["add", "supersede", "prune"]), st.sampled_from("ab"), st.integers(0, 6), st.booleans())


@given(st.lists(OPS, max_size=60))
def test_the_index_behaves_like_a_dict_and_a_set_of_pending_dots(ops: list[tuple[str, str, int, bool]]) -> None:
    index = DotIndex()
    live: dict[tuple[str, int], tuple[str, tuple[str]]] = {}
    pending: dict[tuple[str, int], tuple[str, tuple[str]]] = {}
    top = {"a": 0, "b": 0}
    for op, node, n, second_key in ops:
        if op == "add":  # a new dot of node, as a write or an applied object brings it
            top[node] += 1
            dot = (node, top[node])
            live[dot] = K2 if second_key else K1
            index.add(dot, live[dot])
        elif op == "supersede" and live:
            dot = sorted(live)[n % len(live)]
            pending[dot] = live.pop(dot)
            index.supersede(dot, pending[dot])
        elif op == "prune":
            floor = {"a": n, "b": 6 - n}
            gone = sorted(d for d in pending if d[1] <= floor[d[0]])
            expected = []
            for dot in gone:
                fk = pending.pop(dot)
                expected.append((dot, fk, fk not in pending.values()))
            if second_key:  # a slice at a time (GC's PRUNE_SLICE): the same dots, in the same order
                got: list[object] = []
                for _ in range(len(expected) + 1):
                    got += index.prune(floor.__getitem__, n % 3 + 1)
                    if not index.prunable(floor.__getitem__):
                        break
                assert got == expected
            else:
                assert index.prune(floor.__getitem__) == expected
            assert not index.prunable(floor.__getitem__)
    by_node: dict[str, dict[int, tuple[str, tuple[str]]]] = {}
    for (node, counter), fk in {**live, **pending}.items():
        by_node.setdefault(node, {})[counter] = fk
    assert index.copy() == by_node
    assert index.pending() == len(pending)
    assert all(index.awaits(fk) == (fk in pending.values()) for fk in (K1, K2))
