"""One client's flood of small packets cannot hold the other clients back until it is dispatched
(vmqpy.broker.core.turn_budget; docs/security.md, threat model): a real node, raw clients.

A client writes 200,000 small QoS 0 PUBLISH packets (about 1.8 MB, to a topic nobody subscribes to) in one go,
then a PINGREQ: its PINGRESP says the node has dispatched them all. Meanwhile a well-behaved client on the same
node goes on with PINGREQ and QoS 1 round trips, counted between the flood leaving and that PINGRESP. Before the
turn budget the node dispatched each read of 256 KiB (about 29,000 of these packets, a fraction of a second) in
one turn, so at most one round trip (two packets of the well-behaved client, each read in its own turn) fitted
between two reads: a handful in all. Now a connection gives up its turn after TURN_BUDGET and the rest of what
it sent waits in the node's bulk lane, a LANE_BUDGET a turn, behind the other clients' packets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import PINGRESP, RawClient, RoundTrips, enc_pingreq, enc_publish
from tests.integration.conftest import Broker, broker_kind, free_port, public_metrics

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's turn budget")]

FLOOD = 200_000  # small PUBLISH packets written at once
WHILE_FLOODED = 30  # round trips answered meanwhile, at least (at most about 7 before: one per 256 KiB read)


YIELDED = "vmqpy_connection_turn_yielded_total"


@pytest.fixture
def http_port() -> int:
    return free_port()


@pytest.fixture
def node(tmp_path: Path, http_port: int) -> Iterator[Broker]:
    broker = Broker(broker_kind(), tmp_path, {"allow_anonymous": "on", "metrics.public": "on",
                                              "listener.http.default": f"127.0.0.1:{http_port}"})
    broker.start()
    yield broker
    broker.stop()


def test_a_flood_in_one_write_lets_other_clients_go_on(node: Broker, http_port: int) -> None:
    assert public_metrics(http_port, [YIELDED]) == {YIELDED: 0}  # exported from the start
    flooder = RawClient(node.port, version=5)
    flooder.connect("flooder")
    flood = enc_publish("nobody/listens", b"x", version=5) * FLOOD + enc_pingreq()
    with RoundTrips(node.port) as trips:
        deadline = time.monotonic() + 30
        while len(trips.done) < 3 and time.monotonic() < deadline:  # it runs before the flood starts
            time.sleep(0.01)
        assert len(trips.done) >= 3
        sent = time.monotonic()
        flooder.send(flood)
        flooder.expect(PINGRESP, 120)
        dispatched = time.monotonic()
        answered = trips.between(sent, dispatched)
    flooder.close()
    print(f"\n{answered} round trips answered in {dispatched - sent:.2f} s while {FLOOD} packets were dispatched")
    assert answered >= WHILE_FLOODED, f"only {answered} round trips answered while the node dispatched {FLOOD} packets"
    assert public_metrics(http_port, [YIELDED])[YIELDED] > 0
