"""The object table's strip schedule: a re-strip visits only the objects whose context the base now covers in part,
at most `limit` per call, and ends exactly where a scan of every stored context would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dvv.version_vector import VersionVector
from vmqpy.metadata.objects import NO_CONTEXT, FullKey, ObjectTable, StoredObject

NODES = ("a", "b", "c")


def obj(ctx: dict[str, int], versions: int = 1) -> StoredObject:
    return StoredObject(tuple((("a", 100 + i), f"v{i}") for i in range(versions)), VersionVector(ctx))


def restrip_all(table: ObjectTable, base: dict[str, int], limit: int) -> int:
    """Re-strip until nothing is left, keeping each object as the replica does; returns the calls made."""
    calls = 0
    while table.strippable(base):
        found = table.restripped(base, limit)
        assert len(found) <= limit
        for fk, stripped in found:
            table.keep(fk, stripped)
        calls += 1
        assert calls < 10_000
    return calls


def test_only_the_covered_contexts_are_visited_a_limit_at_a_time() -> None:
    table = ObjectTable()
    for i in range(10):
        table.keep(("p", (i,)), obj({"a": 5 + i}))
    table.keep(("p", ("other",)), obj({"b": 3, "c": 9}))
    assert not table.strippable({"a": 4})
    assert table.restripped({"a": 4}, 100) == []
    base = {"a": 9, "b": 3}  # covers a:5..a:9 (five keys) and b:3
    assert table.strippable(base)
    first = table.restripped(base, 4)
    assert len(first) == 4
    for fk, stripped in first:
        table.keep(fk, stripped)
    rest = table.restripped(base, 4)
    for fk, stripped in rest:
        table.keep(fk, stripped)
    assert len(first) + len(rest) == 6 and not table.strippable(base)
    assert table.get("p", ("other",)) == obj({"c": 9})  # only the covered entry goes
    assert table.get("p", (0,)) == obj({}) and table.get("p", (5,)) == obj({"a": 10})
    assert table.sizes()["contexts_at_rest"] == 6


def test_replaced_and_removed_objects_leave_no_work_behind() -> None:
    table = ObjectTable()
    fk: FullKey = ("p", ("k",))
    table.keep(fk, obj({"a": 3}))
    table.keep(fk, obj({"a": 7}))  # replaced: the entry a:3 is stale
    table.keep(("p", ("gone",)), obj({"a": 2}))
    table.keep(("p", ("gone",)), StoredObject((), NO_CONTEXT))  # removed
    assert table.restripped({"a": 5}, 10) == []  # both stale entries found and skipped
    assert not table.strippable({"a": 5}) and table.get(*fk) == obj({"a": 7})


contexts = st.dictionaries(st.sampled_from(NODES), st.integers(1, 30), max_size=3)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("keep"), st.integers(0, 12), contexts, st.integers(0, 2)),
        st.tuples(st.just("base"), st.sampled_from(NODES), st.integers(0, 8), st.integers(1, 5)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_schedule_strips_what_a_scan_of_every_context_strips(ops: list[tuple[Any, ...]]) -> None:
    """Against a model that scans every stored object at each re-strip (what GC did before): after any mix of
    objects kept (new, replaced, removed, restripped) and bases growing, re-stripping with any limit leaves the same
    objects, and the schedule holds exactly the entries of the stored contexts."""
    table = ObjectTable()
    model: dict[FullKey, StoredObject] = {}
    base: dict[str, int] = {}
    for op in ops:
        if op[0] == "keep":
            _, i, ctx, versions = op
            fk: FullKey = ("p", (i,))
            new = obj({n: c for n, c in ctx.items() if c > base.get(n, 0)}, versions)
            table.keep(fk, new)
            if new.is_empty():
                model.pop(fk, None)
            else:
                model[fk] = new
        else:
            _, node, step, limit = op
            base[node] = base.get(node, 0) + step
            restrip_all(table, base, limit)
            for fk, o in list(model.items()):
                stripped = StoredObject(o.versions, o.ctx.filter_ids(lambda n, c: c > base.get(n, 0)))
                if stripped.is_empty():
                    del model[fk]
                else:
                    model[fk] = stripped
            assert not table.strippable(base)
    for fk, o in model.items():
        assert table.get(*fk) == o
    scheduled = {(n, c, fk) for n, at in table._strip_at.items() for c, keys in at.items() for fk in keys}
    assert scheduled == {(n, c, fk) for fk, o in model.items() for n, c in o.ctx.items()}
    assert table.sizes()["keys"] == len(model)
    assert table.sizes()["contexts_at_rest"] == sum(1 for o in model.values() if o.ctx)


def test_a_context_that_moves_on_leaves_no_entries_behind() -> None:
    table = ObjectTable()
    for c in range(1, 5001):  # one key whose context moves on 5,000 times, never covered
        table.keep(("p", ("k",)), obj({"a": c}))
    assert sum(len(h) for h in table._strip_heap.values()) < 200  # not one counter per replacement
    assert table.restripped({"a": 5000}, 10) == [(("p", ("k",)), obj({}))]
