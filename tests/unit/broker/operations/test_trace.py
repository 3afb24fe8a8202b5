"""The client tracer (vmqpy/broker/operations/trace.py): what a packet line shows (never a password), payloads cut and
made
readable, the rate limit that ends a trace, the deadline, a slow reader, and the registry by client id."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.broker.operations.trace import (
    BUFFER_LINES,
    RECEIVED,
    SENT,
    Trace,
    TraceOptions,
    Tracers,
    describe,
    payload_text,
    stamp,
)
from vmqpy.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Puback,
    Publish,
    SubOptions,
    Subscribe,
    Subscription,
    Will,
)

T0 = 1_700_000_000.0


@pytest.mark.parametrize(("packet", "shown"), [
    (Publish("a/b", b"hello", 1, packet_id=7), "PUBLISH(d0 q1 r0 id=7) topic='a/b' payload='hello'"),
    (Publish("a", b"x", 0, retain=True), "PUBLISH(d0 q0 r1) topic='a' payload='x'"),
    (Connack(True, 0x87), "CONNACK session_present=1 rc=0x87"),
    (Puback(3, 0x10), "PUBACK id=3 rc=0x10"),
    (Subscribe(2, [Subscription("s/#", SubOptions(1))]), "SUBSCRIBE id=2 ['s/#' q1]"),
    (Disconnect(0x98), "DISCONNECT rc=0x98"),
    (Pingreq(), "PINGREQ"),
])
def test_a_packet_line_shows_what_an_operator_looks_at(packet: object, shown: str) -> None:
    assert describe(packet, 200) == shown


def test_a_connect_line_hides_the_password() -> None:
    connect = Connect("c1", 5, clean_start=False, keep_alive=30, username="alice", password=b"s3cret",
                      will=Will("w/t", b"bye", 1))
    line = describe(connect, 200)
    assert "s3cret" not in line and "password=(hidden)" in line
    assert "client_id='c1'" in line and "user='alice'" in line and "clean_start=0" in line
    assert "will=(topic='w/t' q1 r0)" in line and "bye" not in line


@pytest.mark.parametrize(("payload", "limit", "shown"), [
    (b"abc", 200, "'abc'"),
    (b"abcdef", 3, "'abc' (+3 bytes)"),
    (b"\x00\x01\xff", 200, "0x0001ff"),
    (b"line\nbreak", 200, "0x6c696e650a627265616b"),
    (b"", 200, "''"),
])
def test_payloads_are_cut_and_readable(payload: bytes, limit: int, shown: str) -> None:
    assert payload_text(payload, limit) == shown


@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_a_payload_line_is_one_line_and_bounded(payload: bytes, limit: int) -> None:
    text = payload_text(payload, limit)
    assert "\n" not in text and "\r" not in text
    assert len(text) <= 4 * limit + 40


def test_stamps_are_utc_to_the_millisecond() -> None:
    assert stamp(0.25) == "1970-01-01T00:00:00.250Z"


def options(**kw: object) -> TraceOptions:
    return TraceOptions("c1", **kw)  # type: ignore[arg-type]


def test_lines_come_out_in_order_once() -> None:
    trace = Trace(options(), 0.0)
    trace.packet(RECEIVED, "127.0.0.1:5000", Publish("t", b"1", 0), T0)
    trace.packet(SENT, "127.0.0.1:5000", Puback(1), T0 + 0.5)
    lines = trace.take()
    assert len(lines) == 2 and " <- PUBLISH" in lines[0] and " -> PUBACK" in lines[1]
    assert "127.0.0.1:5000" in lines[0]
    assert trace.take() == []


def test_more_than_the_rate_ends_the_trace_and_says_so() -> None:
    trace = Trace(options(rate_max=3, rate_interval=1.0), 0.0)
    for i in range(3):
        trace.packet(RECEIVED, "p", Pingreq(), T0 + i * 0.1)
    assert not trace.done
    trace.packet(RECEIVED, "p", Pingreq(), T0 + 0.35)
    assert trace.done
    trace.packet(RECEIVED, "p", Pingreq(), T0 + 5)
    lines = trace.take()
    assert len(lines) == 4 and "more than 3 packets in 1 s" in lines[-1]


def test_the_rate_is_over_a_sliding_window() -> None:
    trace = Trace(options(rate_max=2, rate_interval=1.0), 0.0)
    for i in range(20):  # two per second, for ten seconds: never more than the rate
        trace.packet(RECEIVED, "p", Pingreq(), T0 + i * 0.5)
    assert not trace.done


def test_a_wall_clock_set_back_does_not_end_a_trace() -> None:
    trace = Trace(options(rate_max=2, rate_interval=1.0), 0.0)
    trace.packet(RECEIVED, "p", Pingreq(), T0 + 100)
    trace.packet(RECEIVED, "p", Pingreq(), T0 + 100.1)
    trace.packet(RECEIVED, "p", Pingreq(), T0)  # 100 s back
    assert not trace.done


def test_the_deadline_ends_the_trace_on_monotonic_time() -> None:
    trace = Trace(options(stop_after=10.0), 50.0)
    trace.tick(59.9, T0)
    assert not trace.done
    trace.tick(60.0, T0)
    assert trace.done and "ended after 10 s" in trace.take()[-1]


def test_a_slow_reader_is_told_how_many_lines_it_lost() -> None:
    trace = Trace(options(rate_max=10 * BUFFER_LINES), 0.0)
    for i in range(BUFFER_LINES + 25):
        trace.packet(RECEIVED, "p", Pingreq(), T0 + i * 1e-6)
    lines = trace.take()
    assert lines[0] == "... 25 lines not shown: the terminal did not keep up"
    assert len(lines) == BUFFER_LINES + 1


def test_the_end_line_is_kept_even_when_the_buffer_is_full() -> None:
    trace = Trace(options(rate_max=10 * BUFFER_LINES), 0.0)
    for i in range(BUFFER_LINES):
        trace.packet(RECEIVED, "p", Pingreq(), T0 + i * 1e-6)
    trace.end("stopped", T0 + 1)
    assert trace.take()[-1].endswith("stopped")


def test_the_registry_finds_running_traces_by_client_id() -> None:
    tracers = Tracers()
    assert not tracers and tracers.of("c1") == ()
    first = tracers.start(options(), 0.0)
    second = tracers.start(TraceOptions("c2"), 0.0)
    assert tracers and tracers.of("c1") == (first,) and tracers.of("c2") == (second,)
    first.end("rate", T0)
    assert tracers.of("c1") == (), "an ended trace is not handed to new connections"
    tracers.stop(first, T0)
    tracers.stop(second, T0)
    assert not tracers and second.done
