"""Resolvers are deterministic: the same winner for the same siblings in any order."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.metadata.hlc import Stamp
from vmqpy.metadata.resolve import latest_stamp, stamp_of, subscription

VALUES = st.one_of(
    st.fixed_dictionaries(
        {"hlc": st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from("abc")).map(list), "v": st.integers()}
    ),
    st.integers(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=5), st.randoms())
def test_latest_stamp_is_order_independent(values: list[object], rnd: object) -> None:
    shuffled = list(values)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert latest_stamp(shuffled) == latest_stamp(values)
    assert latest_stamp(values) in values


def test_stamped_beats_unstamped_and_greatest_stamp_wins() -> None:
    a = {"hlc": [5, 0, "a"], "qos": 0}
    b = {"hlc": [5, 0, "b"], "qos": 1}
    c = {"hlc": [4, 9, "z"], "qos": 2}
    for perm in itertools.permutations([a, b, c, "plain"]):
        assert latest_stamp(list(perm)) is b
    assert latest_stamp([]) is None
    assert subscription([a, c]) is a
    assert stamp_of([Stamp(1, 2, "n"), "x"]) == Stamp(1, 2, "n")
    assert stamp_of({"hlc": "nope"}) is None
