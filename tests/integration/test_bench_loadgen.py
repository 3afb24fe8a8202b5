"""One short real run of the load generator of bench/ against a vmqpy node: what it counts adds up.

No assertion here is about speed.
"""

from __future__ import annotations

import pytest

from bench import loadgen
from bench.brokers import BrokerProcess


@pytest.mark.integration
def test_one_pair_qos1_against_a_real_node_loses_nothing() -> None:
    sc = loadgen.Scenario("qos1-pairs1", "pairs", 1, 1)
    with BrokerProcess("vmqpy") as broker:
        r = loadgen.run(broker.host, broker.port, sc, duration=1.0, warmup=0.2, drain=5.0, procs=1,
                        probe=broker.cpu_seconds)
        assert broker.alive()
    assert r.errors == []
    assert r.sent > 0
    assert r.unacked == 0 and r.acked == r.sent
    assert r.unique_delivered == r.sent and r.lost == 0
    assert r.acked_lost == 0
    assert r.delivered_in_window > 0 and r.p50_ms is not None


@pytest.mark.integration
@pytest.mark.parametrize("qos", [0, 1])
def test_fixed_rate_run_sends_its_schedule_and_counts_every_delivery(qos: int) -> None:
    """2 pairs at 200 msgs/s in total: 100 each over 0.2 s warmup + 1 s window; deliveries counted by due time."""
    sc = loadgen.Scenario(f"qos{qos}-pairs2", "pairs", 2, qos)
    with BrokerProcess("vmqpy") as broker:
        r = loadgen.run(broker.host, broker.port, sc, duration=1.0, warmup=0.2, drain=5.0, procs=1,
                        probe=broker.cpu_seconds, rate=200.0)
        assert broker.alive()
    assert r.errors == []
    assert r.target_rate == 200.0
    assert r.behind == 0 and r.sent == 240  # every message due before the end of the window, no more
    assert r.sent_in_window == 200  # due in the window
    assert 0 < r.delivered_in_window <= 240  # received in the window
    assert r.lost == 0 and r.dups == 0
    assert r.latency_samples == 200 and r.max_ms is not None and r.lag_p99_ms is not None
    if qos:
        assert r.acked == r.sent and r.acked_lost == 0


def run_against(kind: str, sc: loadgen.Scenario, rate: float | None = None) -> loadgen.RunResult:
    """One short run of `sc` against a fresh `kind` (a BrokerProcess kind), which must still be up at its end."""
    with BrokerProcess(kind) as broker:
        r = loadgen.run(broker.host, broker.port, sc, duration=1.0, warmup=0.2, drain=5.0, procs=2,
                        probe=broker.cpu_seconds, rate=rate)
        assert broker.alive()
    return r


def assert_everything_arrived(r: loadgen.RunResult, copies: int) -> None:
    """Every message sent arrived `copies` times (once per subscriber), none twice; QoS 1 ones acknowledged."""
    assert r.errors == []
    assert r.sent > 0 and r.expected == copies * r.sent
    assert r.unique_delivered == r.expected and r.lost == 0 and r.dups == 0
    if r.qos:
        assert r.acked == r.sent and r.acked_lost == 0


@pytest.mark.integration
@pytest.mark.parametrize("qos", [0, 1])
def test_fanout_delivers_every_message_to_every_subscriber(qos: int) -> None:
    assert_everything_arrived(run_against("vmqpy", loadgen.Scenario(f"qos{qos}-fanout3", "fanout", 3, qos)), 3)


@pytest.mark.integration
@pytest.mark.parametrize("qos", [0, 1])
def test_the_relay_floor_relays_every_message_of_the_pairs(qos: int) -> None:
    """bench/relay_floor.py (bench_latency --floor): the load generator's accounting adds up against it too."""
    sc = loadgen.Scenario(f"qos{qos}-pairs3", "pairs", 3, qos)
    assert_everything_arrived(run_against("relay-floor", sc, rate=300.0), 1)
