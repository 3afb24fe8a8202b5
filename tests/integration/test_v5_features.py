"""MQTT 5.0 features: no-local, subscription identifiers, topic aliases from the client, properties passed
through unchanged, request/response, the client's maximum packet size."""

from __future__ import annotations

import pytest
from paho.mqtt.packettypes import PacketTypes

from tests.integration.clients import (
    DISCONNECT,
    PUBLISH,
    enc_publish,
    paho_props,
    prop,
    sub_options,
    unique,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker


def test_no_local_v5(broker, clients):
    b = unique("nl")
    a = clients.paho(broker, 5)
    a.subscribe(f"{b}/nolocal", qos=1, no_local=True)
    a.subscribe(f"{b}/local", qos=1, no_local=False)
    a.subscribe(f"{b}-marker", qos=1)
    other = clients.paho(broker, 5)
    a.publish(f"{b}/nolocal", b"own-nolocal", qos=1)
    a.publish(f"{b}/local", b"own-local", qos=1)
    other.publish(f"{b}/nolocal", b"other-nolocal", qos=1)
    # markers from both publishers: each ends that publisher's sequence
    a.publish(f"{b}-marker", b"ma", qos=1)
    other.publish(f"{b}-marker", b"mo", qos=1)
    got = a.until_marker(f"{b}-marker")
    got += a.until_marker(f"{b}-marker")
    payloads = sorted(m.payload for m in got)
    assert payloads == [b"other-nolocal", b"own-local"], payloads


def test_subscription_identifiers_delivered_v5(broker, clients):
    b = unique("sid")
    sub = clients.raw(broker, 5)
    sub.subscribe((f"{b}/a", 1), props={"subscription_identifier": 7})
    sub.subscribe((f"{b}/#", 1), props={"subscription_identifier": 9})
    sub.subscribe((f"{b}/c", 1))  # no identifier
    pub = clients.raw(broker, 5)

    def ids_for(topic):
        pub.publish(topic, b"x", qos=1)
        copies = sub.recv_publishes(1)
        try:
            copies += sub.recv_publishes(1, timeout=0.4)
        except AssertionError:
            pass
        assert all(c.topic == topic for c in copies), copies
        return copies, sorted(i for c in copies for i in c.props.get("subscription_identifier", []))

    copies, ids = ids_for(f"{b}/a")
    assert ids == [7, 9], f"identifiers of both matching subscriptions expected: {copies}"
    copies, ids = ids_for(f"{b}/b")
    assert ids == [9], copies
    assert len(copies) == 1
    copies, ids = ids_for(f"{b}/c")
    assert ids == [9], f"the subscription without identifier adds none: {copies}"
    print(f"subscription identifiers with overlap: {len(copies)} copies")


def test_subscription_identifier_replaced_on_resubscribe_v5(broker, clients):
    b = unique("sidr")
    sub = clients.raw(broker, 5)
    sub.subscribe((b, 1), props={"subscription_identifier": 3})
    sub.subscribe((b, 1), props={"subscription_identifier": 4})
    clients.raw(broker, 5).publish(b, b"x", qos=1)
    [p] = sub.recv_publishes(1)
    assert p.props.get("subscription_identifier") == [4], f"{p!r}"
    sub.assert_silent(0.3)


def test_paho_subscription_identifier_v5(broker, clients):
    b = unique("sidp")
    sub = clients.paho(broker, 5)
    sub.subscribe(b, qos=1, sub_id=12345)
    clients.paho(broker, 5).publish(b, b"x", qos=1)
    m = sub.get()
    assert prop(m, "SubscriptionIdentifier") == [12345]


def test_topic_alias_from_client_v5(broker, clients):
    b = unique("ta")
    sub = clients.raw(broker, 5)
    sub.subscribe((f"{b}/#", 1))
    pub = clients.raw(broker, 5, connect=False)
    ack = pub.connect(unique("tapub-"))
    tam = ack.props.get("topic_alias_maximum", 0)
    assert tam >= 1, f"broker must accept topic aliases from clients (CONNACK topic alias maximum): {ack!r}"
    pub.publish(f"{b}/x", b"p1", qos=1, props={"topic_alias": 1})
    pub.publish("", b"p2", qos=1, props={"topic_alias": 1})
    pub.publish(f"{b}/y", b"p3", qos=1, props={"topic_alias": 1})  # re-map alias 1
    pub.publish("", b"p4", qos=1, props={"topic_alias": 1})
    got = sub.recv_publishes(4)
    assert [(p.topic, p.payload) for p in got] == [
        (f"{b}/x", b"p1"), (f"{b}/x", b"p2"), (f"{b}/y", b"p3"), (f"{b}/y", b"p4")]
    # the client's alias must not leak to subscribers
    assert all("topic_alias" not in p.props or p.topic for p in got), got


@pytest.mark.parametrize("case", ["alias-0", "alias-above-maximum", "unknown-alias"])
def test_invalid_topic_alias_disconnects_v5(broker, clients, case):
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(unique("tabad-"))
    tam = ack.props.get("topic_alias_maximum", 0)
    if case == "alias-0":
        pkt = enc_publish("ta/bad", b"x", qos=1, packet_id=1, props={"topic_alias": 0}, version=5)
        allowed = {0x81, 0x82, 0x94}  # [MQTT-3.3.2-8]; the spec names no specific reason code for alias 0
    elif case == "alias-above-maximum":
        pkt = enc_publish("ta/bad", b"x", qos=1, packet_id=1, props={"topic_alias": tam + 1}, version=5)
        allowed = {0x94}
    else:
        pkt = enc_publish("", b"x", qos=1, packet_id=1, props={"topic_alias": 1}, version=5)
        allowed = {0x82, 0x94}
    c.send(pkt)
    got = c.wait_closed(5)
    assert got and got[-1].type == DISCONNECT and got[-1].reason_code in allowed, (
        f"{case}: expected DISCONNECT with reason in {[hex(x) for x in allowed]}, got {got}")


def test_properties_passed_through_unchanged_v5(broker, clients):
    b = unique("props")
    sub = clients.paho(broker, 5)
    sub.subscribe(b, qos=1)
    user = [("z", "1"), ("a", "2"), ("z", "3"), ("ключ", "значение")]  # order and duplicates matter
    props = paho_props(PacketTypes.PUBLISH, UserProperty=user, ContentType="application/x-test; v=1",
                       ResponseTopic=f"{b}/reply", CorrelationData=b"\x00\xffcorr",
                       PayloadFormatIndicator=1)
    clients.paho(broker, 5).publish(b, "ünïcode".encode(), qos=1, props=props)
    m = sub.get()
    assert m.payload == "ünïcode".encode()
    assert prop(m, "UserProperty") == user
    assert prop(m, "ContentType") == "application/x-test; v=1"
    assert prop(m, "ResponseTopic") == f"{b}/reply"
    assert prop(m, "CorrelationData") == b"\x00\xffcorr"
    assert prop(m, "PayloadFormatIndicator") == 1


def test_properties_pass_through_raw_qos2_v5(broker, clients):
    b = unique("propsraw")
    sub = clients.raw(broker, 5)
    sub.subscribe((b, 2))
    props = {"user_property": [("k", "v"), ("k", "v")], "content_type": "", "correlation_data": b"",
             "response_topic": "r"}
    clients.raw(broker, 5).publish(b, b"p", qos=2, props=props)
    [p] = sub.recv_publishes(1)
    for k, v in props.items():
        assert p.props.get(k) == v, f"{k}: {p.props.get(k)!r} != {v!r} in {p!r}"


def test_request_response_v5(broker, clients):
    b = unique("rr")
    responder = clients.raw(broker, 5)
    responder.subscribe((f"{b}/req", 1))
    requester = clients.raw(broker, 5)
    requester.subscribe((f"{b}/resp/me", 1))
    requester.publish(f"{b}/req", b"question", qos=1,
                      props={"response_topic": f"{b}/resp/me", "correlation_data": b"id-42"})
    [req] = responder.recv_publishes(1)
    responder.publish(req.props["response_topic"], b"answer", qos=1,
                      props={"correlation_data": req.props["correlation_data"]})
    [resp] = requester.recv_publishes(1)
    assert (resp.payload, resp.props.get("correlation_data")) == (b"answer", b"id-42")


def test_client_maximum_packet_size_respected_v5(broker, clients):
    b = unique("mps")
    sub = clients.raw(broker, 5, props={"maximum_packet_size": 128})
    sub.subscribe((b, 1))
    pub = clients.raw(broker, 5)
    pub.publish(b, b"x" * 300, qos=1)  # too large for the subscriber: discarded for it
    pub.publish(b, b"small", qos=1)
    p = sub.recv(5)
    assert p.type == PUBLISH and p.payload == b"small", f"{p!r}"
    assert len(p.raw) <= 128
    sub.assert_silent(0.3)


def test_retain_available_and_wildcards_advertised_consistently_v5(broker, clients):
    """Whatever the CONNACK advertises must be true: wildcard / shared / subscription-id support."""
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(unique("caps-"))
    b = unique("caps")
    checks = [("wildcard_subscription_available", f"{b}/#"), ("shared_subscription_available", f"$share/g/{b}")]
    for propname, flt in checks:
        rc = c.subscribe((flt, sub_options(1)), check=False).reason_codes[0]
        if ack.props.get(propname, 1):
            assert rc == 1, f"{propname} advertised but SUBSCRIBE {flt} got 0x{rc:02x}"
        else:
            assert rc >= 0x80, f"{propname}=0 but SUBSCRIBE {flt} granted"


@pytest.mark.parametrize("extra", [b"", b"y"], ids=["exactly-the-maximum", "one-byte-more"])
def test_client_maximum_packet_size_is_exact_v5(broker, clients, extra):
    """A PUBLISH of exactly the client's Maximum Packet Size is sent, one byte more is not (and the session goes
    on with the next message). QoS 1, topic of 10 bytes, no properties: 7 + 10 + payload bytes on the wire."""
    topic = unique("mpx")[:10].ljust(10, "z")
    sub = clients.raw(broker, 5, props={"maximum_packet_size": 100})
    sub.subscribe((topic, 1))
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"x" * 83 + extra, qos=1)
    pub.publish(topic, b"next", qos=1)
    got = sub.recv_publishes(1 if extra else 2)
    if extra:
        assert [p.payload for p in got] == [b"next"], got
    else:
        assert [len(p.raw) for p in got] == [100, 7 + 10 + 4], got
    sub.assert_silent(0.3)


