"""vmqpy.broker.listeners.preludes, the wait for the CONNECT: `connect_bytes_needed` reads a CONNECT's fixed header
(tables
and a property over every cut of real CONNECTs), and `ConnectPrelude` hands the socket on with every byte once
the CONNECT is whole, aborts it (counted, nothing handed on) when the CONNECT is late or announces too many
bytes, and closes a socket its client ends without a log line or a count of failures."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.transports import FakeTransport
from vmqpy.broker.listeners import connect_pacing
from vmqpy.broker.listeners.connect_pacing import (
    CLOSE_SPREAD,
    PAUSE_MIN,
    PAUSE_SPREAD,
    TRICKLE_AFTER,
    connect_deadline,
    pause_until,
)
from vmqpy.broker.listeners.preludes import (
    CONNECT_TIMEOUT_METRIC,
    CONNECT_TOO_LARGE_METRIC,
    ConnectPrelude,
    ConnectWait,
    OversizedConnect,
    connect_bytes_needed,
)
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connect, Will

CONNECT = encode(Connect("client-1", keep_alive=30), 4)
SUBSCRIBE = b"\x82\x08\x00\x01\x00\x03a/b\x01"


@pytest.mark.parametrize(("head", "max_size", "needed"), [
    (b"", 100, None),
    (b"\x10", 100, None),
    (b"\x10\x0c", 100, 14),
    (b"\x10\x0c\x00\x04MQ", 100, 14),
    (b"\x10\x80", 100, None),  # a second length byte is coming
    (b"\x10\x80\x01", 200, 131),  # 128 + 3
    (b"\x10\xff\xff\xff", 10**9, None),
    (b"\x10\xff\xff\xff\x7f", 300_000_000, 268_435_460),  # the largest remaining length MQTT allows
    (b"\x10\x80\x80\x80\x80", 10**9, 1),  # a fifth length byte: malformed, the decoder refuses it
    (b"\x30\x05", 100, 1),  # PUBLISH first: the connection refuses it
    (b"\x11\x0c", 100, 1),  # CONNECT with flags: ditto
    (b"GET / HTTP/1.1\r\n", 100, 1),
    (b"\x10\x0c", 14, 14),  # exactly the maximum
])
def test_bytes_needed_before_the_connection_takes_over(head: bytes, max_size: int, needed: int | None) -> None:
    assert connect_bytes_needed(head, max_size) == needed


@pytest.mark.parametrize(("head", "max_size"), [
    (b"\x10\x0c", 13),
    (b"\x10\xff\xff\xff\x7f", 1024 * 1024),  # refused on its fifth byte: no body needed
    (b"\x10\x80\x01", 130),
])
def test_a_connect_announcing_more_than_the_maximum_is_refused_on_its_header(head: bytes, max_size: int) -> None:
    with pytest.raises(OversizedConnect, match="announced"):
        connect_bytes_needed(head, max_size)


NAMES = st.text(alphabet="abcxyz/-_é0123456789", max_size=300)
connects = st.builds(
    Connect,
    client_id=NAMES,
    protocol_level=st.sampled_from([3, 4, 5]),
    keep_alive=st.integers(0, 65535),
    will=st.none() | st.builds(Will, topic=NAMES.filter(bool), payload=st.binary(max_size=20_000)),
    username=st.none() | NAMES,
    password=st.none() | st.binary(max_size=50),
).filter(lambda c: c.password is None or c.username is not None)  # a password needs a user name (3.1.1)


@given(connects)
def test_every_real_connect_is_waited_for_whole(connect: Connect) -> None:
    packet = encode(connect, connect.protocol_level)
    header = 1 + next(i for i in range(1, 5) if not packet[i] & 0x80)  # the fixed header's length
    for cut in range(header):
        assert connect_bytes_needed(packet[:cut], len(packet)) is None
    assert connect_bytes_needed(packet[:header], len(packet)) == len(packet)
    assert connect_bytes_needed(packet, len(packet)) == len(packet)
    with pytest.raises(OversizedConnect):
        connect_bytes_needed(packet[:header], len(packet) - 1)


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.data = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data


class PausableTransport(FakeTransport):
    """A fake transport that records its reading being paused and resumed."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.pauses = 0

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True


