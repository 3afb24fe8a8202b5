"""bench/bench_connect.py's drive against bench/connect_floor.py: every connect gets its CONNACK and the server
closes after the DISCONNECT (drive raises otherwise), and the server's CPU is read from /proc."""

from __future__ import annotations

from bench.bench_connect import drive
from bench.brokers import BrokerProcess


def test_the_floor_server_answers_every_connect_and_its_cpu_is_read() -> None:
    with BrokerProcess("floor") as floor:
        result = drive(floor.port, floor.cpu_seconds, 200, 8, "t")
        assert floor.alive()
    assert result.connects_per_s > 0
    assert result.us_per_connect >= 0
    assert not floor.alive()  # stopped by its PID
