"""bench.suite_report: the rows of `make bench`'s table, its rendering and the dated summary JSON."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from bench.suite_report import (
    COLUMNS,
    compare_rows,
    headline,
    headline_label,
    idle_rows,
    machine,
    render,
    retained_rows,
    row,
    subscription_rows,
    summary_path,
    write_summary,
)

REPO = Path(__file__).resolve().parents[3]

COMPARE_SUMMARY: list[dict[str, Any]] = [
    {"scenario": "qos1-pairs10", "qos": 1, "broker": "vmqpy", "runs": 1, "failed": 0, "rate": 10_000.0,
     "ratio": 0.25, "p50_ms": 1.5, "p99_ms": 9.0, "acked_lost": 0, "acked": 80_000, "rss_mib": 33.2,
     "broker_cpu": 95.0},
    {"scenario": "qos1-pairs10", "qos": 1, "broker": "mosquitto", "runs": 0, "failed": 1, "rate": None,
     "ratio": None, "p50_ms": None, "p99_ms": None, "acked_lost": None, "acked": None, "rss_mib": None,
     "broker_cpu": None},
]

IDLE_OUTPUT = """round 1 vmqpy       7.80 KiB/connection   90.0 us CPU/connect
2000 idle clean 3.1.1 connections, median of 1 rounds:
| broker | RSS per idle connection | broker CPU per connect |
|---|---:|---:|
| vmqpy | 7.81 KiB | 90 us |
| mosquitto | 0.70 KiB | 24 us |
"""

SUBSCRIPTIONS: dict[str, Any] = {"points": [
    {"subscriptions": 10_000, "sent": 4000, "window_s": 2.0, "us_per_publish": 42.0, "rss_kib": 91_136,
     "rss_bytes_per_subscription": 2591.0, "restart_s": 1.37, "delivered": 12_000, "expected": 12_000},
]}

RETAINED: dict[str, Any] = {"points": [
    {"retained": 1000, "deliver_per_s": 5000.0, "deliver_cpu_s": 0.1, "delivered": 1000, "matches": 1000,
     "deliver_s": 0.2, "rss_kib": 70_000, "rss_bytes_per_retained": 900.0, "restart_s": 0.8,
     "probe_during": {"p50_ms": 0.7, "p99_ms": 3.0}},
    {"retained": 2000, "deliver_per_s": None, "deliver_cpu_s": 0.0, "delivered": 0, "matches": 2000,
     "deliver_s": 30.0, "rss_kib": 71_000, "rss_bytes_per_retained": 900.0, "restart_s": 0.9,
     "probe_during": {"p50_ms": None, "p99_ms": None}},
]}


def test_compare_rows_give_cpu_per_message_from_the_cpu_share_and_rate() -> None:
    vmqpy, mosquitto = compare_rows(COMPARE_SUMMARY)
    assert vmqpy["cpu_us"] == pytest.approx(95.0)  # 0.95 of a core / 10,000 msg/s = 95 us per message
    assert vmqpy["ratio"] == 0.25
    assert vmqpy["rss"] == "33.2 MiB peak"
    assert vmqpy["note"] == "acked-but-lost 0 of 80,000"
    assert mosquitto["cpu_us"] is None and mosquitto["rss"] == ""
    assert "1 run(s) failed" in mosquitto["note"]


def test_idle_rows_read_the_result_table_of_bench_idle() -> None:
    rows = idle_rows(IDLE_OUTPUT, 2000)
    assert [(r["broker"], r["cpu_us"], r["rss"]) for r in rows] == [
        ("vmqpy", 90.0, "7.81 KiB/connection"), ("mosquitto", 24.0, "0.70 KiB/connection")]
    assert {r["scenario"] for r in rows} == {"idle connections (2,000)"}


def test_idle_rows_add_the_empty_broker_where_the_table_has_its_column() -> None:
    text = ("| broker | RSS per idle connection | broker CPU per connect | RSS of the empty broker |\n"
            "|---|---:|---:|---:|\n| vmqpy | 2.81 KiB | 76 us | 40,430 KiB |\n"
            "| mosquitto | 0.73 KiB | 32 us | 7,100 KiB |\n")
    rows = idle_rows(text, 2000)
    assert [(r["scenario"], r["broker"], r["rss"]) for r in rows] == [
        ("idle connections (2,000)", "vmqpy", "2.81 KiB/connection"),
        ("empty broker", "vmqpy", "39.5 MiB (40,430 KiB)"),
        ("idle connections (2,000)", "mosquitto", "0.73 KiB/connection"),
        ("empty broker", "mosquitto", "6.9 MiB (7,100 KiB)")]


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  boom", "| vmqpy | n/a | - |"])
def test_idle_rows_are_empty_without_a_table(text: str) -> None:
    assert idle_rows(text, 10) == []


def test_curve_rows_carry_the_figures_of_each_size() -> None:
    (sub,) = subscription_rows(SUBSCRIPTIONS)
    assert sub["scenario"] == "subscriptions 10,000" and sub["rate"] == 2000.0 and sub["cpu_us"] == 42.0
    assert "2,591 B/sub" in sub["rss"] and "restart 1.37 s" in sub["note"]
    ok, nothing = retained_rows(RETAINED)
    assert ok["cpu_us"] == pytest.approx(100.0) and ok["p99_ms"] == 3.0
    assert nothing["cpu_us"] is None and "0/2,000" in nothing["note"]
    assert subscription_rows({}) == [] and retained_rows({"points": []}) == []


def test_render_writes_one_line_per_row_under_the_header() -> None:
    rows = compare_rows(COMPARE_SUMMARY) + idle_rows(IDLE_OUTPUT, 2000) + retained_rows(RETAINED)
    lines = render(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[2].startswith("| qos1-pairs10 | vmqpy | 10,000 | 0.25x | 95.0 / message | 1.5 | 9.0 | 33.2 MiB")
    assert "| - |" in lines[3]  # a missing figure is a dash, not "None"
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_write_summary_writes_a_dated_json_with_machine_rows_and_table(tmp_path: Path) -> None:
    started = dt.datetime(2026, 11, 26, 19, 5, 7, tzinfo=dt.UTC)
    rows = compare_rows(COMPARE_SUMMARY)
    path = write_summary(tmp_path / "results", started, "python -m bench.suite --quick", {"cores": "2"}, rows,
                         {"compare": {"exit": 0}, "idle": {"skipped": True}})
    assert path == summary_path(tmp_path / "results", started)
    assert path.name == "2026-11-26T190507-summary.json"
    doc = json.loads(path.read_text())
    assert doc["date"] == "2026-11-26T19:05:07+00:00"
    assert doc["machine"] == {"cores": "2"} and doc["command"] == "python -m bench.suite --quick"
    assert doc["steps"]["idle"] == {"skipped": True}
    assert [set(r) >= set(COLUMNS) for r in doc["rows"]] == [True, True]
    assert doc["table"] == render(rows)


def test_machine_describes_cpu_memory_kernel_python_load_and_commit() -> None:
    desc = machine(REPO)
    for key in ("cpu_model", "cores", "memory", "kernel", "python", "loadavg", "git_commit", "git_dirty"):
        assert desc[key], key
    assert desc["memory"].endswith("kB")
    assert len(desc["git_commit"]) == 40


@pytest.mark.parametrize(("scenario", "label"), [
    ("qos0-pairs10", "QoS 0, 10 pairs"),
    ("qos1-fanout10", "QoS 1, fan-out 1 -> 10"),
    ("qos0-fanin10", "QoS 0, fan-in 10 -> 1"),
    ("latency qos1-pairs10 at 1,000 msgs/s (1,000 msgs/s)", "QoS 1 paced at 1,000/s"),
    ("clean connects (5,000, 64 at a time)", "clean connects (5,000, 64 at a time)"),
    ("latency qos1-pairs10 at 50 % of Mosquitto (59,740 msgs/s)", None),
    ("subscriptions 1,000", None),
    ("qos1-pairs", None),
])
def test_headline_names_the_issue_scenarios(scenario: str, label: str | None) -> None:
    assert headline_label(scenario) == label


def test_headline_puts_the_brokers_side_by_side() -> None:
    rows = [
        {**row("qos1-fanin10", "vmqpy", rate=68_585.0, cpu_us=10.3, p50_ms=5.9), "acked_lost": 0},
        {**row("qos1-fanin10", "mosquitto", rate=33_380.0, cpu_us=12.2, p50_ms=0.5), "acked_lost": 6_093},
        row("clean connects (5,000, 64 at a time)", "vmqpy", rate=6_890.0, cpu_us=104.0, unit="connect"),
        row("clean connects (5,000, 64 at a time)", "mosquitto", rate=11_129.0, cpu_us=40.0, unit="connect"),
        row("subscriptions 1,000", "vmqpy", rate=2_000.0, cpu_us=12.5),
    ]
    lines = headline(rows).splitlines()
    assert lines[0] == ("| scenario | rate /s mosquitto / vmqpy | broker CPU us per unit mosquitto / vmqpy "
                        "| p50 ms mosquitto / vmqpy |")
    assert lines[2] == ("| QoS 1, fan-in 10 -> 1 | 33,380 (6,093 lost) / 68,585 | 12.2 / 10.3 per message "
                        "| 0.50 / 5.90 |")
    assert lines[3] == "| clean connects (5,000, 64 at a time) | 11,129 / 6,890 | 40.0 / 104.0 per connect | - / - |"
    assert len(lines) == 4
