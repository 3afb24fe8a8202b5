"""Counters (runs of dot counters) and dot helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dvv.dots import Counters, bit_runs, check_dot
from dvv.errors import InvalidClockError

from .histories import PROPS


def test_counters_behave_like_a_sorted_list() -> None:
    c = Counters.from_runs([range(1, 4), range(4, 6), range(9, 10)])
    assert c.runs == (range(1, 6), range(9, 10))
    assert c == [1, 2, 3, 4, 5, 9] and [1, 2, 3, 4, 5, 9] == c
    assert c == (1, 2, 3, 4, 5, 9) and c != [1, 2, 3]
    assert len(c) == 6 and c[0] == 1 and c[-1] == 9 and c[5] == 9 and c[1:3] == [2, 3]
    assert list(reversed(c)) == [9, 5, 4, 3, 2, 1]
    assert 9 in c and 6 not in c and 0 not in c
    assert "x" not in c  # type: ignore[comparison-overlap]  # deliberately not a counter: never contained
    assert c.to_list() == list(c) == [1, 2, 3, 4, 5, 9]
    assert repr(c) == "Counters([1, 2, 3, 4, 5, 9])"
    assert repr(Counters(range(1, 10_001))) == "Counters<1..10000>"
    assert Counters([3, 1, 2, 2]) == Counters(range(1, 4))
    with pytest.raises(IndexError):
        c[6]


def test_invalid_counters() -> None:
    with pytest.raises(InvalidClockError):
        Counters([0])
    with pytest.raises(InvalidClockError):
        Counters.from_runs([range(3, 5), range(1, 2)])
    with pytest.raises(InvalidClockError):
        Counters.from_runs([range(1, 9, 2)])


def test_bit_runs() -> None:
    assert bit_runs(0, 5) == []
    assert bit_runs(0b111, 5) == [range(6, 9)]
    assert bit_runs(0b1101, 0) == [range(1, 2), range(3, 5)]


def test_check_dot() -> None:
    assert check_dot(("a", 1)) == ("a", 1)
    assert check_dot(["a", 2]) == ("a", 2)
    for bad in [("a", 0), ("a",), (1, 1), ("a", "1"), "a1"]:
        with pytest.raises(InvalidClockError):
            check_dot(bad)


@PROPS
@given(st.sets(st.integers(1, 200), max_size=60), st.integers(-70, 70), st.integers(0, 210))
def test_counters_match_their_materialised_list(values: set[int], index: int, probe: int) -> None:
    c = Counters(values)
    expected = sorted(values)
    assert c == expected and list(c) == expected and len(c) == len(expected)
    assert (probe in c) == (probe in values)
    if -len(expected) <= index < len(expected):
        assert c[index] == expected[index]
    else:
        with pytest.raises(IndexError):
            c[index]
    assert Counters.from_runs(c.runs) == c
