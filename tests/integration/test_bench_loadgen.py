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
