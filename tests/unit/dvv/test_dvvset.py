"""DVVSet: table tests with concrete clocks and properties over random write histories."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvv import dvvset
from dvv.dvvset import Clock, Entry
from dvv.errors import DVVError, InvalidClockError
from dvv.version_vector import VersionVector

from .histories import PROPS, DvvHistory, dvv_clocks, dvv_histories, dvv_to_container, unhashable


def C(entries: list[tuple[str, int, list[object]]], anonymous: list[object] | None = None) -> Clock:
    return Clock(tuple(Entry(i, n, tuple(vs)) for i, n, vs in entries), tuple(anonymous or ()))


# -- construction, join, update --------------------------------------------------------------------
def test_new_holds_one_anonymous_value() -> None:
    assert dvvset.new("x") == C([], ["x"])
    assert dvvset.join(dvvset.new("x")) == VersionVector()


def test_new_with_context_keeps_history_without_values() -> None:
    clock = dvvset.new_with_context(VersionVector({"b": 2, "a": 1}), "x")
    assert clock == C([("a", 1, []), ("b", 2, [])], ["x"])
    assert dvvset.new_with_context({"a": 3}, "y") == C([("a", 3, [])], ["y"])


def test_join_after_updates() -> None:
    first = dvvset.update(dvvset.new("v1"), "a")
    second = dvvset.update_with(dvvset.new_with_context(dvvset.join(first), "v2"), first, "b")
    assert dvvset.join(first) == {"a": 1}
    assert dvvset.join(second) == {"a": 1, "b": 1}
    assert dvvset.values(second) == ["v2"]


def test_update_sequences() -> None:
    s0 = dvvset.update(dvvset.new("v1"), "a")
    s1 = dvvset.update_with(dvvset.new_with_context(dvvset.join(s0), "v2"), s0, "a")
    s2 = dvvset.update_with(dvvset.new_with_context(dvvset.join(s1), "v3"), s1, "b")
    s3 = dvvset.update_with(dvvset.new_with_context(dvvset.join(s0), "v4"), s1, "b")
    s4 = dvvset.update_with(dvvset.new_with_context(dvvset.join(s0), "v5"), s1, "a")
    assert s0 == C([("a", 1, ["v1"])])
    assert s1 == C([("a", 2, ["v2"])])
    assert s2 == C([("a", 2, []), ("b", 1, ["v3"])])
    assert s3 == C([("a", 2, ["v2"]), ("b", 1, ["v4"])])
    assert s4 == C([("a", 3, ["v5", "v2"])])


def test_published_example_sibling_replaced_by_write_under_its_read_context() -> None:
    """Siblings v1, v2 on node a; v3 written on a with the context v1 was read in replaces v1 only."""
    s0 = dvvset.update(dvvset.new("v1"), "a")  # one client writes v1 without context
    ctx_v1 = dvvset.join(s0)  # another client reads v1
    s1 = dvvset.update_with(dvvset.new("v2"), s0, "a")  # first client writes v2, again blind
    assert s1 == C([("a", 2, ["v2", "v1"])])
    s2 = dvvset.update_with(dvvset.new_with_context(ctx_v1, "v3"), s1, "a")
    assert dvvset.values(s2) == ["v3", "v2"]
    assert "v1" not in dvvset.values(s2)
    assert s2 == C([("a", 3, ["v3", "v2"])])


def test_update_needs_exactly_one_anonymous_value() -> None:
    with pytest.raises(InvalidClockError):
        dvvset.update(C([("a", 1, ["x"])]), "a")
    with pytest.raises(DVVError):
        dvvset.update_with(dvvset.new_list(["x", "y"]), Clock(), "a")


# -- sync ------------------------------------------------------------------------------------------
def test_sync_table() -> None:
    x = C([("x", 1, [])])
    a = dvvset.update(dvvset.new("v1"), "a")
    y = dvvset.update(dvvset.new_list(["v2"]), "b")
    a1 = dvvset.update(dvvset.new_list(["v2"], dvvset.join(a)), "a")
    a3 = dvvset.update(dvvset.new_list(["v3"], dvvset.join(a1)), "b")
    a4 = dvvset.update(dvvset.new_list(["v3"], dvvset.join(a1)), "c")
    w = C([("a", 1, [])])
    z = C([("a", 2, ["v2", "v1"])])
    assert dvvset.sync([w, z]) == C([("a", 2, ["v2"])])
    assert dvvset.sync([z, w]) == C([("a", 2, ["v2"])])
    assert dvvset.sync([a, a1]) == dvvset.sync([a1, a]) == a1
    assert dvvset.sync([a4, a3]) == C([("a", 2, []), ("b", 1, ["v3"]), ("c", 1, ["v3"])])
    assert dvvset.sync([a3, a4]) == dvvset.sync([a4, a3])
    assert dvvset.sync([x, a]) == C([("a", 1, ["v1"]), ("x", 1, [])])
    assert dvvset.sync([a, y]) == C([("a", 1, ["v1"]), ("b", 1, ["v2"])])
    assert dvvset.sync([]) == Clock()
    assert dvvset.sync([a]) == a


def test_sync_value_survives_iff_in_both_or_not_covered() -> None:
    left = C([("a", 4, ["v4", "v3"])])  # dots a3, a4
    right = C([("a", 3, ["v3", "v2"])])  # dots a2, a3: a2 is covered by left's 4 and absent there
    assert dvvset.sync([left, right]) == C([("a", 4, ["v4", "v3"])])
    newer = C([("a", 5, ["v5"])])  # has seen a1..a5 and kept only a5
    assert dvvset.sync([left, newer]) == C([("a", 5, ["v5"])])


def test_sync_anonymous_values_survive_unless_strictly_dominated() -> None:
    old = C([("a", 1, [])], ["client-old"])
    new = C([("a", 2, [])], ["client-new"])
    assert dvvset.sync([old, new]).anonymous == ("client-new",)
    assert dvvset.sync([new, old]).anonymous == ("client-new",)
    concurrent = C([("b", 1, [])], ["other"])
    assert sorted(dvvset.sync([old, concurrent]).anonymous) == ["client-old", "other"]
    same = C([("a", 1, [])], ["client-old"])
    assert dvvset.sync([old, same]).anonymous == ("client-old",)


def test_values_need_not_be_hashable() -> None:
    v1, v2, v3 = unhashable(1), unhashable(2), unhashable(3)
    s0 = dvvset.update(dvvset.new(v1), "a")
    s1 = dvvset.update_with(dvvset.new(v2), s0, "b")
    s2 = dvvset.update_with(dvvset.new_with_context(dvvset.join(s1), v3), s1, "a")
    merged = dvvset.sync([s1, s2, dvvset.new_list([v1, v2], {"z": 1})])
    assert dvvset.values(s2) == [v3]
    assert v3 in dvvset.values(merged)
    assert hash(merged) == hash(merged)  # hashing looks at the causal shape only


# -- queries ---------------------------------------------------------------------------------------
def test_size_ids_values_equal() -> None:
    clock = C([("a", 4, [5, 2]), ("b", 1, []), ("c", 1, [3])], [10, 0])
    assert dvvset.size(clock) == 5
    assert dvvset.ids(clock) == ["a", "b", "c"]
    assert dvvset.values(clock) == [10, 0, 5, 2, 3]
    assert dvvset.equal(C([("a", 4, [1, 2])]), C([("a", 4, [7, 8])], ["z"]))
    assert not dvvset.equal(C([("a", 4, [1, 2])]), C([("a", 4, [1])]))
    assert not dvvset.equal(C([("a", 4, [])]), C([("a", 4, []), ("b", 1, [])]))
    assert dvvset.map_values(lambda v: v * 10, clock) == C([("a", 4, [50, 20]), ("b", 1, []), ("c", 1, [30])], [100, 0])


def test_less_table() -> None:
    a = dvvset.update(dvvset.new_list(["v1"]), "a")
    b = dvvset.update(dvvset.new_list(["v2"], dvvset.join(a)), "a")
    b2 = dvvset.update(dvvset.new_list(["v2"], dvvset.join(a)), "b")
    b3 = dvvset.update(dvvset.new_list(["v2"], dvvset.join(a)), "z")
    c = dvvset.update(dvvset.new_list(["v3"], dvvset.join(b)), "a")
    d = dvvset.update(dvvset.new_list(["v4"], dvvset.join(c)), "b2")
    assert dvvset.less(a, b)
    assert dvvset.less(a, c)
    assert dvvset.less(b, c)
    assert dvvset.less(b, d)
    assert dvvset.less(b2, dvvset.sync([b2, b3]))
    assert not dvvset.less(b, a)
    assert not dvvset.less(b2, b)
    assert not dvvset.less(b2, b3)
    assert not dvvset.less(b3, b2)
    assert not dvvset.less(a, a)


def test_last_and_lww_table() -> None:
    x = C([("a", 4, [5, 2]), ("b", 1, []), ("c", 1, [3])])
    y = C([("a", 4, [5, 2]), ("b", 1, []), ("c", 1, [3])], [10, 0])
    z = C([("a", 4, [5, 2]), ("b", 1, [1])], [3])
    stamped = C([("a", 4, [(5, 1002345), (7, 1002340)]), ("b", 1, [(4, 1001340)])], [(2, 1001140)])
    assert dvvset.last(x, lambda v: v) == 5
    assert dvvset.last(y, lambda v: v) == 10
    assert dvvset.lww(x, lambda v: v) == C([("a", 4, [5]), ("b", 1, []), ("c", 1, [])])
    assert dvvset.lww(y, lambda v: v) == C([("a", 4, []), ("b", 1, []), ("c", 1, [])], [10])
    assert dvvset.lww(z, lambda v: v) == C([("a", 4, [5]), ("b", 1, [])])
    assert dvvset.lww(stamped, lambda v: v[1]) == C([("a", 4, [(5, 1002345)]), ("b", 1, [])])


def test_lww_keeps_winner_in_its_original_dot() -> None:
    clock = C([("a", 2, ["old-a"]), ("b", 7, ["new-b", "older-b"])])
    won = dvvset.lww(clock, lambda v: v == "new-b")
    assert won == C([("a", 2, []), ("b", 7, ["new-b"])])
    assert dvvset_dot_of(won, "new-b") == ("b", 7) == dvvset_dot_of(clock, "new-b")
    assert dvvset.sync([clock, won]) == won


def test_lww_of_an_older_sibling_becomes_anonymous_over_same_history() -> None:
    clock = C([("b", 7, ["new-b", "older-b"])])
    won = dvvset.lww(clock, lambda v: v == "older-b")
    assert won == C([("b", 7, [])], ["older-b"])
    assert dvvset.update(won, "b") == C([("b", 8, ["older-b"])])


def test_lww_and_last_of_empty_clock_raise() -> None:
    with pytest.raises(InvalidClockError):
        dvvset.last(C([("a", 1, [])]), lambda v: v)
    with pytest.raises(InvalidClockError):
        dvvset.lww(Clock(), lambda v: v)


def test_reconcile_table() -> None:
    x = C([("a", 4, [5, 2]), ("b", 1, []), ("c", 1, [3])])
    y = C([("a", 4, [5, 2]), ("b", 1, []), ("c", 1, [3])], [10, 0])
    assert dvvset.reconcile(x, sum) == C([("a", 4, []), ("b", 1, []), ("c", 1, [])], [10])
    assert dvvset.reconcile(y, sum) == C([("a", 4, []), ("b", 1, []), ("c", 1, [])], [20])
    assert dvvset.reconcile(x, min) == C([("a", 4, []), ("b", 1, []), ("c", 1, [])], [2])
    assert dvvset.join(dvvset.reconcile(y, min)) == dvvset.join(y)  # the clock is not advanced


def test_repr_is_readable() -> None:
    assert repr(C([("a", 2, ["v2"])], ["x"])) == "Clock(entries=[('a', 2, ['v2'])], anonymous=['x'])"


@pytest.mark.parametrize(
    "entries",
    [
        [("b", 1, []), ("a", 1, [])],  # unsorted
        [("a", 1, []), ("a", 2, [])],  # duplicate
        [("a", 1, ["x", "y"])],  # more values than events
        [("a", 0, [])],  # empty entry
        [(1, 1, [])],  # id not a str
        [("a", True, [])],  # bool counter
    ],
)
def test_invalid_clocks_are_rejected(entries: list[tuple[object, object, list[object]]]) -> None:
    with pytest.raises(InvalidClockError):
        Clock(tuple(entries))  # type: ignore[arg-type]


def dvvset_dot_of(clock: Clock, value: object) -> tuple[str, int]:
    for e in clock.entries:
        for i, v in enumerate(e.values):
            if v == value:
                return (e.id, e.counter - i)
    raise AssertionError(f"{value!r} not in {clock!r}")


# -- properties ------------------------------------------------------------------------------------
@PROPS
@given(dvv_clocks(3))
def test_sync_is_commutative_associative_idempotent(clocks: list[Clock]) -> None:
    a, b, c = clocks
    assert dvvset.sync([a, b]) == dvvset.sync([b, a])
    assert dvvset.sync([dvvset.sync([a, b]), c]) == dvvset.sync([a, dvvset.sync([b, c])])
    assert dvvset.sync([a, a]) == a
    assert dvvset.sync([a, b, c]) == dvvset.sync([c, b, a])


def test_sync_with_a_repeated_anonymous_value_is_commutative() -> None:
    """Issue 19, finding 5: ["x", "x"] against ["x"] gave two x one way and one the other."""
    twice, once = dvvset.new_list(["x", "x"]), dvvset.new_list(["x"])
    assert dvvset.sync([twice, once]) == dvvset.sync([once, twice]) == twice
    assert sorted(dvvset.sync([dvvset.new_list(["x", "y", "x"]), dvvset.new_list(["y", "y"])]).anonymous) == [
        "x", "x", "y", "y"]


@PROPS
@given(st.lists(st.lists(st.sampled_from(["x", "y", 1]), max_size=4), min_size=3, max_size=3),
       st.sampled_from([None, {"a": 1}]))
def test_sync_of_anonymous_values_with_repeats_is_a_multiset_union(
        lists: list[list[object]], context: dict[str, int] | None) -> None:
    a, b, c = (dvvset.new_list(vals, context) for vals in lists)
    assert dvvset.sync([a, b]) == dvvset.sync([b, a])
    assert dvvset.sync([dvvset.sync([a, b]), c]) == dvvset.sync([a, dvvset.sync([b, c])])
    assert dvvset.sync([a, a]) == a
    for value in ("x", "y", 1):
        want = max(vals.count(value) for vals in lists)
        assert list(dvvset.sync([a, b, c]).anonymous).count(value) == want


@PROPS
@given(dvv_clocks(2))
def test_sync_matches_the_dot_level_definition(clocks: list[Clock]) -> None:
    """A dotted value survives iff it is in both clocks or the other clock's counter does not cover it."""
    a, b = clocks
    assert dvv_to_container(dvvset.sync([a, b])) == dvv_to_container(a).sync(dvv_to_container(b))
    assert dvvset.join(dvvset.sync([a, b])) == dvvset.join(a).merge(dvvset.join(b))