@pytest.mark.vmqpy_only("mosquitto 2.0.11 sends no topic aliases to clients")
def test_topic_aliases_to_a_client_that_allows_them_v5(broker, clients):
    """A subscriber announcing Topic Alias Maximum 2 gets the topic with an alias the first time, then only the
    alias; a third topic takes the least recently used alias. Read back through the aliases, every topic is
    the one published."""
    b = unique("tao") + "/a/fairly/long/topic/name/that/aliases/shorten"
    topics = [f"{b}/1", f"{b}/2", f"{b}/1", f"{b}/3", f"{b}/1", f"{b}/3", f"{b}/2"]
    sub = clients.raw(broker, 5, props={"topic_alias_maximum": 2})
    sub.subscribe((f"{b}/#", 1))
    plain = clients.raw(broker, 5)  # announces no Topic Alias Maximum: never gets an alias
    plain.subscribe((f"{b}/#", 1))
    old = clients.raw(broker, 4)
    old.subscribe((f"{b}/#", 1))
    pub = clients.raw(broker, 5)
    for i, topic in enumerate(topics):
        pub.publish(topic, f"{i}", qos=1)
    got = sub.recv_publishes(len(topics))
    wire = [(p.topic, p.props.get("topic_alias")) for p in got]
    assert wire == [(f"{b}/1", 1), (f"{b}/2", 2), ("", 1), (f"{b}/3", 2), ("", 1), ("", 2), (f"{b}/2", 1)], wire
    mapping: dict[int, str] = {}
    read = []
    for p in got:
        alias = p.props["topic_alias"]
        if p.topic:
            mapping[alias] = p.topic
        read.append(mapping[alias])
    assert read == topics
    for other in (plain, old):
        assert [(p.topic, p.props.get("topic_alias")) for p in other.recv_publishes(len(topics))] == [
            (t, None) for t in topics]


@pytest.mark.vmqpy_only("mosquitto 2.0.11 sends no topic aliases to clients")
def test_maximum_packet_size_counts_the_topic_alias_v5(broker, clients):
    """A client with Topic Alias Maximum and Maximum Packet Size 100: the first PUBLISH of a topic carries the
    topic and the alias, so the node keeps room for the alias (4 bytes): 7 + 10 + 79 = 96 bytes without the
    alias is sent (99 with it), 97 is not."""
    topic = unique("mpa")[:10].ljust(10, "z")
    sub = clients.raw(broker, 5, props={"maximum_packet_size": 100, "topic_alias_maximum": 4})
    sub.subscribe((topic, 1))
    pub = clients.raw(broker, 5)
    pub.publish(topic, b"x" * 80, qos=1)  # 97 bytes without the alias: not sent
    pub.publish(topic, b"x" * 79, qos=1)
    [got] = sub.recv_publishes(1)
    assert len(got.payload) == 79 and len(got.raw) <= 100 and got.props.get("topic_alias") == 1, got
    sub.assert_silent(0.3)
