"""One SUBSCRIBE cannot stall the node (docs/security.md, threat model): a real node, raw clients.

A client sends one SUBSCRIBE of 65,535 filters (each a metadata write and a routing change: seconds of work).
While the node works on it, a well-behaved client on the same node goes on with its PINGREQ and QoS 1 round trips:
they are counted between the SUBSCRIBE leaving and its SUBACK arriving (before the work was sliced, the node
answered none of them until the SUBACK). The SUBACK carries every filter's code in the packet's order, and
`max_subscriptions_per_client` refuses the excess of a big SUBSCRIBE with 0x97 (5.0) / 0x80 (3.1.1).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import PINGRESP, PUBLISH, SUBACK, RawClient, enc_pingreq, enc_subscribe
from tests.integration.conftest import Broker, broker_kind

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's SUBSCRIBE slices")]

FILTERS = 65_535
INVALID_AT = {1_000, 40_000}  # filters no server accepts, at known positions: 0x8F where they stand


@pytest.fixture
def started() -> Iterator[list[Broker]]:
    brokers: list[Broker] = []
    yield brokers
    for broker in brokers:
        broker.stop()


def start_node(workdir: Path, started: list[Broker], **extra: str) -> Broker:
    broker = Broker(broker_kind(), workdir, {"allow_anonymous": "on", **extra})
    started.append(broker)
    return broker.start()


class RoundTrips:
    """A well-behaved client doing PINGREQ and QoS 1 PUBLISH (to its own subscription) round trips, one after the
    other, in a thread: the end time of each."""

    def __init__(self, node: Broker) -> None:
        self.client = RawClient(node.port, version=5)
        self.client.connect("well-behaved")
        self.client.subscribe(("rt/echo", 1))
        self.done: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for n in range(1_000_000):
                if self._stop.is_set():
                    return
                if n % 2:
                    self.client.send(enc_pingreq())
                    self.client.expect(PINGRESP, 120)
                else:
                    self.client.publish("rt/echo", b"x", qos=1, timeout=120)  # waits for its PUBACK
                    message = self.client.expect(PUBLISH, 120)
                    self.client.ack(message)
                self.done.append(time.monotonic())
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> RoundTrips:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(130)
        self.client.close()
        assert not self._thread.is_alive(), "the well-behaved client's round trip never ended"
        assert self.error is None, f"the well-behaved client failed: {self.error!r}"

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in list(self.done) if start < t < end)


def test_a_subscribe_of_65535_filters_lets_other_clients_go_on(tmp_path: Path, started: list[Broker]) -> None:
    node = start_node(tmp_path, started)
    big = RawClient(node.port, version=5)
    big.connect("big")
    filters = [("a/#/b" if i in INVALID_AT else f"f/{i}", 0) for i in range(FILTERS)]
    packet = enc_subscribe(1, filters, version=5)
    with RoundTrips(node) as trips:
        deadline = time.monotonic() + 30
        while len(trips.done) < 3 and time.monotonic() < deadline:  # it runs before the SUBSCRIBE is sent
            time.sleep(0.01)
        assert len(trips.done) >= 3
        sent = time.monotonic()
        big.send(packet)
        suback = big.expect(SUBACK, 120)
        acked = time.monotonic()
        answered = trips.between(sent, acked)
    assert len(suback.reason_codes) == FILTERS
    assert [i for i, code in enumerate(suback.reason_codes) if code != 0] == sorted(INVALID_AT)
    assert {suback.reason_codes[i] for i in INVALID_AT} == {0x8F}
    assert answered >= 10, f"only {answered} round trips answered while the node worked on the SUBSCRIBE"
    publisher = RawClient(node.port, version=5)
    publisher.connect("publisher")
    publisher.publish(f"f/{FILTERS - 1}", b"last", qos=1)
    assert big.expect(PUBLISH, 10).payload == b"last"
    publisher.close()
    big.close()


@pytest.mark.parametrize(("version", "refused"), [(5, 0x97), (4, 0x80)])
def test_max_subscriptions_per_client_refuses_the_excess_of_a_big_subscribe(
        tmp_path: Path, started: list[Broker], version: int, refused: int) -> None:
    node = start_node(tmp_path, started, max_subscriptions_per_client="700")
    client = RawClient(node.port, version=version)
    client.connect("quota")
    client.send(enc_subscribe(1, [(f"q/{i}", 0) for i in range(1_000)], version=version))
    codes = client.expect(SUBACK, 60).reason_codes
    assert codes == [0] * 700 + [refused] * 300
    client.send(enc_subscribe(2, [("q/1", 1), ("q/extra", 0)], version=version))  # held already: granted again
    assert client.expect(SUBACK, 10).reason_codes == [1, refused]
    client.publish("q/699", b"in", qos=1)
    assert client.expect(PUBLISH, 10).topic == "q/699"
    client.close()
