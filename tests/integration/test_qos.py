"""QoS 0/1/2 in both directions, packet identifiers, QoS downgrade, exactly-once, redelivery on reconnect."""

from __future__ import annotations

import pytest

from tests.integration.clients import (
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    UNSUBACK,
    enc_ack,
    enc_publish,
    enc_unsubscribe,
    unique,
)
from tests.integration.persistent_sessions import persistent

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


@pytest.mark.parametrize("version", VERSIONS)
def test_paho_roundtrip_each_qos(broker, clients, version):
    topic = unique("qos/rt/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=2)
    pub = clients.paho(broker, version)
    for qos in (0, 1, 2):
        pub.publish(topic, f"q{qos}".encode(), qos=qos)
        m = sub.get()
        assert (m.topic, m.payload, m.qos) == (topic, f"q{qos}".encode(), qos)


@pytest.mark.parametrize("version", VERSIONS)
def test_qos_downgraded_to_subscription_qos(broker, clients, version):
    topic = unique("qos/down/")
    subs = {}
    for sq in (0, 1, 2):
        subs[sq] = clients.paho(broker, version)
        subs[sq].subscribe(topic, qos=sq)
    pub = clients.paho(broker, version)
    for pq in (0, 1, 2):
        pub.publish(topic, f"p{pq}".encode(), qos=pq)
        for sq, s in subs.items():
            m = s.get()
            assert m.payload == f"p{pq}".encode()
            assert m.qos == min(pq, sq), f"published QoS {pq}, subscribed QoS {sq}: delivered with QoS {m.qos}"


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_inbound_acks_carry_packet_ids(broker, clients, version):
    c = clients.raw(broker, version)
    for pid in (1, 77, 65535):
        c.send(enc_publish("qos/in/1", b"x", qos=1, packet_id=pid, version=version))
        ack = c.expect(PUBACK)
        assert ack.packet_id == pid and ack.reason_code in (0, 0x10), f"{ack!r}"
    for pid in (2, 65534):
        c.send(enc_publish("qos/in/2", b"y", qos=2, packet_id=pid, version=version))
        rec = c.expect(PUBREC)
        assert rec.packet_id == pid and rec.reason_code in (0, 0x10), f"{rec!r}"
        c.send(enc_ack(PUBREL, pid, version))
        comp = c.expect(PUBCOMP)
        assert comp.packet_id == pid and comp.reason_code == 0, f"{comp!r}"


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_outbound_qos1_packet_ids(broker, clients, version):
    topic = unique("qos/out1/")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, version)
    for i in range(5):
        pub.publish(topic, f"m{i}", qos=1)
    got = sub.recv_publishes(5, ack=False)
    assert [p.payload for p in got] == [f"m{i}".encode() for i in range(5)]
    ids = [p.packet_id for p in got]
    assert all(p.qos == 1 and not p.dup for p in got), got
    assert all(i and 1 <= i <= 65535 for i in ids), ids
    assert len(set(ids)) == 5, f"in-flight messages must have distinct packet ids: {ids}"
    for p in got:
        sub.ack(p)
    # after the acks, the broker sends nothing more and the connection is healthy
    assert sub.is_open(2)


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_outbound_qos0_has_no_packet_id(broker, clients, version):
    topic = unique("qos/out0/")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, qos=0)
    pub = clients.raw(broker, version)
    pub.publish(topic, b"zero", qos=2)
    [p] = sub.recv_publishes(1)
    assert p.qos == 0 and p.packet_id is None and p.payload == b"zero"


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_outbound_qos2_flow(broker, clients, version):
    topic = unique("qos/out2/")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, version)
    pub.publish(topic, b"exactly-once", qos=2)
    p = sub.expect(PUBLISH)
    assert p.qos == 2 and p.packet_id and p.payload == b"exactly-once"
    sub.send(enc_ack(PUBREC, p.packet_id, version))
    rel = sub.expect(PUBREL)
    assert rel.packet_id == p.packet_id and rel.flags == 0x02, f"{rel!r} flags {rel.flags}"
    sub.send(enc_ack(PUBCOMP, p.packet_id, version))
    sub.assert_silent(0.3)
    assert sub.is_open(2)


@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_duplicate_publish_before_pubrel_delivered_once(broker, clients, version):
    topic = unique("qos/dup2/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, version)
    pid = 5
    pub.send(enc_publish(topic, b"once", qos=2, packet_id=pid, version=version))
    assert pub.expect(PUBREC).packet_id == pid
    # re-send with DUP before releasing (mosquitto 2.0.11 tolerates one re-send, not two)
    pub.send(enc_publish(topic, b"once", qos=2, dup=True, packet_id=pid, version=version))
    rec = pub.expect(PUBREC)
    assert rec.packet_id == pid, f"{rec!r}"
    pub.send(enc_ack(PUBREL, pid, version))
    assert pub.expect(PUBCOMP).packet_id == pid
    # marker: same topic, same QoS, same publisher -> ordered after the message above
    pub.publish(topic, b"marker", qos=2, packet_id=6)
    before = sub.until_marker(lambda m: m.payload == b"marker")
    assert [m.payload for m in before] == [b"once"], (
        f"QoS 2 message re-sent with DUP before PUBREL must be delivered exactly once: "
        f"{[m.payload for m in before]}")


@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_packet_id_reusable_after_pubcomp(broker, clients, version):
    topic = unique("qos/reuse/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, version)
    pub.publish(topic, b"first", qos=2, packet_id=9)
    pub.publish(topic, b"second", qos=2, packet_id=9)
    got = sub.collect(2)
    assert [m.payload for m in got] == [b"first", b"second"]


@pytest.mark.parametrize("version", VERSIONS)
def test_qos1_order_preserved(broker, clients, version):
    topic = unique("qos/order/")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, version)
    n = 60
    for i in range(n):  # pipelined: all PUBLISHes first, then the PUBACKs
        pub.send(enc_publish(topic, f"{i}", qos=1, packet_id=i + 1, version=version))
    acked = sorted(pub.expect(PUBACK).packet_id for _ in range(n))
    assert acked == list(range(1, n + 1))
    got = sub.recv_publishes(n)
    assert [int(p.payload) for p in got] == list(range(n))


@pytest.mark.parametrize("version", VERSIONS)
def test_unsubscribe_stops_delivery(broker, clients, version):
    topic = unique("qos/unsub/")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, topic + "-marker", qos=1)
    sub.send(enc_unsubscribe(42, [topic], version))
    ack = sub.expect(UNSUBACK)
    assert ack.packet_id == 42
    if version == 5:
        assert ack.reason_codes == [0x00], f"{ack!r}"
    pub = clients.raw(broker, version)
    pub.publish(topic, b"gone", qos=1)
    pub.publish(topic + "-marker", b"m", qos=1)
    [p] = sub.recv_publishes(1)
    assert p.topic == topic + "-marker", f"got {p!r} after UNSUBSCRIBE"


