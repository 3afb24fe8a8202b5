"""ObjectTable.restripped: one GC pass looks at no more than a batch of the objects stored with a context, the
next passes go on where it stopped, and a whole round re-strips every object the clock's base now covers
(a table and a property)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dvv.version_vector import VersionVector
from vmqpy.metadata.objects import ObjectTable, StoredObject


def table_with_contexts(n: int, covered: int) -> ObjectTable:
    """`n` keys of one value each; the first `covered` have a context the base {"b": 10} covers, the others
    one it does not ({"b": 11})."""
    table = ObjectTable()
    for i in range(n):
        ctx = VersionVector({"b": 10 if i < covered else 11})
        table.keep(("p", (f"k{i}",)), StoredObject(((("a", i + 1), i),), ctx))
    return table


def one_pass(table: ObjectTable, limit: int) -> list[tuple[str, tuple[str, ...]]]:
    seen = []
    for fk, stripped in table.restripped({"b": 10}, limit):
        table.keep(fk, stripped)  # what the replica does with each
        seen.append(fk)
    return seen


@pytest.mark.parametrize(("n", "covered", "limit", "per_pass"), [
    (10, 10, 100, [10, 0]),  # fits in one pass: all at once, as before
    (10, 4, 100, [4, 0]),
    (10, 10, 3, [3, 3, 3, 1, 0]),  # a batch per pass until the round is through
    (7, 7, 7, [7, 0]),
    (0, 0, 5, [0]),
])
def test_a_pass_looks_at_a_batch_and_a_round_strips_every_covered_context(
    n: int, covered: int, limit: int, per_pass: list[int]
) -> None:
    table = table_with_contexts(n, covered)
    got = [len(one_pass(table, limit)) for _ in per_pass]
    assert got == per_pass
    assert table.sizes()["contexts_at_rest"] == n - covered


def test_a_big_table_is_never_walked_whole_in_one_pass() -> None:
    table = table_with_contexts(10_000, 10_000)
    assert len(one_pass(table, 2_000)) == 2_000
    assert table.sizes()["contexts_at_rest"] == 8_000


def test_keys_dropped_or_rewritten_between_passes_are_skipped_or_taken_as_they_are_now() -> None:
    table = table_with_contexts(6, 6)
    assert len(one_pass(table, 2)) == 2  # a round of 6 started: 4 left
    table.keep(("p", ("k0",)), StoredObject((), VersionVector()))  # gone
    table.keep(("p", ("k1",)), StoredObject(((("a", 9), 9),), VersionVector()))  # rewritten without a context
    rest = one_pass(table, 10)
    assert ("p", ("k0",)) not in rest and ("p", ("k1",)) not in rest
    assert table.sizes()["contexts_at_rest"] == 0


def test_a_limit_below_one_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="limit must be positive"):
        list(ObjectTable().restripped({}, 0))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), covered=st.integers(0, 60), limit=st.integers(1, 25))
def test_a_round_yields_each_covered_key_once_and_no_pass_more_than_limit(n: int, covered: int, limit: int) -> None:
    covered = min(covered, n)
    table = table_with_contexts(n, covered)
    yielded: list[tuple[str, tuple[str, ...]]] = []
    for _ in range(n // limit + 1):  # one round: ceil(n / limit) passes, plus one when n is a multiple
        got = one_pass(table, limit)
        assert len(got) <= limit
        yielded += got
    assert sorted(yielded) == sorted(("p", (f"k{i}",)) for i in range(covered))
    assert table.sizes()["contexts_at_rest"] == n - covered
