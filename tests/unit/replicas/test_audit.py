"""Under-replication windows for the replication log (vmqpy.replicas.audit): two lines per window."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.replicas.audit import UnderReplication


def test_a_window_is_logged_where_it_starts_and_where_it_ends_with_its_peaks() -> None:
    state = UnderReplication()
    samples = [(0, 0, 0), (3, 30, 0), (5, 10, 0), (2, 4, 7), (0, 0, 0), (0, 0, 0), (0, 0, 2), (0, 0, 0)]
    lines = [line for s in samples if (line := state.sample(*s)) is not None]
    assert lines == [
        {"under_replicated": True, "sessions": 3, "messages": 30, "writes": 0},
        {"under_replicated": False, "sessions": 0, "messages": 0, "writes": 0,
         "peak_sessions": 5, "peak_messages": 30, "peak_writes": 7},
        {"under_replicated": True, "sessions": 0, "messages": 0, "writes": 2},  # trade_consistency writes only
        {"under_replicated": False, "sessions": 0, "messages": 0, "writes": 0,
         "peak_sessions": 0, "peak_messages": 0, "peak_writes": 2},
    ]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 3)), max_size=40))
def test_the_lines_alternate_and_follow_the_samples(samples: list[tuple[int, int, int]]) -> None:
    state = UnderReplication()
    lines: list[dict[str, Any]] = []
    for sample in samples:
        line = state.sample(*sample)
        under = sample[0] > 0 or sample[2] > 0
        assert state.within == under
        if line is not None:
            assert line["under_replicated"] == under
            lines.append(line)
    assert [line["under_replicated"] for line in lines] == [i % 2 == 0 for i in range(len(lines))]
