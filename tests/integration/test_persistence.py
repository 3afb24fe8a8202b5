"""Durability of sessions, subscriptions, queued messages and retained messages across a clean restart and a
`kill -9` of the node (same data dir, same port)."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.clients import PUBACK, PUBLISH, PUBREL, enc_ack, enc_publish, enc_subscribe, unique
from tests.integration.persistent_sessions import persistent

pytestmark = pytest.mark.integration

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]

KILL9 = pytest.mark.vmqpy_only("mosquitto only saves its state every autosave_interval and at shutdown; after "
                               "kill -9 it loses what it acknowledged since the last save")


def offline_subscriber(clients, broker, version, topic, qos=1):
    cid = unique("dur-")
    sub = clients.raw(broker, version, cid, **persistent(version, expiry=3600))
    sub.subscribe(topic, qos=qos)
    sub.disconnect()
    return cid


def reconnect(clients, broker, version, cid):
    sub = clients.raw(broker, version, connect=False)
    ack = sub.connect(cid, **persistent(version, expiry=3600))
    assert ack.session_present, f"session lost across the restart: {ack!r}"
    return sub


def stop_or_kill(broker, how: str) -> None:
    if how == "restart":
        rc = broker.stop()
        assert rc == 0, f"SIGTERM exit code {rc}"
    else:
        broker.kill9()
    broker.start()


# ------------------------------------------------------------------------------------------- clean restart


@pytest.mark.parametrize("version", VERSIONS)
def test_queued_messages_survive_clean_restart(broker, clients, version):
    topic = unique("dur/q/")
    cid = offline_subscriber(clients, broker, version, topic)
    pub = clients.raw(broker, version)
    for i in range(5):
        pub.publish(topic, f"{i}", qos=1)
    pub.close()
    stop_or_kill(broker, "restart")
    sub = reconnect(clients, broker, version, cid)
    got = sub.recv_publishes(5)
    assert [p.payload for p in got] == [b"0", b"1", b"2", b"3", b"4"]


@pytest.mark.parametrize("version", VERSIONS)
def test_subscription_survives_clean_restart(broker, clients, version):
    topic = unique("dur/s/")
    cid = offline_subscriber(clients, broker, version, topic)
    stop_or_kill(broker, "restart")
    sub = reconnect(clients, broker, version, cid)  # no new SUBSCRIBE
    clients.raw(broker, version).publish(topic, b"after-restart", qos=1)
    [p] = sub.recv_publishes(1)
    assert p.payload == b"after-restart"


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_survives_clean_restart(broker, clients, version):
    topic = unique("dur/r/")
    clients.raw(broker, version).publish(topic, b"kept", qos=1, retain=True)
    stop_or_kill(broker, "restart")
    sub = clients.raw(broker, version)
    sub.subscribe(topic, qos=1)
    [p] = sub.recv_publishes(1)
    assert (p.payload, p.retain) == (b"kept", True)


def test_clean_session_not_restored_after_restart(broker, clients):
    cid = unique("durc-")
    c = clients.raw(broker, 4, cid, clean=True)
    c.subscribe("dur/clean", qos=1)
    c.disconnect()
    stop_or_kill(broker, "restart")
    c2 = clients.raw(broker, 4, connect=False)
    assert not c2.connect(cid, clean=False).session_present


# ------------------------------------------------------------------------------------------------ kill -9


@KILL9
@pytest.mark.parametrize("version", VERSIONS)
def test_acked_qos1_messages_survive_kill9(broker, clients, version):
    topic = unique("dur/k9q/")
    cid = offline_subscriber(clients, broker, version, topic)
    pub = clients.raw(broker, version)
    n = 20
    for i in range(n):  # pipelined; every PUBACK is a promise
        pub.send(enc_publish(topic, f"{i}", qos=1, packet_id=i + 1, version=version))
    acked = {pub.expect(PUBACK).packet_id for _ in range(n)}
    assert acked == set(range(1, n + 1))
    broker.kill9()  # immediately after the last PUBACK
    broker.start()
    sub = reconnect(clients, broker, version, cid)
    got = sub.recv_publishes(n)
    assert [int(p.payload) for p in got] == list(range(n))
    sub.assert_silent(0.3)


@KILL9
@pytest.mark.parametrize("version", VERSIONS)
def test_subscription_survives_kill9(broker, clients, version):
    topic = unique("dur/k9s/")
    cid = unique("k9s-")
    sub = clients.raw(broker, version, cid, **persistent(version, expiry=3600))
    sub.subscribe(topic, qos=1)  # SUBACK received
    broker.kill9()
    sub.close()
    broker.start()
    sub = reconnect(clients, broker, version, cid)
    clients.raw(broker, version).publish(topic, b"after-kill", qos=1)
    [p] = sub.recv_publishes(1)
    assert p.payload == b"after-kill"


@KILL9
@pytest.mark.parametrize("version", VERSIONS)
def test_retained_survives_kill9(broker, clients, version):
    topic = unique("dur/k9r/")
    pub = clients.raw(broker, version)
    pub.publish(topic, b"v1", qos=1, retain=True)
    pub.publish(topic, b"v2", qos=1, retain=True)
    gone = unique("dur/k9r-del/")
    pub.publish(gone, b"x", qos=1, retain=True)
    pub.publish(gone, b"", qos=1, retain=True)  # deletion must be durable too
    broker.kill9()
    broker.start()
    sub = clients.raw(broker, version)
    sub.subscribe(topic, gone, qos=1)
    [p] = sub.recv_publishes(1)
    assert (p.topic, p.payload, p.retain) == (topic, b"v2", True)
    sub.assert_silent(0.4)


@pytest.mark.vmqpy_only("the replication log is vmqpy's")
def test_replication_log_keeps_the_lines_of_acknowledged_writes_through_kill9(broker, clients):
    """The Spark report reads the replication log: a line a killed node never wrote would show its write as never
    visible there. Lines used to wait up to a second in memory."""
    topics = [unique("dur/k9log/") for _ in range(3)]
    pub = clients.raw(broker, 5)
    for topic in topics:
        pub.publish(topic, b"logged", qos=1, retain=True)
    broker.kill9()  # immediately after the last PUBACK
    lines = [json.loads(line) for line in (broker.data_dir / "replication.log").read_text().splitlines()]
    written = {tuple(r["key"]) for r in lines if r["event"] == "md_write" and r.get("prefix") == "retain"}
    assert all(("", topic) in written for topic in topics), (topics, written)


@KILL9
@pytest.mark.parametrize("version", VERSIONS)
def test_inflight_qos1_redelivered_after_kill9(broker, clients, version):
    topic = unique("dur/k9i/")
    cid = unique("k9i-")
    sub = clients.raw(broker, version, cid, **persistent(version, expiry=3600))
    sub.subscribe(topic, qos=1)
    clients.raw(broker, version).publish(topic, b"unacked", qos=1)
    [p] = sub.recv_publishes(1, ack=False)
    broker.kill9()
    sub.close()
    broker.start()
    sub = reconnect(clients, broker, version, cid)
    [again] = sub.recv_publishes(1, ack=False)
    assert (again.payload, again.packet_id, again.dup) == (b"unacked", p.packet_id, True), f"{again!r}"
    sub.ack(again)


@KILL9
@pytest.mark.parametrize("version", VERSIONS)
def test_incoming_qos2_state_survives_kill9(broker, clients, version):
    """A QoS 2 message PUBRECed before the crash is delivered once, and the PUBREL after the restart is
    answered with PUBCOMP."""
    topic = unique("dur/k9q2/")
    sub_cid = offline_subscriber(clients, broker, version, topic, qos=2)
    pub_cid = unique("k9p-")
    pub = clients.raw(broker, version, pub_cid, **persistent(version, expiry=3600))
    pub.send(enc_publish(topic, b"once", qos=2, packet_id=77, version=version))
    pub.expect(5)  # PUBREC
    broker.kill9()
    pub.close()
    broker.start()
    pub = reconnect(clients, broker, version, pub_cid)
    pub.send(enc_ack(PUBREL, 77, version))
    comp = pub.expect(7)  # PUBCOMP
    assert comp.packet_id == 77
    sub = reconnect(clients, broker, version, sub_cid)
    got = sub.recv_publishes(1)
    assert got[0].payload == b"once"
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # drain PUBREL of the flow; no second PUBLISH
        try:
            p = sub.recv(0.3)
        except TimeoutError:
            break
        assert p.type != PUBLISH, f"delivered twice: {p!r}"
        sub.ack(p)


@pytest.mark.vmqpy_only("vmqpy's persistent_client_expiration accepts seconds; mosquitto's minimum unit is 1 hour")
def test_persistent_client_expiration_311(broker_factory, clients):
    broker = broker_factory(persistent_client_expiration="1s")
    cid = unique("pce-")
    c = clients.raw(broker, 4, cid, clean=False)
    c.send(enc_subscribe(1, [("pce/x", 1)], 4))
    c.expect(9)
    c.disconnect()
    c = clients.raw(broker, 4, connect=False)
    assert c.connect(cid, clean=False).session_present, "reconnect right away: session still there"
    c.disconnect()
    time.sleep(3.0)  # let the 1 s expiration pass (protocol timer, not synchronisation)
    c = clients.raw(broker, 4, connect=False)
    ack = c.connect(cid, clean=False)
    assert not ack.session_present, "persistent_client_expiration = 1s: the session should be gone after 3 s"
