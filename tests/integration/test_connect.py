"""CONNECT / CONNACK: sessions, session present, client-id takeover, empty client ids, protocol levels."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import (
    CONNACK,
    DISCONNECT,
    PINGRESP,
    RawClient,
    enc_connect,
    enc_pingreq,
    unique,
)
from tests.integration.conftest import assert_serving

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def test_session_present_311_clean_session(broker, clients):
    cid = unique("cs311-")
    c = clients.raw(broker, 4, cid, clean=False)
    c.subscribe("cs/x", qos=1)
    c.disconnect()
    c2 = clients.raw(broker, 4, connect=False)
    ack = c2.connect(cid, clean=False)
    assert ack.session_present, f"cleansession=0 reconnect: {ack!r}"
    c2.disconnect()
    c3 = clients.raw(broker, 4, connect=False)
    ack = c3.connect(cid, clean=True)
    assert not ack.session_present, f"cleansession=1 must give session present 0: {ack!r}"
    c3.disconnect()
    c4 = clients.raw(broker, 4, connect=False)
    ack = c4.connect(cid, clean=False)
    assert not ack.session_present, f"the cleansession=1 connection discarded the session: {ack!r}"
    c4.disconnect()


def test_first_connect_311_no_session_present(broker, clients):
    c = clients.raw(broker, 4, connect=False)
    ack = c.connect(unique("fresh-"), clean=False)
    assert not ack.session_present


def test_session_present_v5_clean_start_and_expiry(broker, clients):
    cid = unique("cs5-")
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=True, props={"session_expiry_interval": 60})
    assert not ack.session_present
    c.subscribe("cs5/x", qos=1)
    c.disconnect()

    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert ack.session_present, f"clean start 0 within session expiry: {ack!r}"
    c.disconnect()

    # resume, but with session expiry 0: the session ends when this connection closes
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=False)
    assert ack.session_present, f"{ack!r}"
    c.disconnect()

    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert not ack.session_present, f"session expiry 0 on the previous connection: {ack!r}"
    c.disconnect()

    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=True, props={"session_expiry_interval": 60})
    assert not ack.session_present, f"clean start 1 always gives session present 0: {ack!r}"
    c.disconnect()


def test_session_expiry_interval_elapses_v5(broker, clients):
    cid = unique("exp5-")
    c = clients.raw(broker, 5, connect=False)
    c.connect(cid, clean=True, props={"session_expiry_interval": 1})
    c.subscribe("exp5/x", qos=1)
    c.disconnect()
    time.sleep(2.5)  # let the 1 s session expiry interval elapse (protocol timer, not synchronisation)
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert not ack.session_present, f"session should have expired after 1 s: {ack!r}"


def test_session_expiry_disconnect_can_change_it_v5(broker, clients):
    """DISCONNECT may set a session expiry > 0 when CONNECT had one > 0; the session then survives."""
    cid = unique("expd5-")
    c = clients.raw(broker, 5, connect=False)
    c.connect(cid, clean=True, props={"session_expiry_interval": 1})
    c.disconnect(reason=0, props={"session_expiry_interval": 600})
    time.sleep(1.5)  # longer than the original 1 s expiry
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert ack.session_present, f"DISCONNECT raised the session expiry to 600 s: {ack!r}"


@pytest.mark.parametrize("version", VERSIONS)
def test_client_id_takeover(broker, clients, version):
    cid = unique("take-")
    old = clients.raw(broker, version, cid)
    new = clients.raw(broker, version, connect=False)
    ack = new.connect(cid)
    assert ack.reason_code == 0
    got = old.wait_closed(5)
    if version == 4:
        assert got == [], f"3.1.1 has no server DISCONNECT, got {got}"
    else:
        assert all(p.type == DISCONNECT for p in got), f"only a DISCONNECT may precede the close: {got}"
    assert new.is_open(2), "the new connection must stay usable"


@pytest.mark.vmqpy_only("mosquitto 2.0.11 closes the old connection without DISCONNECT 0x8E "
                        "(added in 2.0.15, eclipse-mosquitto/mosquitto#2340)")
def test_client_id_takeover_v5_disconnect_0x8e(broker, clients):
    cid = unique("take8e-")
    old = clients.raw(broker, 5, cid)
    new = clients.raw(broker, 5, connect=False)
    new.connect(cid)
    got = old.wait_closed(5)
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, 0x8E)], (
        f"expected DISCONNECT reason 0x8E (session taken over) then close, got {got}")
    assert new.is_open(2)


@pytest.mark.parametrize("version", VERSIONS)
def test_takeover_keeps_persistent_session(broker, clients, version):
    """The new connection with clean=0 resumes the session of the connection it took over."""
    cid = unique("take2-")
    props = {"session_expiry_interval": 300} if version == 5 else None
    old = clients.raw(broker, version, cid, clean=False, props=props)
    old.subscribe("take2/t", qos=1)
    new = clients.raw(broker, version, connect=False)
    ack = new.connect(cid, clean=False, props=props)
    assert ack.session_present, f"{ack!r}"
    old.wait_closed(5)
    pub = clients.raw(broker, version)
    pub.publish("take2/t", b"after-takeover", qos=1)
    [m] = new.recv_publishes(1)
    assert m.payload == b"after-takeover"


def test_empty_client_id_v5_gets_assigned_id(broker, clients):
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect("", clean=True)
    assigned = ack.props.get("assigned_client_identifier")
    assert assigned, f"CONNACK must carry an assigned client identifier: {ack!r}"
    c2 = clients.raw(broker, 5, connect=False)
    ack2 = c2.connect("", clean=True)
    assert ack2.props.get("assigned_client_identifier") not in (None, assigned), "assigned ids must differ"
    assert c.is_open(2) and c2.is_open(2)


@pytest.mark.vmqpy_only("the text of the Reason String is vmqpy's")
def test_refused_v5_connect_says_why_in_a_reason_string(broker, clients):
    c = clients.raw(broker, 5, connect=False)
    ack = c.connect("auth-method", props={"authentication_method": "SCRAM-SHA-1"}, expect_rc=0x8C)
    assert ack.props.get("reason_string") == "enhanced authentication is not supported", ack
    assert not c.is_open(2)


def test_empty_client_id_311_clean_session_0_refused(broker, clients):
    c = clients.raw(broker, 4, connect=False)
    ack = c.connect("", clean=False, expect_rc=None)
    assert ack.reason_code == 2, f"expected CONNACK return code 2 (identifier rejected), got {ack!r}"
    assert not ack.session_present
    c.wait_closed(5)


def test_empty_client_id_311_clean_session_1_accepted(broker, clients):
    c = clients.raw(broker, 4, connect=False)
    ack = c.connect("", clean=True)
    assert ack.reason_code == 0
    assert c.is_open(2)
    assert_serving(broker)


def connect_with_level(client_id: str, level: int) -> bytes:
    b = bytearray(enc_connect(client_id, version=4))
    assert b[2:8] == b"\x00\x04MQTT" and b[8] == 4
    b[8] = level
    return bytes(b)


@pytest.mark.parametrize("level", [0, 2, 6, 255])
def test_unsupported_protocol_level_gets_connack_1(broker, level):
    """3.1.1 [MQTT-3.1.2-2]: the server MUST respond with CONNACK return code 1 and then disconnect."""
    c = RawClient(broker.port)
    try:
        c.send(connect_with_level(unique("lvl-"), level))
        got = c.wait_closed(5)
    finally:
        c.close()
    assert [p.raw for p in got] == [b"\x20\x02\x00\x01"], (
        f"expected CONNACK 20 02 00 01 (unacceptable protocol level) then close, got {got}")
    assert_serving(broker)


def test_wrong_protocol_name_closes(broker):
    c = RawClient(broker.port)
    try:
        c.send(enc_connect(unique("name-"), version=4, protocol_name="MQTX"))
        got = c.wait_closed(5)
    finally:
        c.close()
    assert all(p.type == CONNACK and p.reason_code != 0 for p in got), f"got {got}"
    assert_serving(broker)


def test_mqtt_31_mqisdp_accepted_or_refused_cleanly(broker):
    """Protocol level 3 (MQIsdp): accepted (rc 0) or refused with rc 1 — never a hang or a crash."""
    c = RawClient(broker.port, version=3)
    try:
        c.send(enc_connect(unique("v31-"), version=3))
        try:
            ack = c.expect(CONNACK, 5)
        except Exception:
            ack = None
        if ack is not None and ack.reason_code == 0:
            c.send(enc_pingreq())
            assert c.expect(PINGRESP, 5)
        else:
            c.wait_closed(5)
            assert ack is None or ack.reason_code == 1, f"{ack!r}"
    finally:
        c.close()
    assert_serving(broker)


@pytest.mark.parametrize("version", VERSIONS)
def test_paho_connect_session_present(broker, clients, version):
    cid = unique("pahosp-")
    kw = {"session_expiry": 300} if version == 5 else {}
    c = clients.paho(broker, version, cid, clean=False, connect=False, **kw)
    flags, _, _ = c.connect()
    assert not flags.session_present
    c.disconnect()
    c.stop()
    c2 = clients.paho(broker, version, cid, clean=False, connect=False, **kw)
    flags, _, _ = c2.connect()
    assert flags.session_present