@PROPS
@given(dvv_clocks(3))
def test_less_is_a_strict_partial_order_matching_version_vectors(clocks: list[Clock]) -> None:
    a, b, c = clocks
    assert not dvvset.less(a, a)
    if dvvset.less(a, b):
        assert not dvvset.less(b, a)
        if dvvset.less(b, c):
            assert dvvset.less(a, c)
    assert dvvset.less(a, b) == dvvset.join(b).dominates(dvvset.join(a))
    merged = dvvset.sync([a, b])
    assert not dvvset.less(merged, a)  # sync is an upper bound
    assert dvvset.less(a, merged) or dvvset.join(merged) == dvvset.join(a)


@PROPS
@given(dvv_histories())
def test_entries_bounded_by_coordinators_not_writers(h: DvvHistory) -> None:
    for clock in h.snapshots:
        assert set(dvvset.ids(clock)) <= h.coordinators
        assert len(clock.entries) <= len(h.coordinators)
        assert all(e.counter >= len(e.values) for e in clock.entries)
        assert clock.anonymous == ()


@PROPS
@given(
    st.integers(1, 5),
    st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=30),
)
def test_no_false_concurrency_for_a_writer_using_its_latest_context(n: int, ops: list[tuple[bool, int, int]]) -> None:
    """One writer, always writing with the context its previous write returned, through coordinators
    whose replicas lag behind: no replica ever holds more than one value, and the last one wins."""
    nodes = [f"n{i}" for i in range(n)]
    replicas = {node: Clock() for node in nodes}
    ctx = VersionVector()
    last = None
    for step, (is_write, i, j) in enumerate(ops):
        node = nodes[i % n]
        if is_write or last is None:
            last = f"w{step}"
            replicas[node] = dvvset.update_with(dvvset.new_with_context(ctx, last), replicas[node], node)
            ctx = dvvset.join(replicas[node])
        else:
            replicas[node] = dvvset.sync([replicas[node], replicas[nodes[j % n]]])
        assert all(dvvset.size(c) <= 1 for c in replicas.values())
    final = dvvset.sync(replicas.values())
    assert dvvset.values(final) == [last]


@PROPS
@given(dvv_histories())
def test_concurrent_blind_writes_are_all_kept(h: DvvHistory) -> None:
    """Sanity in the other direction: a blind write (empty context) never erases another value."""
    server = dvvset.sync(h.replicas.values())
    before = dvvset.values(server)
    after = dvvset.update_with(dvvset.new("blind"), server, h.nodes[0])
    assert sorted(dvvset.values(after), key=repr) == sorted([*before, "blind"], key=repr)