class Run:
    """One ConnectPrelude on a fake transport, inside a running loop."""

    def __init__(self, timeout: float = 10.0, max_size: int = 1024, jitter: float = 0.5) -> None:
        self.metrics: Counter[str] = Counter()
        self.made: list[Recorder] = []
        self.lost: list[int] = []
        self.transport = PausableTransport()
        self.wait = ConnectWait("default", timeout, max_size, self.metrics, jitter=lambda: jitter)
        self.prelude = ConnectPrelude(self._open, self.wait, lambda: self.lost.append(1))
        self.prelude.connection_made(self.transport)

    def _open(self) -> Recorder:
        self.made.append(Recorder())
        return self.made[-1]

    def feed(self, *chunks: bytes) -> None:
        for chunk in chunks:
            assert self.transport.reading, "a paused socket is not read"
            receiver = self.transport.protocol or self.prelude
            assert isinstance(receiver, asyncio.Protocol)
            receiver.data_received(chunk)

    def age(self, seconds: float) -> None:
        """Make the socket `seconds` older than it is (its accept happened earlier)."""
        self.prelude.opened_at -= seconds


@given(st.data())
def test_any_cut_of_the_connect_hands_the_socket_on_once_with_every_byte(data: st.DataObject) -> None:
    stream = CONNECT + SUBSCRIBE
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    async def scenario() -> Run:
        run = Run()
        run.feed(*chunks)
        return run

    run = asyncio.run(scenario())
    assert len(run.made) == 1 and run.made[0].data == stream
    assert run.transport.protocol is run.made[0] and run.made[0].transport is run.transport
    assert not run.transport.aborted and run.lost == []
    # The socket counts once in socket_open: the connection counts it when handed on, the prelude no more.
    assert run.metrics == Counter({"socket_open": 0})


def test_a_late_connect_is_aborted_counted_and_never_handed_on() -> None:
    async def scenario() -> Run:
        run = Run(timeout=0.01)
        run.feed(CONNECT[:5])
        for _ in range(200):  # bounded: 2 s at most
            if run.transport.aborted:
                break
            await asyncio.sleep(0.01)
        run.prelude.connection_lost(None)
        run.feed(CONNECT[5:])  # too late
        return run

    run = asyncio.run(scenario())
    assert run.transport.aborted and run.made == [] and run.lost == [1]
    assert run.metrics == Counter({CONNECT_TIMEOUT_METRIC: 1, "socket_open": 1, "socket_close": 1})


def test_a_huge_announced_connect_is_refused_before_its_body() -> None:
    async def scenario() -> Run:
        run = Run(max_size=1024)
        run.feed(b"\x10\xff\xff\xff\x7f")  # 256 MiB announced
        return run

    run = asyncio.run(scenario())
    assert run.transport.aborted and run.made == [] and run.prelude.buffer == bytearray()
    assert run.metrics[CONNECT_TOO_LARGE_METRIC] == 1


def test_anything_but_a_connect_goes_to_the_connection_at_once() -> None:
    async def scenario() -> Run:
        run = Run()
        run.feed(b"\x30")  # a PUBLISH before CONNECT: the connection's decoder answers it
        return run

    run = asyncio.run(scenario())
    assert [r.data for r in run.made] == [b"\x30"] and not run.transport.aborted


def test_a_client_that_ends_before_its_connect_is_closed_without_a_failure() -> None:
    async def scenario() -> tuple[Run, bool | None]:
        run = Run(timeout=0.01)
        run.feed(CONNECT[:3])
        keep_open = run.prelude.eof_received()
        run.prelude.connection_lost(None)
        await asyncio.sleep(0.05)  # past the timeout: the timer was cancelled
        return run, keep_open

    run, keep_open = asyncio.run(scenario())
    assert not keep_open and run.made == [] and run.lost == [1] and not run.transport.aborted
    assert run.metrics == Counter({"socket_open": 1, "socket_close": 1})


