"""bench.bench_replicas's pure parts: percentiles, medians per R, the ratio, the table, the arguments."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bench_replicas import Round, parse_args, percentile, suite_rows, summary, table


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 0.5, 0.0),
    ([3.0], 0.99, 3.0),
    ([5.0, 1.0, 3.0], 0.5, 3.0),
    ([float(i) for i in range(1, 101)], 0.99, 99.0),
    ([float(i) for i in range(1, 101)], 0.0, 1.0),
])
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50), st.floats(0, 1))
def test_percentile_is_one_of_the_values_and_monotonic(values: list[float], q: float) -> None:
    p = percentile(values, q)
    assert p in values
    assert percentile(values, 0.0) <= p <= percentile(values, 1.0)


def rounds() -> list[Round]:
    return [Round(1, 1000, 1.0, 1000.0, 2.0, 9.0, 300.0, 5.0),
            Round(2, 1000, 2.0, 500.0, 4.0, 20.0, 450.0, 200.0, 1.2, 0.8, 1000),
            Round(1, 1000, 0.5, 2000.0, 1.0, 8.0, 280.0, 6.0),
            Round(2, 1000, 1.0, 900.0, 3.0, 10.0, 430.0, 190.0, 1.1, 0.6, 1000)]


def test_medians_per_r_and_the_ratio() -> None:
    result = summary(rounds())
    assert result["R=1"]["rate"] == 1500.0 and result["R=2"]["rate"] == 700.0
    assert result["R=1"]["recover_s"] is None and result["R=2"]["recover_s"] == 0.7
    assert result["rate_ratio_r2_r1"] == round(700 / 1500, 2)


def test_table_names_every_round_the_medians_and_the_target() -> None:
    text = table(rounds(), summary(rounds()))
    assert text.count("\n| 1 |") == 2 and text.count("\n| 2 |") == 2
    assert "| median | 1 | 1,500 |" in text and "| median | 2 | 700 |" in text
    assert "target: at least 0.5" in text


def test_quick_and_bad_arguments() -> None:
    quick = parse_args(["--quick"])
    assert (quick.rounds, quick.messages, quick.sessions) == (1, 2000, 20)
    with pytest.raises(SystemExit):
        parse_args(["--messages", "5", "--sessions", "10"])
    with pytest.raises(SystemExit):
        parse_args(["--rounds", "0"])


def test_suite_rows_one_per_r_with_the_ratio_on_r2() -> None:
    r1, r2 = suite_rows(summary(rounds()))
    assert r1["scenario"].startswith("queue replicas R=1") and r1["ratio"] is None and r1["rate"] == 1500.0
    assert r2["ratio"] == round(700 / 1500, 2) and r2["cpu_us"] == 440.0
    assert "recovered 1,000 queued in 0.7 s" in r2["note"]
