"""One SUBSCRIBE cannot stall the node (docs/security.md, threat model): a real node, raw clients.

A client sends one SUBSCRIBE of 65,535 filters (each a metadata write and a routing change: seconds of work).
While the node works on it, a well-behaved client on the same node goes on with its PINGREQ and QoS 1 round trips:
they are counted between the SUBSCRIBE leaving and its SUBACK arriving (before the work was sliced, the node
answered none of them until the SUBACK). The SUBACK carries every filter's code in the packet's order, and
`max_subscriptions_per_client` refuses the excess of a big SUBSCRIBE with 0x97 (5.0) / 0x80 (3.1.1).
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import (
    PUBLISH,
    SUBACK,
    UNSUBACK,
    RawClient,
    RoundTrips,
    enc_disconnect,
    enc_subscribe,
    enc_unsubscribe,
)
from tests.integration.conftest import Broker, assert_serving, broker_kind, free_port, wait_until
from tests.integration.started_brokers import started
from vmqpy.metadata.replica import Replica
from vmqpy.metadata.rows import TABLES
from vmqpy.sessions import records
from vmqpy.storage import Storage

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's SUBSCRIBE slices")]

__all__ = ["started"]  # the fixture this module's tests take

FILTERS = 65_535
INVALID_AT = {1_000, 40_000}  # filters no server accepts, at known positions: 0x8F where they stand


def start_node(workdir: Path, started: list[Broker], **extra: str) -> Broker:
    broker = Broker(broker_kind(), workdir, {"allow_anonymous": "on", **extra})
    started.append(broker)
    return broker.start()


def test_a_subscribe_of_65535_filters_lets_other_clients_go_on(tmp_path: Path, started: list[Broker]) -> None:
    node = start_node(tmp_path, started)
    big = RawClient(node.port, version=5)
    big.connect("big")
    filters = [("a/#/b" if i in INVALID_AT else f"f/{i}", 0) for i in range(FILTERS)]
    packet = enc_subscribe(1, filters, version=5)
    with RoundTrips(node.port) as trips:
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


REMOVED = 40_000  # subscriptions undone at once: seconds of metadata deletes and routing changes
#: round trips that must be answered while they are removed. Up to 8 came in before the node started the removal or
#: after it ended in one turn (the window's ends are seen by the test, not by the node); removed a SLICE a turn, as
#: SUBSCRIBE adds them, about one round trip is answered every two slices (~78 for 40,000)
WHILE_REMOVING = 30


def subscriptions_on(url: str, key: str) -> int | None:
    """The subscriptions the node holds, as its status says (None while it does not answer)."""
    request = urllib.request.Request(f"{url}/status.json", headers={"x-api-key": key})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return sum(int(row["subscriptions"]) for row in json.loads(answer.read())["nodes"])
    except OSError:
        return None


def records_of(url: str, key: str, client_id: str) -> int | None:
    """How many subscription records of `client_id` the node's store still holds (`vmq-admin subscription show`
    over the API, at most 10; None while it does not answer)."""
    request = urllib.request.Request(f"{url}/api/v1/subscription/show?client-id={client_id}&limit=10",
                                     headers={"x-api-key": key})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return len(json.loads(answer.read())["table"])
    except OSError:
        return None


@pytest.mark.parametrize("how", ["unsubscribe", "disconnect"])
def test_undoing_many_subscriptions_lets_other_clients_go_on(tmp_path: Path, started: list[Broker], how: str) -> None:
    """A client holding 40,000 subscriptions (taken a slice a turn) drops them all at once, by one UNSUBSCRIBE or by
    leaving (its clean session ends): the well-behaved client's round trips go on while the node removes them,
    counted between the UNSUBSCRIBE or DISCONNECT leaving and the UNSUBACK, or the node's store holding none of
    the big client's subscription records any more."""
    http_port = free_port()
    node = start_node(tmp_path, started, **{"listener.http.default": f"127.0.0.1:{http_port}"})
    url = f"http://127.0.0.1:{http_port}"
    key = (node.data_dir / "api.key").read_text().strip()
    big = RawClient(node.port, version=5)
    big.connect("big")
    big.send(enc_subscribe(1, [(f"g/{i}", 0) for i in range(REMOVED)], version=5))
    assert big.expect(SUBACK, 120).reason_codes == [0] * REMOVED
    with RoundTrips(node.port) as trips:
        deadline = time.monotonic() + 30
        while len(trips.done) < 3 and time.monotonic() < deadline:  # it runs before the removal starts
            time.sleep(0.01)
        assert len(trips.done) >= 3
        assert subscriptions_on(url, key) == REMOVED + 1  # and the well-behaved client's own
        sent = time.monotonic()
        if how == "unsubscribe":
            big.send(enc_unsubscribe(2, [f"g/{i}" for i in range(REMOVED)], version=5))
            assert big.expect(UNSUBACK, 120).reason_codes == [0] * REMOVED
        else:
            big.send(enc_disconnect(5))
            big.close()
            wait_until(lambda: records_of(url, key, "big") == 0, 120, interval=0.5, what="the records removed")
            assert subscriptions_on(url, key) == 1
        removed = time.monotonic()
        answered = trips.between(sent, removed)
    big.close()
    assert answered >= WHILE_REMOVING, \
        f"only {answered} round trips answered while the node removed {REMOVED} subscriptions"


