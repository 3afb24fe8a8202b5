"""A deny line under a wider read line, as Mosquitto users write it (issue 33, finding 9): with `topic #` and
`topic deny secret/#`, a monitoring client's SUBSCRIBE to `#` is granted, and the messages of `secret/...` are
withheld from it one by one, retained ones included, while everything else is delivered. A real node with a
real ACL file; paho-mqtt and mosquitto_sub as the monitoring clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import CliSub, PahoClient, RawClient, unique
from tests.integration.conftest import Broker, broker_kind, free_port, public_metrics

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's ACL file")]

# The deny line is the monitoring user's own: anonymous publishers may write secret/..., so its messages (the
# retained one included) are routed and must be withheld from `monitor` delivery by delivery. (A deny line for
# everyone would refuse those PUBLISHes already: nothing would reach the delivery check.)
ACL = """\
topic #

user monitor
topic deny secret/#
"""
USER = "monitor"
ROUTED = 'vmqpy_publish_withheld_total{delivery="routed"}'
RETAINED = 'vmqpy_publish_withheld_total{delivery="retained"}'
HTTP_PORT = free_port()  # the node's admin listener: /metrics is public (metrics.public = on)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    workdir: Path = tmp_path_factory.mktemp("acl-deny")
    acl_file = workdir / "vmq.acl"
    acl_file.write_text(ACL)
    broker = Broker(broker_kind(), workdir, {"acl_file": acl_file, "allow_anonymous": "on",
                                             "listener.http.default": f"127.0.0.1:{HTTP_PORT}",
                                             "metrics.public": "on"}).start()
    publisher = RawClient(broker.port, version=5)
    publisher.connect(unique("retainer-"))
    for topic in ("secret/r", "public/r"):
        publisher.publish(topic, b"kept", qos=1, retain=True)
    publisher.disconnect()
    yield broker
    broker.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_hash_is_granted_and_denied_topics_are_withheld(node: Broker, version: int) -> None:
    monitor = PahoClient(node.port, version, unique("monitor-"))
    monitor.client.username_pw_set(USER)
    publisher = RawClient(node.port, version=5)
    before = public_metrics(HTTP_PORT, [ROUTED, RETAINED])
    try:
        monitor.connect()
        monitor.subscribe("#", qos=1)  # asserts the SUBACK grants QoS 1 (it was 0x87 / 0x80)
        retained = sorted((m.topic, m.payload, m.retain) for m in monitor.collect(1))
        assert retained == [("public/r", b"kept", True)]  # the retained secret/r is withheld
        publisher.connect(unique("pub-"))
        for topic in ("secret/x", "public/x", "secret/deep/y", "public/y"):
            assert publisher.publish(topic, topic.encode(), qos=1) is not None
        marker = unique("marker/")
        publisher.publish(marker, b"end", qos=1)
        got = [(m.topic, m.payload) for m in monitor.until_marker(marker)]
        assert got == [("public/x", b"public/x"), ("public/y", b"public/y")]
        after = public_metrics(HTTP_PORT, [ROUTED, RETAINED])
        assert (after[ROUTED] - before[ROUTED], after[RETAINED] - before[RETAINED]) == (2, 1)  # counted
    finally:
        publisher.close()
        monitor.stop()


def test_a_filter_inside_the_deny_is_still_refused(node: Broker) -> None:
    client = RawClient(node.port, version=5)
    try:
        client.connect(unique("nosy-"), username=USER)
        ack = client.subscribe("secret/#", "secret/x", "public/#", qos=1, check=False)
        assert ack.reason_codes == [0x87, 0x87, 1]
    finally:
        client.close()


def test_mosquitto_sub_on_hash_sees_the_allowed_topics_only(node: Broker) -> None:
    # count: the retained public/r, public/z, the marker
    sub = CliSub(node.port, "#", 5, extra=["-F", "%t", "-u", USER], count=3)
    try:
        sub.wait_subscribed()
        publisher = RawClient(node.port, version=5)
        publisher.connect(unique("pub-"))
        for topic in ("secret/z", "public/z", "secret/r"):
            publisher.publish(topic, b"m", qos=1)
        publisher.publish("zz/marker", b"end", qos=1)
        publisher.close()
        code, lines = sub.finish()
        assert code == 0
        topics = [line for line in lines if not line.startswith(("Client ", "Subscribed "))]
        assert topics == ["public/r", "public/z", "zz/marker"]
    finally:
        sub.kill()
