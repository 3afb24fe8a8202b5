"""bench/bench_connect.py's drive against bench/connect_floor.py: every connect gets its CONNACK and the server
closes after the DISCONNECT (drive raises otherwise), and the server's CPU is read from /proc."""

from __future__ import annotations

from bench.bench_connect import drive, suite_rows
from bench.brokers import BrokerProcess


def test_the_floor_server_answers_every_connect_and_its_cpu_is_read() -> None:
    with BrokerProcess("floor") as floor:
        result = drive(floor.port, floor.cpu_seconds, 200, 8, "t")
        assert floor.alive()
    assert result.connects_per_s > 0
    assert result.us_per_connect >= 0
    assert not floor.alive()  # stopped by its PID


def test_suite_rows_are_medians_per_broker_and_the_rate_ratio() -> None:
    rounds = {"vmqpy": [{"connects_per_s": r, "us_per_connect": u} for r, u in ((5_000, 70), (6_000, 66), (4_000, 90))],
              "mosquitto": [{"connects_per_s": 12_000.0, "us_per_connect": 30.0}]}
    rows = suite_rows({"args": {"connects": 5000, "concurrency": 64}, "rounds": rounds})
    by = {r["broker"]: r for r in rows}
    assert {r["scenario"] for r in rows} == {"clean connects (5,000, 64 at a time)"}
    assert (by["vmqpy"]["rate"], by["vmqpy"]["cpu_us"], by["vmqpy"]["cpu_unit"]) == (5_000, 70, "connect")
    assert by["vmqpy"]["ratio"] == 5_000 / 12_000 and by["mosquitto"]["ratio"] is None