def test_a_sliced_unsubscribe_answers_every_filter_in_order_and_stops_their_messages(
        tmp_path: Path, started: list[Broker]) -> None:
    """An UNSUBSCRIBE of 1,000 filters (four slices), every third of them never subscribed: one UNSUBACK with
    0x00 and 0x11 (No subscription existed) where each filter stands [MQTT-3.11.3-1]; afterwards the removed
    filters get nothing and the one kept still does."""
    node = start_node(tmp_path, started)
    client = RawClient(node.port, version=5)
    client.connect("unsubscriber")
    held = [f"u/{i}" for i in range(1_000) if i % 3]
    client.send(enc_subscribe(1, [(f, 1) for f in held] + [("u/kept", 1)], version=5))
    assert client.expect(SUBACK, 60).reason_codes == [1] * (len(held) + 1)
    client.send(enc_unsubscribe(2, [f"u/{i}" for i in range(1_000)], version=5))
    unsuback = client.expect(UNSUBACK, 60)
    assert unsuback.packet_id == 2
    assert unsuback.reason_codes == [0x11 if i % 3 == 0 else 0x00 for i in range(1_000)]
    publisher = RawClient(node.port, version=5)
    publisher.connect("unsub-publisher")
    for topic in ("u/1", "u/500", "u/998", "u/kept"):
        publisher.publish(topic, topic.encode(), qos=1)
    message = client.expect(PUBLISH, 10)
    assert message.topic == "u/kept"
    client.ack(message)
    client.assert_silent(1.0)
    publisher.close()
    client.close()


def test_a_connect_waits_for_the_old_sessions_subscriptions_to_go(tmp_path: Path, started: list[Broker]) -> None:
    """A clean session holding 20,000 subscriptions ends and its client id connects again at once: the new
    session's CONNACK comes once the old subscriptions are gone, and a message on one of the old filters published
    right after reaches nobody, while the new session's own subscription is served."""
    node = start_node(tmp_path, started)
    subscribed_and_gone(node.port, "again", "old", 20_000, qos=1)
    again = RawClient(node.port, version=5)
    again.connect("again", timeout=60)  # clean start: a new session, waiting for the old one's subscriptions
    again.subscribe(("new/x", 1))
    publisher = RawClient(node.port, version=5)
    publisher.connect("again-publisher")
    for topic in ("old/0", "old/19999", "new/x"):
        publisher.publish(topic, topic.encode(), qos=1)
    message = again.expect(PUBLISH, 10)
    assert message.topic == "new/x", message
    again.ack(message)
    again.assert_silent(1.0)
    publisher.close()
    again.close()


