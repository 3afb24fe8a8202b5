"""bench.compare and bench.brokers: which brokers run (aedes only when installed), the aedes command line, and the
summary's per-broker ratios and CPU per message. Nothing here starts a broker or reaches the npm registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import brokers
from bench.brokers import ALL_KINDS, KINDS, BrokerProcess, aedes_command, aedes_missing
from bench.compare import broker_list, cpu_us_per_message, summarize, summary_table, vmqpy_ratios
from bench.loadgen import Scenario

MISSING = "aedes is not installed (run `make bench-deps`), aedes skipped"


@pytest.mark.parametrize(("spec", "missing", "expected", "note"), [
    (None, None, ["vmqpy", "mosquitto", "aedes"], None),
    (None, MISSING, ["vmqpy", "mosquitto"], MISSING),
    ("vmqpy,mosquitto", None, ["vmqpy", "mosquitto"], None),
    ("vmqpy,mosquitto", MISSING, ["vmqpy", "mosquitto"], None),
    ("vmqpy, aedes", None, ["vmqpy", "aedes"], None),
    ("vmqpy,mosquitto,aedes", MISSING, ["vmqpy", "mosquitto"], MISSING),
    ("aedes,vmqpy,aedes", None, ["aedes", "vmqpy"], None),
])
def test_broker_list_runs_aedes_only_when_installed(spec: str | None, missing: str | None, expected: list[str],
                                                    note: str | None) -> None:
    assert broker_list(spec, missing) == (expected, note)


@pytest.mark.parametrize(("spec", "missing", "error"), [
    ("vmqpy,hivemq", None, "unknown broker 'hivemq'"),
    (" , ", None, "names no broker"),
    ("aedes", MISSING, "no broker left"),
])
def test_broker_list_refuses_unknown_or_empty_lists(spec: str, missing: str | None, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        broker_list(spec, missing)


def test_aedes_command_runs_server_js_on_the_given_port() -> None:
    cmd = aedes_command(18830, "127.0.0.1", "/usr/bin/node", Path("/x/bench/aedes"))
    assert cmd == ["/usr/bin/node", "/x/bench/aedes/server.js", "18830", "127.0.0.1"]


def test_aedes_missing_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(brokers, "node_binary", lambda: "/usr/bin/node")
    assert "make bench-deps" in (aedes_missing(tmp_path) or "")
    pkg = tmp_path / "node_modules" / "aedes"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text('{"version": "0.51.3"}')
    assert aedes_missing(tmp_path) is None
    monkeypatch.setattr(brokers, "node_binary", lambda: None)
    assert "node is not installed" in (aedes_missing(tmp_path) or "")


def test_broker_process_knows_aedes_but_the_pair_stays_vmqpy_and_mosquitto() -> None:
    assert KINDS == ("vmqpy", "mosquitto")
    assert "aedes" in ALL_KINDS
    assert BrokerProcess("aedes").kind == "aedes"
    with pytest.raises(ValueError, match="unknown broker kind"):
        BrokerProcess("emqx")


def test_a_missing_aedes_fails_start_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(brokers, "aedes_missing", lambda: MISSING)
    with pytest.raises(RuntimeError, match="make bench-deps"):
        BrokerProcess("aedes").start()


def _row(run: int, broker: str, rate: float, cpu: float) -> dict[str, Any]:
    return {"run": run, "scenario": "qos1-fanin10", "broker": broker, "qos": 1, "rate": rate, "broker_cpu": cpu,
            "p50_ms": 1.0, "p99_ms": 2.0, "acked_lost": 0, "acked": 100, "lost": 0, "expected": 100,
            "peak_rss_kib": 1024, "loadgen_cpu": [10.0], "machine_cpu": 150.0}


ROWS = [
    _row(1, "vmqpy", 100_000.0, 90.0), _row(1, "mosquitto", 80_000.0, 100.0), _row(1, "aedes", 50_000.0, 100.0),
    _row(2, "vmqpy", 90_000.0, 90.0), _row(2, "mosquitto", 100_000.0, 100.0),
    {"run": 2, "scenario": "qos1-fanin10", "broker": "aedes", "failed": "Traceback\nRuntimeError: boom"},
]


def test_cpu_per_message_is_the_cpu_share_over_the_rate() -> None:
    assert cpu_us_per_message({"broker_cpu": 90.0, "rate": 100_000.0}) == pytest.approx(9.0)
    assert cpu_us_per_message({"broker_cpu": 90.0, "rate": 0.0}) is None
    assert cpu_us_per_message({"broker_cpu": None, "rate": 10.0}) is None


def test_ratios_pair_runs_where_both_brokers_were_measured() -> None:
    rates, cores = vmqpy_ratios(ROWS, "qos1-fanin10", "aedes")
    assert rates == [pytest.approx(2.0)]  # run 2's aedes failed: no ratio for that run
    assert cores == [pytest.approx((100_000 / 0.9) / 50_000)]
    rates, _ = vmqpy_ratios(ROWS, "qos1-fanin10", "mosquitto")
    assert rates == [pytest.approx(1.25), pytest.approx(0.9)]


def test_summary_gives_vmqpy_both_ratios_and_every_broker_its_cpu_per_message() -> None:
    sc = Scenario("qos1-fanin10", "fanin", 10, 1)
    summary = summarize(ROWS, [sc], ["vmqpy", "mosquitto", "aedes"])
    by = {s["broker"]: s for s in summary}
    assert by["vmqpy"]["ratio"] == pytest.approx((1.25 + 0.9) / 2)
    assert by["vmqpy"]["ratio_aedes"] == pytest.approx(2.0)
    assert by["vmqpy"]["cpu_us"] == pytest.approx((9.0 + 10.0) / 2)
    assert by["aedes"]["failed"] == 1 and by["aedes"]["runs"] == 1
    assert by["aedes"]["cpu_us"] == pytest.approx(20.0)
    assert by["mosquitto"]["ratio_aedes"] is None
    with_aedes = summary_table(summary, with_aedes=True)
    without = summary_table(summary, with_aedes=False)
    assert "vmqpy/aedes" in with_aedes[0] and "vmqpy/aedes" not in without[0]
    for table in (with_aedes, without):  # every line has as many cells as the header
        assert {line.count("|") for line in table} == {table[0].count("|")}
    assert "**2.00x**" in with_aedes[2]
