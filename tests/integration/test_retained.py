"""Retained messages: set / replace / delete, the retain flag on delivery, retain-as-published, retain handling,
and message expiry of retained messages."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import sub_options, unique

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def retained_on_subscribe(clients, broker, version, topic_filter, qos=1, expect=None, **kw):
    """Subscribe a fresh raw client to topic_filter; return the retained PUBLISHes it gets (marker-bounded:
    after the SUBACK, a live message on a separate marker topic ends the collection)."""
    sub = clients.raw(broker, version)
    marker = unique("retmark/")
    sub.subscribe((topic_filter, sub_options(qos, **kw) if version == 5 else qos), (marker, 0),
                  check=False)
    clients.raw(broker, version).publish(marker, b"m", qos=1)
    got = []
    for _ in range(100):  # bounded
        [p] = sub.recv_publishes(1)
        if p.topic == marker:
            break
        got.append(p)
    return got


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_set_replace_delete(broker, clients, version):
    topic = unique("ret/srd/")
    pub = clients.raw(broker, version)
    pub.publish(topic, b"first", qos=1, retain=True)
    got = retained_on_subscribe(clients, broker, version, topic)
    assert [(p.payload, p.retain) for p in got] == [(b"first", True)]

    pub.publish(topic, b"second", qos=1, retain=True)
    got = retained_on_subscribe(clients, broker, version, topic)
    assert [(p.payload, p.retain) for p in got] == [(b"second", True)], "retained message not replaced"

    pub.publish(topic, b"", qos=1, retain=True)
    got = retained_on_subscribe(clients, broker, version, topic)
    assert got == [], f"empty retained payload must delete the retained message: {got}"


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_empty_payload_not_forwarded_as_retained_to_new_subscribers(broker, clients, version):
    topic = unique("ret/empty/")
    pub = clients.raw(broker, version)
    pub.publish(topic, b"", qos=0, retain=True)  # deleting a non-existing retained message is fine
    assert retained_on_subscribe(clients, broker, version, topic) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_delivered_with_retain_flag_live_without(broker, clients, version):
    topic = unique("ret/flag/")
    pub = clients.raw(broker, version)
    pub.publish(topic, b"stored", qos=1, retain=True)
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=1)
    m = sub.get()
    assert (m.payload, m.retain) == (b"stored", True)
    pub.publish(topic, b"live-retained", qos=1, retain=True)
    m = sub.get()
    assert m.payload == b"live-retained"
    assert m.retain is False, "a message forwarded to an existing subscription has retain=0 (without RAP)"


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_qos_is_min_of_stored_and_subscription(broker, clients, version):
    topic = unique("ret/qos/")
    pub = clients.raw(broker, version)
    pub.publish(topic, b"q2", qos=2, retain=True)
    got0 = retained_on_subscribe(clients, broker, version, topic, qos=0)
    got1 = retained_on_subscribe(clients, broker, version, topic, qos=1)
    got2 = retained_on_subscribe(clients, broker, version, topic, qos=2)
    assert [(p.payload, p.qos) for p in got0 + got1 + got2] == [(b"q2", 0), (b"q2", 1), (b"q2", 2)]


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_matched_by_wildcard_subscription(broker, clients, version):
    base = unique("ret/wild/")
    pub = clients.raw(broker, version)
    for t in ("a", "b/c", "d/e/f"):
        pub.publish(f"{base}/{t}", t, qos=1, retain=True)
    pub.publish(f"{base}x/no", b"other", qos=1, retain=True)
    got = retained_on_subscribe(clients, broker, version, f"{base}/#")
    assert sorted((p.topic, p.payload) for p in got) == [
        (f"{base}/a", b"a"), (f"{base}/b/c", b"b/c"), (f"{base}/d/e/f", b"d/e/f")]
    got = retained_on_subscribe(clients, broker, version, f"{base}/+")
    assert [(p.topic, p.retain) for p in got] == [(f"{base}/a", True)]


def test_retain_as_published_v5(broker, clients):
    topic = unique("ret/rap/")
    rap = clients.paho(broker, 5)
    rap.subscribe(topic, qos=1, rap=True)
    norap = clients.paho(broker, 5)
    norap.subscribe(topic, qos=1, rap=False)
    pub = clients.paho(broker, 5)
    pub.publish(topic, b"r", qos=1, retain=True)
    pub.publish(topic, b"n", qos=1, retain=False)
    assert [(m.payload, m.retain) for m in rap.collect(2)] == [(b"r", True), (b"n", False)]
    assert [(m.payload, m.retain) for m in norap.collect(2)] == [(b"r", False), (b"n", False)]


def test_retain_handling_v5(broker, clients):
    topic = unique("ret/rh/")
    clients.raw(broker, 5).publish(topic, b"kept", qos=1, retain=True)

    # 0: sent at every subscribe, including a re-subscribe to an existing subscription
    sub = clients.raw(broker, 5)
    for _ in range(2):
        sub.subscribe((topic, sub_options(1, rh=0)), check=False)
        [p] = sub.recv_publishes(1)
        assert (p.payload, p.retain) == (b"kept", True)

    # 1: sent only if the subscription did not exist
    sub = clients.raw(broker, 5)
    sub.subscribe((topic, sub_options(1, rh=1)), check=False)
    [p] = sub.recv_publishes(1)
    assert (p.payload, p.retain) == (b"kept", True)
    sub.subscribe((topic, sub_options(1, rh=1)), check=False)
    sub.assert_silent(0.4)

    # 2: never sent
    sub = clients.raw(broker, 5)
    sub.subscribe((topic, sub_options(1, rh=2)), check=False)
    sub.assert_silent(0.4)
    assert retained_on_subscribe(clients, broker, 5, topic, rh=2) == []


def test_retained_message_expiry_v5(broker, clients):
    topic = unique("ret/exp/")
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"short-lived", qos=1, retain=True, props={"message_expiry_interval": 1})
    got = retained_on_subscribe(clients, broker, 5, topic)
    assert [p.payload for p in got] == [b"short-lived"]
    assert got[0].props.get("message_expiry_interval") in (0, 1), f"{got[0]!r}"
    time.sleep(2.0)  # let the 1 s message expiry pass (protocol timer, not synchronisation)
    got = retained_on_subscribe(clients, broker, 5, topic)
    assert got == [], f"expired retained message delivered: {got}"


def test_retained_properties_preserved_v5(broker, clients):
    topic = unique("ret/props/")
    pub = clients.raw(broker, 5)
    props = {"content_type": "application/json", "user_property": [("k", "v")],
             "response_topic": "resp/x", "correlation_data": b"\x01\x02", "payload_format_indicator": 1}
    pub.publish(topic, b'{"a":1}', qos=1, retain=True, props=props)
    [p] = retained_on_subscribe(clients, broker, 5, topic)
    for k, v in props.items():
        assert p.props.get(k) == v, f"{k}: {p.props.get(k)!r} != {v!r}"