# -- pacing of a socket that trickles its CONNECT (vmqpy.broker.listeners.connect_pacing)
# -----------------------------------
@pytest.mark.parametrize(("opened_at", "now", "jitter", "deadline", "resume_at"), [
    (100.0, 100.0, 0.0, 110.0, None),  # the first read, at the accept
    (100.0, 100.0 + TRICKLE_AFTER - 0.01, 0.9, 110.0, None),  # a real client's CONNECT in several quick reads
    (100.0, 100.0 + TRICKLE_AFTER, 0.0, 110.0, 100.0 + TRICKLE_AFTER + PAUSE_MIN),
    (100.0, 101.0, 0.0, 110.0, 101.0 + PAUSE_MIN),
    (100.0, 101.0, 0.5, 110.0, 101.0 + PAUSE_MIN + PAUSE_SPREAD / 2),
    (100.0, 109.5, 0.5, 110.0, 110.0),  # never past the CONNECT deadline
])
def test_when_a_trickling_socket_is_read_again(opened_at: float, now: float, jitter: float, deadline: float,
                                               resume_at: float | None) -> None:
    assert pause_until(opened_at, now, jitter, deadline) == resume_at


@pytest.mark.parametrize("jitter", [-0.1, 1.0, float("nan")])
def test_a_jitter_outside_the_unit_interval_is_a_usage_error(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        pause_until(0.0, 5.0, jitter, 10.0)


@given(opened_at=st.floats(0, 1e6), elapsed=st.floats(0, 20), jitter=st.floats(0, 1, exclude_max=True),
       timeout=st.floats(0.1, 60))
def test_a_pause_is_inside_its_span_and_never_past_the_deadline(opened_at: float, elapsed: float, jitter: float,
                                                                  timeout: float) -> None:
    now, deadline = opened_at + elapsed, opened_at + timeout
    resume_at = pause_until(opened_at, now, jitter, deadline)
    if now - opened_at < TRICKLE_AFTER:
        assert resume_at is None
        return
    assert resume_at is not None
    assert resume_at <= deadline
    assert resume_at == deadline or now + PAUSE_MIN <= resume_at < now + PAUSE_MIN + PAUSE_SPREAD + 1e-6
    # a later draw never resumes earlier: the draws spread the sockets over the span in order
    later_jitter = max(jitter, min(jitter + 0.25, 0.999))
    later = pause_until(opened_at, now, later_jitter, deadline)
    assert later is not None and later >= resume_at


def test_a_real_client_that_sends_its_connect_in_pieces_at_once_is_never_paused() -> None:
    async def scenario() -> Run:
        run = Run()
        run.feed(CONNECT[:2], CONNECT[2:5], CONNECT[5:9], CONNECT[9:])  # header and body written apart
        return run

    run = asyncio.run(scenario())
    assert run.transport.pauses == 0 and [r.data for r in run.made] == [CONNECT]


def test_a_trickling_socket_is_paused_resumed_later_and_handed_on_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_pacing, "PAUSE_MIN", 0.02)
    monkeypatch.setattr(connect_pacing, "PAUSE_SPREAD", 0.02)

    async def scenario() -> tuple[Run, list[bool]]:
        run = Run()
        seen: list[bool] = []
        run.feed(CONNECT[:1])
        seen.append(run.transport.reading)  # at the accept: read on
        run.age(TRICKLE_AFTER)
        run.feed(CONNECT[1:2])
        seen.append(run.transport.reading)  # still incomplete a moment later: paused
        for _ in range(200):  # bounded: 2 s at most
            if run.transport.reading:
                break
            await asyncio.sleep(0.01)
        seen.append(run.transport.reading)  # resumed at its point of the span
        run.feed(CONNECT[2:])  # what the kernel gathered meanwhile, in one read
        return run, seen

    run, seen = asyncio.run(scenario())
    assert seen == [True, False, True]
    assert run.transport.pauses == 1 and [r.data for r in run.made] == [CONNECT] and run.transport.reading
    assert not run.transport.aborted and run.prelude._resume is None
    assert run.metrics == Counter({"socket_open": 0})