def test_a_clean_start_replacing_a_session_of_many_subscriptions_lets_other_clients_go_on(
        tmp_path: Path, started: list[Broker]) -> None:
    """A persistent session holding 40,000 subscriptions, offline, is replaced by a clean start of its client id:
    the CONNACK comes without waiting for them (no session present; their records are still there when it comes:
    before, all went in the turn of that CONNECT), the well-behaved client's round trips go on while the node
    removes them a slice a turn, and meanwhile the new session gets nothing published on the old filters."""
    http_port = free_port()
    node = start_node(tmp_path, started, **{"listener.http.default": f"127.0.0.1:{http_port}"})
    url = f"http://127.0.0.1:{http_port}"
    key = (node.data_dir / "api.key").read_text().strip()
    subscribed_and_gone(node.port, "kept", "k", REMOVED, qos=1, clean=False, props={"session_expiry_interval": 3600})
    with RoundTrips(node.port) as trips:
        deadline = time.monotonic() + 30
        while len(trips.done) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(trips.done) >= 3
        sent = time.monotonic()
        again = RawClient(node.port, version=5)
        connack = again.connect("kept", timeout=60)  # clean start
        assert not connack.session_present
        waiting = records_of(url, key, "kept")  # before: all removed in the turn of the CONNECT, none left now
        assert waiting, f"{waiting} subscription records left once the CONNACK came"
        publisher = RawClient(node.port, version=5)
        publisher.connect("kept-publisher")
        publisher.publish("k/0", b"old", qos=1)  # an old filter, while (most of) them still wait
        again.assert_silent(0.5)
        wait_until(lambda: records_of(url, key, "kept") == 0, 120, interval=0.5, what="the old records removed")
        removed = time.monotonic()
        answered = trips.between(sent, removed)
    publisher.close()
    again.close()
    assert answered >= WHILE_REMOVING, \
        f"only {answered} round trips answered while the node replaced a session of {REMOVED} subscriptions"


def test_a_node_stopping_while_it_sweeps_removes_every_subscription_first(
        tmp_path: Path, started: list[Broker]) -> None:
    """A clean session holding 20,000 subscriptions ends and the node is stopped at once, while its sweeper may
    still remove them a slice a turn (vmqpy.broker.core.sweeper): the node removes the rest before its metadata store
    closes (`drain`), so that its database holds none of them, and it logs no failed step. (Seen once without
    `drain`, in a run of test_hostile_clients.py: "bulk lane step failed ... storage is closed" at the stop.)"""
    node = start_node(tmp_path, started)
    subscribed_and_gone(node.port, "big", "g", 20_000)
    assert node.stop() == 0
    log = node.log.read_text(errors="replace")
    assert "bulk lane step failed" not in log and "storage is closed" not in log, log[-3000:]
    assert subscription_rows(node.data_dir, "big") == 0
    node.start()  # and the store it left opens as usual
    assert_serving(node)


def subscribed_and_gone(port: int, client_id: str, prefix: str, count: int, qos: int = 0, **connect: Any) -> None:
    """`client_id` subscribes to `count` filters `prefix/N` in one SUBSCRIBE, then leaves with a DISCONNECT."""
    client = RawClient(port, version=5)
    client.connect(client_id, **connect)
    client.send(enc_subscribe(1, [(f"{prefix}/{i}", qos) for i in range(count)], version=5))
    assert client.expect(SUBACK, 120).reason_codes == [qos] * count
    client.send(enc_disconnect(5))
    client.close()


def subscription_rows(data_dir: Path, client_id: str) -> int:
    """The live subscription records of `client_id` in a stopped node's metadata store, read from its database as
    the node reads it at start (vmqpy.metadata: `Replica.restore`, `fold`)."""
    storage = Storage(data_dir / "broker.db")
    storage.open()
    try:
        rows = {table: storage.load(table) for table in TABLES}
        replica = Replica.restore("vmqpy@127.0.0.1", rows, rng=random.Random(0))
    finally:
        storage.close()
    return sum(1 for key, _value in replica.fold(records.SUBSCRIPTION) if client_id in key)
