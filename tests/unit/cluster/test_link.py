"""Link: establishment over a back-to-back pair, messages, heartbeats, silence, handshake deadline, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.cluster import handshake as hs
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import Frame, FrameType, encode_frame
from vmqpy.cluster.handshake import VERIFIED
from vmqpy.cluster.link import CloseCause, Closed, DataFrame, Established, Link, LinkState, PeerSilent

from .helpers import COOKIE, MAX_FRAME, NONCE_B, Pair, established_pair, frames_of, make_link

HEARTBEAT = encode_frame(FrameType.HEARTBEAT, None)


# ------------------------------------------------------------------------------------------------ establishing


def test_pair_establishes_and_exchanges_messages_both_ways() -> None:
    pair = Pair()
    pair.pump()
    assert pair.events_a == [Established("b", 2, ("10.0.0.2", 2))]
    assert pair.events_b == [Established("a", 1, ("10.0.0.1", 1))]
    assert (pair.a.peer_name, pair.a.peer_incarnation, pair.b.peer_name) == ("b", 2, "a")
    assert pair.a.is_dialer and not pair.b.is_dialer
    sent = [
        (FrameType.METADATA, b"m1"),
        (FrameType.FORWARD, b"publish"),
        (FrameType.CONTROL, {"op": "join", "n": 1}),
        (FrameType.REACHABILITY, ["a", "b", "c"]),
    ]
    out = b"".join(pair.a.send(t, body) for t, body in sent)
    pair.pump(extra_a=out)
    assert pair.events_b[1:] == [DataFrame(t, body) for t, body in sent]
    pair.pump(extra_b=pair.b.send(FrameType.FORWARD, b"back"))
    assert pair.events_a[-1] == DataFrame(FrameType.FORWARD, b"back")
    assert COOKIE.encode() not in pair.wire_a_to_b + pair.wire_b_to_a


def test_frames_in_the_same_chunk_as_the_handshake_are_delivered() -> None:
    """The acceptor may send data right after its MAC: the dialer reads both from one chunk."""
    a = make_link("a", "b")
    b = make_link("b", None, incarnation=2, nonce=NONCE_B)
    b.receive_data(a.data_to_send(), 0.0)
    a.receive_data(b.data_to_send(), 0.0)
    events_b = b.receive_data(a.data_to_send(), 0.0)
    assert events_b == [Established("a", 1, None)]
    chunk = b.data_to_send() + b.send(FrameType.METADATA, b"early")
    assert a.receive_data(chunk, 0.0) == [Established("b", 2, None), DataFrame(FrameType.METADATA, b"early")]


@given(st.data())
@settings(max_examples=50)
def test_any_chunking_of_both_streams(data: st.DataObject) -> None:
    a = make_link("a", "b")
    b = make_link("b", None, incarnation=2, nonce=NONCE_B)
    events_a: list[object] = []
    events_b: list[object] = []
    to_b = bytearray(a.data_to_send())
    to_a = bytearray(b.data_to_send())
    sent_b = False
    for _ in range(400):
        if b.state is LinkState.ESTABLISHED and not sent_b:
            to_a += b.send(FrameType.FORWARD, b"x" * 50) + b.send(FrameType.CONTROL, {"k": 1})
            sent_b = True
        if not to_a and not to_b:
            break
        if to_b:
            n = data.draw(st.integers(1, len(to_b)))
            events_b += b.receive_data(bytes(to_b[:n]), 0.0)
            del to_b[:n]
        if to_a:
            n = data.draw(st.integers(1, len(to_a)))
            events_a += a.receive_data(bytes(to_a[:n]), 0.0)
            del to_a[:n]
        to_b += a.data_to_send()
        to_a += b.data_to_send()
    assert events_a == [
        Established("b", 2, None),
        DataFrame(FrameType.FORWARD, b"x" * 50),
        DataFrame(FrameType.CONTROL, {"k": 1}),
    ]
    assert events_b == [Established("a", 1, None)]


def test_send_before_established_is_misuse() -> None:
    link = make_link("a", "b")
    with pytest.raises(ClusterUsageError):
        link.send(FrameType.METADATA, b"x")


@pytest.mark.parametrize("frame_type", [FrameType.HEARTBEAT, FrameType.BYE, FrameType.HELLO])
def test_link_frames_cannot_be_sent_by_the_caller(frame_type: FrameType) -> None:
    pair = established_pair()
    with pytest.raises(ClusterUsageError):
        pair.a.send(frame_type, None)


def test_send_refuses_frames_over_the_maximum() -> None:
    pair = established_pair()
    with pytest.raises(ClusterUsageError):
        pair.a.send(FrameType.METADATA, b"x" * MAX_FRAME)


def test_send_puts_pending_link_bytes_first() -> None:
    pair = established_pair()
    pair.a.handle_timer(pair.a.heartbeat_interval)  # queues a heartbeat
    out = pair.a.send(FrameType.METADATA, b"after")
    assert [f.type for f in frames_of(out, sealed=True)] == [FrameType.HEARTBEAT, FrameType.METADATA]
    assert pair.a.data_to_send() == b""


def test_wrong_cookie_closes_both_links_as_refused() -> None:
    pair = Pair(make_link("a", "b", cookie="x"), make_link("b", None, cookie="y", nonce=NONCE_B))
    pair.pump()
    assert pair.events_a == [Closed(CloseCause.REFUSED, hs.WRONG_COOKIE, "refused by peer")]
    assert pair.events_b == [Closed(CloseCause.REFUSED, hs.WRONG_COOKIE, "the peer's MAC does not verify")]
    assert pair.a.state is pair.b.state is LinkState.CLOSED
    assert pair.a.get_timer() is None


def test_self_connection_is_refused_on_both_links() -> None:
    pair = Pair(make_link("a", "b", incarnation=5), make_link("a", None, incarnation=5, nonce=NONCE_B))
    pair.pump()
    assert [e.reason for e in pair.events_a if isinstance(e, Closed)] == [hs.SELF_CONNECTION]
    assert [e.reason for e in pair.events_b if isinstance(e, Closed)] == [hs.SELF_CONNECTION]


def test_data_before_the_handshake_is_refused() -> None:
    b = make_link("b", None, nonce=NONCE_B)
    events = b.receive_data(encode_frame(FrameType.METADATA, b"sneaky"), 0.0)
    assert events == [Closed(CloseCause.REFUSED, hs.UNEXPECTED_FRAME, "METADATA while await hello")]
    assert frames_of(b.data_to_send())[-1] == Frame(FrameType.BYE, hs.UNEXPECTED_FRAME)


# ------------------------------------------------------------------------------------------------ time


def test_heartbeat_after_a_quiet_interval_and_not_after_traffic() -> None:
    pair = established_pair(now=100.0)
    a = pair.a
    interval = a.heartbeat_interval
    assert interval == pytest.approx(0.25)
    assert a.get_timer() == pytest.approx(100.0 + interval)
    assert a.handle_timer(100.0 + interval / 2) == [] and a.data_to_send() == b""  # early: nothing
    assert a.handle_timer(100.0 + interval) == []
    assert frames_of(a.data_to_send(), sealed=True) == [Frame(FrameType.HEARTBEAT, None)] and a.heartbeats_sent == 1
    # something was sent during the next interval: no heartbeat at its end
    a.send(FrameType.METADATA, b"traffic")
    assert a.handle_timer(100.0 + 2 * interval) == [] and a.data_to_send() == b""
    # quiet again: heartbeat
    a.handle_timer(100.0 + 3 * interval)
    assert frames_of(a.data_to_send(), sealed=True) == [Frame(FrameType.HEARTBEAT, None)]
    # frames the driver encoded itself count as traffic (and the peer's heartbeat keeps it heard)
    pair.b.handle_timer(100.0 + 3 * interval)
    assert a.receive_data(pair.b.data_to_send(), 100.0 + 3 * interval) == []
    a.seal(encode_frame(FrameType.METADATA, b"driver"))
    a.handle_timer(100.0 + 4 * interval)
    assert a.data_to_send() == b""


def run_timers(link: Link, until: float) -> tuple[float, list[object]]:
    """Call handle_timer at every deadline the link asks for until it reports something or `until`."""
    for _ in range(1000):
        when = link.get_timer()
        assert when is not None
        if when > until:
            return when, []
        events = link.handle_timer(when)
        if events:
            return when, list(events)
    raise AssertionError("timer loop did not finish")


def test_peer_silent_after_detect_timeout_without_frames() -> None:
    pair = established_pair(now=10.0)
    a = pair.a
    when, events = run_timers(a, until=20.0)
    silent, closed = events
    assert isinstance(silent, PeerSilent) and silent.silent_for == pytest.approx(when - 10.0)
    assert isinstance(closed, Closed) and (closed.cause, closed.reason) == (CloseCause.SILENT, "peer silent")
    assert 11.0 <= when < 11.0 + a.heartbeat_interval
    assert a.state is LinkState.CLOSED
    assert frames_of(a.data_to_send(), sealed=True)[-1] == Frame(FrameType.BYE, "peer silent")
    assert a.handle_timer(when + 5) == [] and a.get_timer() is None


def test_heartbeats_keep_both_sides_alive() -> None:
    pair = established_pair(now=0.0)
    now = 0.0
    for _ in range(200):  # 10 detect timeouts of simulated time, stepping through both timers
        now = min(t for t in (pair.a.get_timer(), pair.b.get_timer()) if t is not None)
        pair.events_a += pair.a.handle_timer(now)
        pair.events_b += pair.b.handle_timer(now)
        pair.pump(now)
        if now > 10.0:
            break
    assert now > 10.0
    assert pair.events_a == pair.events_b == []
    assert pair.a.state is pair.b.state is LinkState.ESTABLISHED
    assert pair.a.heartbeats_sent > 0 and pair.b.heartbeats_sent > 0


def test_one_sided_traffic_keeps_the_sender_heard_and_the_sender_hears_heartbeats() -> None:
    pair = established_pair()
    now = 0.0
    for _ in range(100):
        now += 0.1
        pair.events_a += pair.a.handle_timer(now)
        pair.events_b += pair.b.handle_timer(now)
        pair.pump(now, extra_a=pair.a.send(FrameType.FORWARD, b"p"))
    assert not any(isinstance(e, Closed) for e in pair.events_a + pair.events_b)
    assert pair.a.heartbeats_sent == 0  # a always had traffic
    assert pair.b.heartbeats_sent > 0  # b only heartbeats


def test_a_stalled_loop_gets_one_interval_of_grace() -> None:
    pair = established_pair(now=0.0)
    a = pair.a
    # our own loop did not run for 5 s: the first tick after the stall does not condemn the peer ...
    assert a.handle_timer(5.0) == []
    # ... frames that arrived during the stall are read, and the peer is alive
    pair.b.handle_timer(5.0)
    pair.pump(5.0, extra_b=pair.b.send(FrameType.FORWARD, b"late"))
    assert a.state is LinkState.ESTABLISHED
    # a real silence after a stall is detected one interval later
    a.handle_timer(20.0)
    assert a.get_timer() == pytest.approx(20.0 + a.heartbeat_interval)
    events = a.handle_timer(20.0 + a.heartbeat_interval)
    assert [type(e) for e in events] == [PeerSilent, Closed]


def test_handshake_deadline() -> None:
    link = make_link("a", "b", now=50.0, detect_timeout=1.0)
    assert link.get_timer() == 52.0  # 2 * detect_timeout by default
    assert link.handle_timer(51.9) == []
    events = link.handle_timer(52.0)
    assert events == [Closed(CloseCause.HANDSHAKE_TIMEOUT, hs.HANDSHAKE_TIMEOUT)]
    assert frames_of(link.data_to_send())[-1] == Frame(FrameType.BYE, hs.HANDSHAKE_TIMEOUT)


def test_explicit_handshake_timeout() -> None:
    link = make_link("a", "b", now=0.0, handshake_timeout=0.3)
    assert link.get_timer() == 0.3


# ------------------------------------------------------------------------------------------------ closing


def test_malformed_frame_closes_with_the_decoder_reason() -> None:
    pair = established_pair()
    payload = b"\x93\x01\x63\xc0"  # [1, 99, nil]: unknown type
    events = pair.b.receive_data(pair.a.seal(struct.pack(">I", len(payload)) + payload), 0.1)
    assert events == [Closed(CloseCause.PROTOCOL_ERROR, "unknown frame type 99", "UnknownFrameType")]
    assert frames_of(pair.b.data_to_send(), sealed=True) == [Frame(FrameType.BYE, "unknown frame type 99")]
    assert pair.b.receive_data(encode_frame(FrameType.METADATA, b"ignored"), 0.2) == []


def test_oversized_length_closes_without_waiting_for_the_body() -> None:
    pair = established_pair()
    events = pair.b.receive_data(struct.pack(">I", MAX_FRAME + 1), 0.1)
    assert len(events) == 1 and isinstance(events[0], Closed)
    assert events[0].cause is CloseCause.PROTOCOL_ERROR and "exceeds the maximum frame size" in events[0].reason


def test_messages_before_a_malformed_frame_are_delivered() -> None:
    pair = established_pair()
    chunk = pair.a.send(FrameType.FORWARD, b"ok") + pair.a.seal(b"\x00\x00\x00\x01\xc1")
    events = pair.b.receive_data(chunk, 0.1)
    assert events[0] == DataFrame(FrameType.FORWARD, b"ok")
    assert isinstance(events[1], Closed) and events[1].cause is CloseCause.PROTOCOL_ERROR


def test_handshake_frame_on_an_established_link_is_a_protocol_error() -> None:
    pair = established_pair()
    hello = encode_frame(FrameType.HELLO, {"name": "a", "incarnation": 1, "nonce": bytes(16), "listen": None})
    events = pair.b.receive_data(pair.a.seal(hello), 0.1)
    assert events == [Closed(CloseCause.PROTOCOL_ERROR, "HELLO frame on an established link")]


def test_truncated_frame_then_eof() -> None:
    pair = established_pair()
    wire = pair.a.send(FrameType.METADATA, b"x" * 100)
    assert pair.b.receive_data(wire[:50], 0.1) == []
    events = pair.b.receive_data(b"", 0.2)
    assert events == [
        Closed(CloseCause.PROTOCOL_ERROR, "truncated frame", "connection closed with 50 bytes of an incomplete frame")
    ]


def test_clean_eof_and_connection_errors() -> None:
    pair = established_pair()
    assert pair.b.receive_data(b"", 0.1) == [Closed(CloseCause.CONNECTION_LOST, "connection closed by peer")]
    assert pair.a.connection_lost("reset") == [Closed(CloseCause.CONNECTION_LOST, "reset")]
    assert pair.a.connection_lost("again") == []


def test_close_sends_bye_and_the_peer_sees_it() -> None:
    pair = established_pair()
    assert pair.a.close("leaving") == [Closed(CloseCause.LOCAL, "leaving")]
    assert pair.a.close("twice") == []
    pair.pump(0.1)
    assert pair.events_b == [Closed(CloseCause.PEER_BYE, "leaving")]
    assert pair.b.state is LinkState.CLOSED


def test_closing_during_the_handshake_refuses_on_the_other_side() -> None:
    a = make_link("a", "b")
    b = make_link("b", None, nonce=NONCE_B)
    a.close("node shutting down")
    events = b.receive_data(a.data_to_send(), 0.0)
    assert events == [Closed(CloseCause.REFUSED, "node shutting down", "refused by peer")]


def test_admit_refusal_reaches_the_dialer() -> None:
    refuse = make_link("b", None, nonce=NONCE_B, admit=lambda n, i, intent: "duplicate link")
    pair = Pair(make_link("a", "b"), refuse)
    pair.pump()
    # the refusal carries a MAC (handshake.py): the dialer knows a node with the cookie refused it
    assert pair.events_a == [Closed(CloseCause.REFUSED, "duplicate link", VERIFIED, verified=True)]
    assert pair.events_b == [Closed(CloseCause.REFUSED, "duplicate link", "duplicate link")]


@pytest.mark.parametrize("detect_timeout", [0.0, -1.0, float("inf")])
def test_detect_timeout_must_be_positive_and_finite(detect_timeout: float) -> None:
    with pytest.raises(ClusterUsageError):
        make_link("a", "b", detect_timeout=detect_timeout)


@given(st.binary(max_size=300), st.booleans())
@settings(max_examples=200)
def test_random_input_never_raises(data: bytes, established: bool) -> None:
    link = established_pair().b if established else make_link("b", None, nonce=NONCE_B)
    events = link.receive_data(data, 1.0) + link.handle_timer(2.0) + link.receive_data(b"", 3.0)
    assert all(isinstance(e, (Closed, DataFrame, PeerSilent, Established)) for e in events)
    assert sum(isinstance(e, Closed) for e in events) <= 1
