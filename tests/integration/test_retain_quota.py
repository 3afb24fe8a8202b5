"""The retained messages one client may keep (docs/configuration.md, `retain.max_per_client`,
`retain.max_bytes_per_client`): a real node, raw clients on MQTT 5.0 and 3.1.1.

A client sets retained messages up to its quota; the next one is refused (5.0: PUBACK 0x97 Quota exceeded; 3.1.1:
acknowledged and not stored); deleting one of its retained messages always works and makes room; another client
has a quota of its own. What is stored is read back by a new subscriber to `r/#` (the retained messages come before
a marker another client publishes on `r/zz-marker` after the SUBACK).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.clients import PUBLISH, SUBACK, RawClient, enc_subscribe, unique
from tests.integration.conftest import Broker, broker_kind

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's retained quota")]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(broker_kind(), tmp_path, {"allow_anonymous": "on", "retain.max_per_client": "3",
                                              "retain.max_bytes_per_client": "2000"}).start()
    yield broker
    broker.stop()


def retained_topics(node: Broker) -> list[str]:
    """The topics under r/ holding a retained message, as a new subscriber receives them (they are queued for it
    with its SUBACK; a message published after the SUBACK comes after them)."""
    reader = RawClient(node.port, version=5)
    reader.connect(unique("reader-"))
    reader.send(enc_subscribe(1, [("r/#", 0)], version=5))
    reader.expect(SUBACK, 10)
    marker = RawClient(node.port, version=5)
    marker.connect(unique("marker-"))
    marker.publish("r/zz-marker", b"m", qos=1)
    marker.close()
    topics: list[str] = []
    while True:
        got = reader.expect(PUBLISH, 10)
        if got.topic == "r/zz-marker":
            break
        assert got.retain
        topics.append(got.topic)
    reader.close()
    return sorted(topics)


@pytest.mark.parametrize("version", [5, 4])
def test_a_client_keeps_at_most_its_quota_of_retained_messages(node: Broker, version: int) -> None:
    client = RawClient(node.port, version=version)
    client.connect(unique("setter-"))
    for n in range(3):
        assert client.publish(f"r/{version}-{n}", b"kept", qos=1, retain=True).reason_code in (None, 0)
    over = client.publish(f"r/{version}-3", b"over the quota", qos=1, retain=True)
    assert over.reason_code in ((0x97,) if version == 5 else (None, 0))  # 3.1.1: a plain PUBACK
    client.publish(f"r/{version}-1", b"replaced", qos=1, retain=True)  # a replacement is not a new one
    assert retained_topics(node) == [f"r/{version}-{n}" for n in range(3)]
    client.publish(f"r/{version}-0", b"", qos=1, retain=True)  # a delete always works, and makes room
    assert client.publish(f"r/{version}-3", b"now it fits", qos=1, retain=True).reason_code in (None, 0)
    assert retained_topics(node) == [f"r/{version}-{n}" for n in (1, 2, 3)]
    other = RawClient(node.port, version=version)
    other.connect(unique("other-"))
    assert other.publish(f"r/{version}-other", b"its own quota", qos=1, retain=True).reason_code in (None, 0)
    client.close()
    other.close()


def test_the_byte_quota_counts_topic_and_payload(node: Broker) -> None:
    client = RawClient(node.port, version=5)
    client.connect(unique("bytes-"))
    assert client.publish("r/big-1", b"x" * 1500, qos=1, retain=True).reason_code == 0
    assert client.publish("r/big-2", b"x" * 500, qos=1, retain=True).reason_code == 0x97  # 1,507 + 507 > 2,000
    # a replacement is judged by its own size: 7 + 1,994 > 2,000, 7 + 1,993 fits
    assert client.publish("r/big-1", b"x" * 1994, qos=1, retain=True).reason_code == 0x97
    assert client.publish("r/big-1", b"x" * 1993, qos=1, retain=True).reason_code == 0
    assert retained_topics(node) == ["r/big-1"]
    client.close()
