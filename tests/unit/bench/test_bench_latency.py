"""bench/bench_latency.py's pure parts: arguments, medians and p99 ratios per round, the target checks, the table
and the rows for bench.suite. The real run is `python -m bench.bench_latency --quick` (bench/README.md)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import bench_latency as bl


def fixed(broker: str, rnd: int, p99: float | None, *, case: str = "50 % of Mosquitto", level: float | None = 0.5,
          target: float = 1000.0, rate: float = 1000.0, behind: int = 0, cpu: float = 10.0,
          acked_lost: int = 0, samples: int | None = None) -> dict[str, Any]:
    return {"mode": "fixed", "window_s": 2.0, "latency_samples": int(2 * target) if samples is None else samples,
            "scenario": "qos1-pairs10", "case": case, "level": level, "target_rate": target,
            "broker": broker, "round": rnd, "rate": rate, "p50_ms": 0.5, "p99_ms": p99, "p999_ms": p99,
            "max_ms": p99, "broker_cpu": cpu, "lost": 0, "dups": 0, "acked_lost": acked_lost, "behind": behind,
            "lag_p99_ms": 0.1, "machine_cpu": 50.0}


def test_summary_medians_and_per_round_ratios() -> None:
    rows = [
        {"mode": "closed", "scenario": "qos1-pairs10", "case": "saturation", "broker": "mosquitto", "rate": 2000.0},
        fixed("vmqpy", 1, 4.0), fixed("mosquitto", 1, 1.0),  # ratio 4
        fixed("mosquitto", 2, 2.0), fixed("vmqpy", 2, 2.0),  # ratio 1
        fixed("vmqpy", 3, 9.0), fixed("mosquitto", 3, 3.0),  # ratio 3
        {**fixed("vmqpy", 4, None), "failed": "Traceback ..."},
    ]
    s = {x["broker"]: x for x in bl.summarize(rows, ["vmqpy", "mosquitto"])}
    assert s["vmqpy"]["p99_ms"] == 4.0 and s["mosquitto"]["p99_ms"] == 2.0  # medians of the runs
    assert s["vmqpy"]["p99_ratio"] == 3.0  # median of the per-round ratios 4, 1, 3 (not 4.0 / 2.0)
    assert (s["vmqpy"]["p99_ratio_min"], s["vmqpy"]["p99_ratio_max"]) == (1.0, 4.0)
    assert s["mosquitto"]["p99_ratio"] is None
    assert (s["vmqpy"]["runs"], s["vmqpy"]["failed"]) == (3, 1)
    assert s["vmqpy"]["cpu_us"] == 100.0  # 10 % of a core at 1,000 msgs/s
    assert s["vmqpy"]["reached"] is True


@pytest.mark.parametrize(("rate", "reached"), [(1000.0, True), (970.0, True), (960.0, False), (0.0, False)])
def test_a_rate_is_reached_at_97_percent(rate: float, reached: bool) -> None:
    [s] = bl.summarize([fixed("vmqpy", 1, 1.0, rate=rate, behind=3)], ["vmqpy"])
    assert s["reached"] is reached and s["behind"] == 3


def test_runs_missing_more_than_one_percent_have_an_unbounded_p99() -> None:
    rows = [fixed("vmqpy", 1, 3.0, samples=1980), fixed("mosquitto", 1, 1.0),  # 99 %: bounded, ratio 3
            fixed("vmqpy", 2, 2.0, samples=1979), fixed("mosquitto", 2, 1.0),  # just under: not in the ratios
            fixed("vmqpy", 3, 4.0), fixed("mosquitto", 3, 1.0)]
    s = bl.summarize(rows, ["vmqpy", "mosquitto"])[0]
    assert (s["unbounded_runs"], s["p99_unbounded"], s["p99_ratio"]) == (1, False, 3.5)
    rows += [fixed("vmqpy", 4, None, samples=0), fixed("mosquitto", 4, 1.0),
             fixed("vmqpy", 5, 9.0, samples=10), fixed("mosquitto", 5, 1.0)]
    s = bl.summarize(rows, ["vmqpy", "mosquitto"])[0]
    assert (s["unbounded_runs"], s["runs"], s["p99_unbounded"], s["p99_ratio"]) == (3, 5, True, None)
    assert any("p99 unbounded: in 3 of 5 runs" in x and "NOT met" in x for x in bl.checks([s]))
    assert "| unbounded / 1.00 |" in bl.render(bl.summarize(rows, ["vmqpy", "mosquitto"]), {})


def test_checks_name_each_target() -> None:
    rows = [fixed("vmqpy", 1, 3.0), fixed("mosquitto", 1, 1.0),
            fixed("vmqpy", 1, 1.5, case="90 % of Mosquitto", level=0.9, acked_lost=2),
            fixed("mosquitto", 1, 1.0, case="90 % of Mosquitto", level=0.9),
            fixed("vmqpy", 1, 0.8, case="1,000 msgs/s", level=None), fixed("mosquitto", 1, 0.3, case="1,000 msgs/s",
                                                                          level=None)]
    lines = bl.checks(bl.summarize(rows, ["vmqpy", "mosquitto"]))
    assert any("50 %" in x and "3.00x" in x and "NOT met" in x for x in lines)
    assert any("90 %" in x and "1.50x" in x and "met" in x and "NOT" not in x for x in lines)
    assert any("lost 2 acknowledged" in x for x in lines)
    assert any("1,000 msgs/s" in x and "0.80 ms" in x and "NOT" not in x for x in lines)
    assert not any("Mosquitto did not reach" in x for x in lines)
    rows.append(fixed("mosquitto", 1, 9.0, case="20 % of Mosquitto", level=0.2, rate=500.0))
    lines = bl.checks(bl.summarize(rows, ["vmqpy", "mosquitto"]))
    assert any("20 %" in x and "Mosquitto did not reach the rate" in x for x in lines)


def test_render_puts_the_brokers_side_by_side() -> None:
    rows = [fixed("vmqpy", 1, 3.0, rate=900.0), fixed("mosquitto", 1, 1.0)]
    text = bl.render(bl.summarize(rows, ["vmqpy", "mosquitto"]), {"qos1-pairs10": {"mosquitto": 2000.0}})
    assert "qos1-pairs10: mosquitto 2,000" in text
    [line] = [x for x in text.splitlines() if x.startswith("| qos1-pairs10")]
    assert "900 (not reached) / 1,000" in line and "3.00 / 1.00" in line and "**3.00x**" in line


def test_suite_rows() -> None:
    summary = bl.summarize([fixed("vmqpy", 1, 3.0), fixed("mosquitto", 1, 1.0)], ["vmqpy", "mosquitto"])
    rows = bl.suite_rows({"summary": summary})
    assert [(r["broker"], r["ratio"], r["p99_ms"]) for r in rows] == [("vmqpy", 3.0, 3.0), ("mosquitto", None, 1.0)]
    assert rows[0]["scenario"] == "latency qos1-pairs10 at 50 % of Mosquitto (1,000 msgs/s)"


@given(st.lists(st.tuples(st.floats(0.01, 1e4), st.floats(0.01, 1e4)), min_size=1, max_size=9))
def test_the_ratio_lies_between_the_per_round_extremes(pairs: list[tuple[float, float]]) -> None:
    rows = []
    for i, (v, m) in enumerate(pairs):
        rows += [fixed("vmqpy", i + 1, v), fixed("mosquitto", i + 1, m)]
    [s, _] = bl.summarize(rows, ["vmqpy", "mosquitto"])
    ratios = [v / m for v, m in pairs]
    assert min(ratios) == s["p99_ratio_min"] <= s["p99_ratio"] <= s["p99_ratio_max"] == max(ratios)


@pytest.mark.parametrize("argv", [["--levels", "x"], ["--levels", "0"], ["--levels", ""], ["--scenarios", "qos2"],
                                  ["--rounds", "0"], ["--duration", "-1"], ["--low-rate", "-5"],
                                  ["--rates", "-1"], ["--rates", "x"], ["--levels", "none", "--low-rate", "0"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bl.parse_args(argv)


def test_quick_defaults() -> None:
    args = bl.parse_args(["--quick"])
    assert (args.rounds, args.duration, args.warmup, args.level_list) == (1, 1.5, 0.5, [0.5, 0.9])
    assert args.scenario_list == ["qos0-pairs", "qos1-pairs"]


def test_fixed_rates_without_levels() -> None:
    args = bl.parse_args(["--levels", "none", "--rates", "5000,2500", "--low-rate", "0"])
    assert (args.level_list, args.rate_list) == ([], [5000.0, 2500.0])
    assert bl.parse_args(["--rates", "5000"]).level_list == [0.5, 0.9]  # besides the levels by default


def test_the_low_rate_target_is_checked_at_the_low_rate_only() -> None:
    rows = [fixed("vmqpy", 1, 3.0, case="5,000 msgs/s", level=None, target=5000.0, rate=5000.0),
            fixed("vmqpy", 1, 0.5, case="1,000 msgs/s", level=None, target=1000.0, rate=1000.0)]
    summary = bl.summarize(rows, ["vmqpy"])
    assert len(bl.checks(summary)) == 2  # without the low rate: every QoS 1 fixed rate, as before
    [line] = bl.checks(summary, 1000.0)
    assert "1,000 msgs/s" in line and "met" in line and "NOT" not in line


def test_no_low_rate_no_one_ms_check_and_no_saturation_line_without_levels() -> None:
    summary = bl.summarize([fixed("vmqpy", 1, 3.0, case="5,000 msgs/s", level=None, target=5000.0, rate=5000.0)],
                           ["vmqpy"])
    assert bl.checks(summary, 0.0) == []  # --low-rate 0: the 1 ms target is nowhere
    table = bl.render(summary, {"qos1-pairs10": {}})
    assert "Saturation" not in table and table.startswith("| scenario |")
    assert "Saturation" in bl.render(summary, {"qos1-pairs10": {"mosquitto": 2000.0}})