def test_a_paused_socket_is_still_closed_at_its_connect_deadline() -> None:
    async def scenario() -> Run:
        run = Run(timeout=0.05)
        run.feed(CONNECT[:1])
        run.age(TRICKLE_AFTER)
        run.feed(CONNECT[1:2])
        assert not run.transport.reading
        for _ in range(200):  # bounded: 2 s at most
            if run.transport.aborted:
                break
            await asyncio.sleep(0.01)
        return run

    run = asyncio.run(scenario())
    assert run.transport.aborted and run.made == []
    assert run.metrics[CONNECT_TIMEOUT_METRIC] == 1 and run.prelude._resume is None


def test_a_socket_lost_while_paused_leaves_no_timer() -> None:
    async def scenario() -> Run:
        run = Run()
        run.feed(CONNECT[:1])
        run.age(TRICKLE_AFTER)
        run.feed(CONNECT[1:2])
        run.prelude.connection_lost(None)
        return run

    run = asyncio.run(scenario())
    assert run.prelude._resume is None and run.prelude._timer is None and run.lost == [1]


@pytest.mark.parametrize(("opened_at", "timeout", "jitter", "deadline"), [
    (100.0, 10.0, 0.0, 110.0),  # never before the timeout
    (100.0, 10.0, 0.5, 100.0 + 10.0 * (1 + CLOSE_SPREAD / 2)),
    (0.0, 2.0, 0.25, 2.0 * (1 + CLOSE_SPREAD / 4)),  # the spread scales with the timeout
])
def test_when_a_socket_without_its_connect_is_closed(opened_at: float, timeout: float, jitter: float,
                                                      deadline: float) -> None:
    assert connect_deadline(opened_at, timeout, jitter) == pytest.approx(deadline)


@pytest.mark.parametrize("jitter", [-0.1, 1.0, float("nan")])
def test_a_deadline_jitter_outside_the_unit_interval_is_a_usage_error(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter must be in"):
        connect_deadline(0.0, 10.0, jitter)


@given(st.floats(0, 1e6), st.floats(0.001, 3600), st.floats(0, 0.999), st.floats(0, 0.999))
def test_deadlines_of_sockets_opened_together_spread_over_a_fifth_of_the_timeout(
        opened_at: float, timeout: float, jitter: float, other: float) -> None:
    deadline = connect_deadline(opened_at, timeout, jitter)
    assert opened_at + timeout <= deadline <= opened_at + timeout * (1 + CLOSE_SPREAD)
    if jitter <= other:  # draws in order give deadlines in order: sockets opened at once spread over the span
        assert deadline <= connect_deadline(opened_at, timeout, other)


def test_the_prelude_closes_at_its_drawn_deadline_not_before() -> None:
    async def scenario() -> tuple[Run, bool]:
        run = Run(timeout=1.0, jitter=0.9)  # deadline 1.18 s after the accept
        assert run.prelude.deadline == pytest.approx(run.prelude.opened_at + 1.0 * (1 + CLOSE_SPREAD * 0.9))
        loop = asyncio.get_running_loop()
        run.feed(CONNECT[:3])
        while loop.time() < run.prelude.opened_at + 1.02:  # bounded: 1.02 s
            await asyncio.sleep(0.01)
        aborted_at_timeout = run.transport.aborted  # the timeout has passed, the drawn deadline has not
        for _ in range(200):  # bounded: 2 s at most
            if run.transport.aborted:
                break
            await asyncio.sleep(0.01)
        return run, aborted_at_timeout

    run, aborted_at_timeout = asyncio.run(scenario())
    assert not aborted_at_timeout and run.transport.aborted and run.made == []
    assert run.metrics[CONNECT_TIMEOUT_METRIC] == 1
