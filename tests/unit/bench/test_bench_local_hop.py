"""The pure helpers of bench/bench_local_hop.py."""

from __future__ import annotations

import pytest

from bench.bench_local_hop import batch_sizes, split_routes, stat_cpu_seconds

STAT = "1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0"


def test_stat_cpu_seconds_counts_fields_after_the_last_parenthesis() -> None:
    assert stat_cpu_seconds(STAT, ticks=100) == 3.0  # utime 250 + stime 50 ticks


@pytest.mark.parametrize(("messages", "batch", "expected"), [
    (0, 4, []), (3, 1, [1, 1, 1]), (10, 4, [4, 4, 2]), (8, 4, [4, 4]), (2, 64, [2]),
])
def test_batch_sizes(messages: int, batch: int, expected: list[int]) -> None:
    assert batch_sizes(messages, batch) == expected


@pytest.mark.parametrize(("messages", "batch"), [(-1, 1), (5, 0)])
def test_batch_sizes_refuses_bad_input(messages: int, batch: int) -> None:
    with pytest.raises(ValueError):
        batch_sizes(messages, batch)


def test_split_routes_puts_half_the_clients_on_each_node_and_half_the_pairs_across() -> None:
    a, b = ("127.0.0.11", 1883), ("127.0.0.12", 1883)
    routes = split_routes(a, b)
    assert sorted(p for p, _ in routes) == [a, a, b, b]
    assert sorted(s for _, s in routes) == [a, a, b, b]
    assert sum(p != s for p, s in routes) == 2
