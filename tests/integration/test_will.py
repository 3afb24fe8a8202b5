"""Keepalive enforcement and will messages (3.1.1 and 5.0, including the 5.0 will delay interval)."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import DISCONNECT, PINGRESP, enc_disconnect, enc_pingreq, unique

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(shared_broker):
    """Tests in this module share one broker per module (unique client ids and topics); see conftest."""
    return shared_broker

VERSIONS = [pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def will(topic: str, payload: bytes = b"gone", qos: int = 1, retain: bool = False, **props: int) -> dict:
    return {"topic": topic, "payload": payload, "qos": qos, "retain": retain, "props": props or None}


# ---------------------------------------------------------------------------------------------- keepalive

KEEPALIVE_TIMING = pytest.mark.vmqpy_only(
    "mosquitto 2.0.11 enforces keepalive lazily: a silent client with keepalive 1 s is closed after ~5.5 s, "
    "not within 1.5x")


@KEEPALIVE_TIMING
@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_silent_client_disconnected(broker, clients, version):
    """Closed, and not early. When exactly (1.5 x the keep alive) is checked with the time
    passed in by tests/unit/broker/machine/test_protocol.py::test_keepalive_expires_after_one_and_a_half_intervals."""
    c = clients.raw(broker, version, connect=False)
    c.connect(unique("ka-"), keepalive=1)
    t0 = time.monotonic()
    got = c.wait_closed(6)
    elapsed = time.monotonic() - t0
    assert elapsed >= 1.0, f"closed after {elapsed:.2f}s; keepalive 1 s allows 1.5 s of silence"
    if version == 5:
        assert all(p.type == DISCONNECT and p.reason_code == 0x8D for p in got), (
            f"only DISCONNECT 0x8D (keep alive timeout) may precede the close: {got}")
    else:
        assert got == [], got


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_pings_keep_connection_open(broker, clients, version):
    c = clients.raw(broker, version, connect=False)
    c.connect(unique("kap-"), keepalive=1)
    deadline = time.monotonic() + 2.6
    pings = 0
    while time.monotonic() < deadline:  # bounded: ~6 iterations
        c.send(enc_pingreq())
        assert c.expect(PINGRESP, 1.0).type == PINGRESP
        pings += 1
        try:
            p = c.recv(0.5)  # nothing else is expected; this is the pacing of the pings
            raise AssertionError(f"unexpected {p!r}")
        except TimeoutError:
            pass
    assert pings >= 4
    assert c.is_open(1.0), "connection with regular PINGREQs must stay open past 1.5x keepalive"


@KEEPALIVE_TIMING
@pytest.mark.parametrize("version", VERSIONS)
def test_will_published_on_keepalive_expiry(broker, clients, version):
    """The will comes, and not early. When exactly: the keep alive by
    tests/unit/broker/machine/test_protocol.py::test_keepalive_expires_after_one_and_a_half_intervals, the will at
    close by tests/unit/broker/core/test_wills.py::test_a_will_without_delay_is_published_at_close."""
    topic = unique("will/ka/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, version, connect=False)
    c.connect(unique("kaw-"), keepalive=1, will=will(topic, b"ka-expired"))
    t0 = time.monotonic()
    m = sub.get(6)
    elapsed = time.monotonic() - t0
    assert (m.topic, m.payload, m.qos) == (topic, b"ka-expired", 1)
    assert elapsed >= 1.0, f"will arrived {elapsed:.2f}s after CONNACK, keepalive 1 s"


# ---------------------------------------------------------------------------------------------- will


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("will_qos", [0, 1, 2])
def test_will_on_abnormal_close(broker, clients, version, will_qos):
    topic = unique("will/ab/")
    sub = clients.paho(broker, version)
    sub.subscribe(topic, qos=2)
    c = clients.raw(broker, version, will=will(topic, b"abnormal", qos=will_qos))
    c.close()  # TCP close without DISCONNECT
    m = sub.get(5)
    assert (m.topic, m.payload, m.qos, m.retain) == (topic, b"abnormal", will_qos, False)


@pytest.mark.parametrize("version", VERSIONS)
def test_no_will_on_normal_disconnect(broker, clients, version):
    topic = unique("will/norm/")
    marker = topic + "-marker"
    sub = clients.paho(broker, version)
    sub.subscribe(marker, qos=1)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, version, will=will(topic, b"must-not-appear"))
    c.send(b"\xe0\x00")  # DISCONNECT (5.0: reason 0x00 by omission)
    c.wait_closed(5)  # the broker has processed the DISCONNECT when it closes the connection
    pub = clients.raw(broker, version)
    pub.publish(marker, b"m", qos=1)
    before = sub.until_marker(marker)
    assert before == [], f"will published after a normal DISCONNECT: {[(x.topic, x.payload) for x in before]}"
    sub.assert_no_message(0.3)


def test_disconnect_with_will_message_reason_0x04_v5(broker, clients):
    topic = unique("will/04/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, 5, will=will(topic, b"by-request"))
    c.disconnect(reason=0x04)
    m = sub.get(5)
    assert (m.topic, m.payload) == (topic, b"by-request")


@pytest.mark.parametrize("version", VERSIONS)
def test_will_retained(broker, clients, version):
    topic = unique("will/ret/")
    c = clients.raw(broker, version, will=will(topic, b"retained-will", retain=True))
    c.close()
    late = clients.paho(broker, version, connect=False)

    def got_retained():
        late.connect()
        late.subscribe(topic, qos=1)
        try:
            return late.get(0.5)
        except AssertionError:
            late.disconnect()
            return None

    deadline = time.monotonic() + 5
    m = None
    while m is None and time.monotonic() < deadline:  # bounded polling: the will is published asynchronously
        m = got_retained()
    assert m is not None, "retained will never stored"
    assert (m.payload, m.retain) == (b"retained-will", True)


def test_will_delay_interval_v5(broker, clients):
    """The delayed will comes, and not early. When exactly (at the delay, not 1 ms before) is checked by
    tests/unit/broker/core/test_wills.py::test_a_delayed_will_is_published_when_its_delay_is_over."""
    topic = unique("will/delay/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, 5, clean=True, props={"session_expiry_interval": 60},
                    will=will(topic, b"delayed", will_delay_interval=2))
    c.close()
    t0 = time.monotonic()
    m = sub.get(6)
    elapsed = time.monotonic() - t0
    assert m.payload == b"delayed"
    assert elapsed >= 1.5, f"will with delay 2 s arrived after {elapsed:.2f}s"


def test_will_delay_cancelled_by_reconnect_v5(broker, clients):
    """Also checked with the time passed in by
    tests/unit/broker/core/test_wills.py::test_a_reconnect_within_the_delay_resuming_the_session_cancels_the_will."""
    topic = unique("will/cancel/")
    marker = topic + "-marker"
    sub = clients.paho(broker, 5)
    sub.subscribe(marker, qos=1)
    sub.subscribe(topic, qos=1)
    cid = unique("wdc-")
    c = clients.raw(broker, 5, cid, clean=True, props={"session_expiry_interval": 60},
                    will=will(topic, b"must-not-appear", will_delay_interval=2))
    c.close()
    t0 = time.monotonic()
    c2 = clients.raw(broker, 5, connect=False)
    ack = c2.connect(cid, clean=False, props={"session_expiry_interval": 60})
    assert ack.session_present
    assert time.monotonic() - t0 < 1.5, "reconnect took too long for this test to be meaningful"
    time.sleep(max(0.0, t0 + 3.0 - time.monotonic()))  # let the 2 s will delay pass (protocol timer)
    pub = clients.raw(broker, 5)
    pub.publish(marker, b"m", qos=1)
    before = sub.until_marker(marker)
    assert before == [], f"will published although the client reconnected within the delay: {before}"
    assert c2.is_open(1)


def test_will_published_at_session_end_before_delay_v5(broker, clients):
    """The will is published when the session ends, even if the will delay is longer, and not early. When
    exactly (at the session expiry) is checked by
    tests/unit/broker/core/test_wills.py::test_the_will_delay_is_capped_by_the_session_expiry."""
    topic = unique("will/sess/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, 5, clean=True, props={"session_expiry_interval": 1},
                    will=will(topic, b"session-ended", will_delay_interval=30))
    c.close()
    t0 = time.monotonic()
    m = sub.get(6)
    elapsed = time.monotonic() - t0
    assert m.payload == b"session-ended"
    assert elapsed >= 0.5, f"will arrived after {elapsed:.2f}s; session expiry 1 s, will delay 30 s"


@pytest.mark.parametrize("version", VERSIONS)
def test_will_on_takeover_when_session_ends_is_not_duplicated(broker, clients, version):
    """A client taken over (abnormally, from the old connection's view) has its will published at most once."""
    topic = unique("will/take/")
    marker = topic + "-marker"
    sub = clients.paho(broker, version)
    sub.subscribe(marker, qos=1)
    sub.subscribe(topic, qos=1)
    cid = unique("wt-")
    old = clients.raw(broker, version, cid, will=will(topic, b"old-will"))
    new = clients.raw(broker, version, connect=False)
    new.connect(cid)
    old.wait_closed(5)
    new.disconnect()
    pub = clients.raw(broker, version)
    pub.publish(marker, b"m", qos=1)
    before = sub.until_marker(marker)
    assert [m.payload for m in before] in ([], [b"old-will"]), [m.payload for m in before]
    # record which behaviour the broker chose (both are allowed here)
    print(f"will on takeover published: {bool(before)}")


def test_disconnect_raising_session_expiry_from_zero_is_protocol_error_v5(broker, clients):
    """[MQTT-3.14.2-2]: CONNECT had session expiry 0, DISCONNECT sets one: not a valid DISCONNECT, the server
    answers DISCONNECT 0x82 (if anything) and closes, and the will is published as for an abnormal close."""
    topic = unique("will/sx0/")
    sub = clients.paho(broker, 5)
    sub.subscribe(topic, qos=1)
    c = clients.raw(broker, 5, will=will(topic, b"not-a-valid-disconnect"))
    c.send(enc_disconnect(5, 0, {"session_expiry_interval": 60}))
    got = c.wait_closed(5)
    assert all(p.type == DISCONNECT and p.reason_code == 0x82 for p in got), got
    m = sub.get(5)
    assert m.payload == b"not-a-valid-disconnect"