# ------------------------------------------------------------------------------------ redelivery on reconnect


@pytest.mark.parametrize("version", VERSIONS)
def test_unacked_qos1_redelivered_with_dup_and_same_ids(broker, clients, version):
    topic = unique("redel/q1/")
    cid = unique("redel1-")
    sub = clients.raw(broker, version, cid, **persistent(version))
    sub.subscribe(topic, qos=1)
    pub = clients.raw(broker, version)
    for i in range(3):
        pub.publish(topic, f"r{i}", qos=1)
    first = sub.recv_publishes(3, ack=False)
    assert not any(p.dup for p in first)
    sub.close()  # no PUBACKs, no DISCONNECT

    sub2 = clients.raw(broker, version, connect=False)
    ack = sub2.connect(cid, **persistent(version))
    assert ack.session_present
    again = sub2.recv_publishes(3, ack=False)
    assert [(p.payload, p.packet_id) for p in again] == [(p.payload, p.packet_id) for p in first], (
        f"first delivery {first}, redelivery {again}")
    assert all(p.dup and p.qos == 1 for p in again), f"redelivered PUBLISH must have DUP=1: {again}"
    for p in again:
        sub2.ack(p)
    sub2.assert_silent(0.3)


@pytest.mark.parametrize("version", VERSIONS)
def test_unacked_qos2_publish_redelivered(broker, clients, version):
    topic = unique("redel/q2p/")
    cid = unique("redel2p-")
    sub = clients.raw(broker, version, cid, **persistent(version))
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, version)
    pub.publish(topic, b"q2", qos=2)
    [p] = sub.recv_publishes(1, ack=False)
    sub.close()
    sub2 = clients.raw(broker, version, connect=False)
    assert sub2.connect(cid, **persistent(version)).session_present
    [again] = sub2.recv_publishes(1, ack=False)
    assert (again.payload, again.packet_id, again.qos, again.dup) == (b"q2", p.packet_id, 2, True), f"{again!r}"
    sub2.send(enc_ack(PUBREC, again.packet_id, version))
    rel = sub2.expect(PUBREL)
    assert rel.packet_id == p.packet_id
    sub2.send(enc_ack(PUBCOMP, rel.packet_id, version))
    sub2.assert_silent(0.3)


@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_pubrel_resent_after_reconnect(broker, clients, version):
    topic = unique("redel/q2r/")
    cid = unique("redel2r-")
    sub = clients.raw(broker, version, cid, **persistent(version))
    sub.subscribe(topic, qos=2)
    pub = clients.raw(broker, version)
    pub.publish(topic, b"q2r", qos=2)
    p = sub.expect(PUBLISH)
    sub.send(enc_ack(PUBREC, p.packet_id, version))
    rel = sub.expect(PUBREL)
    assert rel.packet_id == p.packet_id
    sub.close()  # no PUBCOMP

    sub2 = clients.raw(broker, version, connect=False)
    assert sub2.connect(cid, **persistent(version)).session_present
    first = sub2.recv(5)
    assert first.type == PUBREL and first.packet_id == p.packet_id, (
        f"expected the PUBREL for packet id {p.packet_id} to be re-sent, got {first!r}")
    sub2.send(enc_ack(PUBCOMP, p.packet_id, version))
    sub2.assert_silent(0.3)  # in particular: the PUBLISH is not delivered again


def test_subscribe_several_filters_one_packet(broker, clients):
    for version in (4, 5):
        sub = clients.raw(broker, version)
        b = unique("multi")
        ack = sub.subscribe((f"{b}/a", 0), (f"{b}/b", 1), (f"{b}/c", 2))
        assert ack.reason_codes == [0, 1, 2]
        pub = clients.raw(broker, version)
        for t in ("a", "b", "c"):
            pub.publish(f"{b}/{t}", t, qos=2)
        got = sub.recv_publishes(3)
        assert sorted((p.topic[-1], p.qos) for p in got) == [("a", 0), ("b", 1), ("c", 2)]


def test_unsubscribe_unknown_filter_v5(broker, clients):
    sub = clients.raw(broker, 5)
    sub.subscribe(unique("known/"), qos=1)
    sub.send(enc_unsubscribe(9, [unique("never/")], 5))
    ack = sub.expect(UNSUBACK)
    assert ack.packet_id == 9 and ack.reason_codes == [0x11], f"expected 0x11 (no subscription existed): {ack!r}"
