"""What a publish carries survives forwarding to another node, in both forms of the forward record (compact for a
plain message, full for one with MQTT 5 properties: vmqpy/broker/core/forward_wire.py): payload, order, retain flag
(retain as published), user properties, content type, message expiry, the subscriber's subscription identifier,
and the QoS downgrade per subscription. Two real nodes on 127.0.0.11-12, paho clients on different nodes."""

from __future__ import annotations

import uuid

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.integration.clients import paho_props
from tests.integration.cluster import ClusterNode
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy clustering")]


def routed_from(node: ClusterNode, client_id: str, filters: int) -> bool:
    answer = node.admin("subscription", "show", f"client-id={client_id}", "--json")
    return answer.returncode == 0 and answer.stdout.count('"Filter"') >= filters


def test_a_forwarded_publish_keeps_its_properties_order_retain_flag_and_qos_per_subscription(
    pair: list[ClusterNode],
) -> None:
    first, second = pair
    topic = f"fwd/{uuid.uuid4().hex[:8]}"
    ids = {"full": f"s1-{uuid.uuid4().hex[:6]}", "low": f"s0-{uuid.uuid4().hex[:6]}"}
    full = second.client(5, ids["full"])
    full.subscribe(f"{topic}/#", qos=1, rap=True, sub_id=7)
    low = second.client(5, ids["low"])
    low.subscribe(f"{topic}/#", qos=0)
    for client_id in ids.values():
        wait_until(lambda c=client_id: routed_from(first, c, 1), 10, interval=0.2, what="subscription replicated")
    publisher = first.client(5, f"p-{uuid.uuid4().hex[:6]}")
    rich = paho_props(PacketTypes.PUBLISH, UserProperty=[("k", "v"), ("k", "w")], ContentType="text/plain",
                      MessageExpiryInterval=300)
    publisher.publish(f"{topic}/a", b"plain-1", qos=1)  # a plain message: the compact record
    publisher.publish(f"{topic}/b", b"rich", qos=1, props=rich)  # properties: the full record
    publisher.publish(f"{topic}/c", b"retained", qos=1, retain=True)
    publisher.publish(f"{topic}/a", b"plain-2", qos=0)
    got = full.collect(4, 10)
    assert [m.payload for m in got] == [b"plain-1", b"rich", b"retained", b"plain-2"]  # in the publisher's order
    assert [m.qos for m in got] == [1, 1, 1, 0]
    assert [m.retain for m in got] == [False, False, True, False]  # retain as published
    for message in got:
        assert message.properties.SubscriptionIdentifier == [7]
    rich_got = got[1].properties
    assert rich_got.UserProperty == [("k", "v"), ("k", "w")] and rich_got.ContentType == "text/plain"
    assert 0 < rich_got.MessageExpiryInterval <= 300
    assert not hasattr(got[0].properties, "UserProperty") and not hasattr(got[0].properties, "ContentType")
    downgraded = low.collect(4, 10)
    assert [(m.payload, m.qos, m.retain) for m in downgraded] == [
        (b"plain-1", 0, False), (b"rich", 0, False), (b"retained", 0, False), (b"plain-2", 0, False)
    ]
    assert downgraded[1].properties.UserProperty == [("k", "v"), ("k", "w")]
