"""The load generator's fixed-rate mode: the schedule (`bench.loadgen.schedule`), the latency accounting by due
time (the subscriber, `results.latency_ms`, `summarize`) and the paced publisher against a fake transport.

The real runs against a broker are `python -m bench.bench_latency --quick` (bench/README.md).
"""

from __future__ import annotations

import array
import asyncio
import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import loadgen
from bench.loadgen.paced import MAX_BURST
from bench.loadgen.schedule import NS_PER_S_MILLI, Schedule, in_window, rate_milli
from tests.unit.transports import FakeTransport
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Puback, Publish

# ------------------------------------------------------------------------------------------------ the schedule


@pytest.mark.parametrize(("rate", "publishers", "index", "k", "expected"), [
    (1000, 1, 0, 0, 5_000),  # t0 = 5,000 ns
    (1000, 1, 0, 3, 5_000 + 3_000_000),
    (1000, 10, 0, 1, 5_000 + 10_000_000),  # 100/s each: 10 ms apart
    (1000, 10, 3, 0, 5_000 + 3_000_000),  # publisher 3 starts 3 ms in: the ten are spread over the period
    (1000, 10, 9, 2, 5_000 + 29_000_000),
    (3, 1, 0, 1, 5_000 + 333_333_333),  # 1/3 s, rounded down
    (2.5, 1, 0, 2, 5_000 + 800_000_000),
    (0.001, 1, 0, 1, 5_000 + 1_000 * 10**9),
])
def test_time_of_known_values(rate: float, publishers: int, index: int, k: int, expected: int) -> None:
    assert Schedule.of(5_000, rate, publishers, index).time_of(k) == expected


@pytest.mark.parametrize(("now", "expected"), [
    (4_999, 0),  # before t0 nothing is due
    (5_000, 1),  # the first message is due at t0
    (5_000 + 999_999, 1),
    (5_000 + 1_000_000, 2),
    (5_000 + 10**9, 1001),  # a late publisher: everything due until now, at once
])
def test_due_known_values(now: int, expected: int) -> None:
    assert Schedule.of(5_000, 1000, 1, 0).due(now) == expected


@pytest.mark.parametrize("rate", [0, -1, 0.0001, 1e9, math.nan, math.inf, "100", None, True])
def test_bad_rates_are_refused(rate: Any) -> None:
    with pytest.raises(ValueError, match="rate must be"):
        rate_milli(rate)


@pytest.mark.parametrize(("milli", "publishers", "index"), [(0, 1, 0), (1000, 0, 0), (1000, 2, 2), (1000, 2, -1)])
def test_bad_schedules_are_refused(milli: int, publishers: int, index: int) -> None:
    with pytest.raises(ValueError, match="bad schedule"):
        Schedule(0, milli, publishers, index)


schedules = st.builds(
    lambda t0, rate, n, i: Schedule.of(t0, rate, n, i % n),
    st.integers(0, 10**15), st.floats(0.001, 1e7), st.integers(1, 64), st.integers(0, 63))


@given(schedules, st.integers(0, 10**7))
def test_due_is_the_inverse_of_time_of(s: Schedule, k: int) -> None:
    t = s.time_of(k)
    assert s.due(t) == k + 1  # message k is due at its time...
    assert s.due(t - 1) == k  # ...and not a nanosecond before
    assert s.time_of(k + 1) > t
    assert s.due_before(t) == k


@given(st.integers(0, 10**15), st.floats(0.001, 1e7), st.integers(1, 64), st.integers(0, 10**13))
def test_the_publishers_together_keep_the_total_rate(t0: int, rate: float, n: int, elapsed: int) -> None:
    """At any moment the messages due over all publishers are the total rate x the time since t0 (within one),
    whatever happened before: a publisher that fell behind catches up instead of drifting."""
    scheds = [Schedule.of(t0, rate, n, i) for i in range(n)]
    total = sum(s.due(t0 + elapsed) for s in scheds)
    milli = rate_milli(rate)
    exact = Fraction(elapsed * milli, NS_PER_S_MILLI)
    assert 0 <= total - exact < 1 + Fraction(milli, NS_PER_S_MILLI)
    # spread evenly: no publisher is more than one message ahead of another
    dues = [s.due(t0 + elapsed) for s in scheds]
    assert max(dues) - min(dues) <= 1


@pytest.mark.parametrize(("due", "expected"), [(99, False), (100, True), (150, True), (199, True), (200, False)])
def test_in_window_is_half_open(due: int, expected: bool) -> None:
    assert in_window(due, 100, 200) is expected


# ------------------------------------------------------------------------------------------------ latency figures


def test_latency_ms_nearest_rank() -> None:
    values = sorted(range(1_000_000, 1_000_000_001, 1_000_000))  # 1..1000 ms
    assert loadgen.latency_ms(values) == {"p50_ms": 500.0, "p99_ms": 990.0, "p999_ms": 999.0, "max_ms": 1000.0}
    assert loadgen.latency_ms([]) == {"p50_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}


@given(st.lists(st.integers(0, 10**10), min_size=1, max_size=500))
def test_latency_ms_is_ordered_and_ends_at_the_max(values: list[int]) -> None:
    lat = loadgen.latency_ms(sorted(values))
    p50, p99, p999, top = lat["p50_ms"], lat["p99_ms"], lat["p999_ms"], lat["max_ms"]
    assert p50 is not None and p99 is not None and p999 is not None and top is not None
    assert min(values) / 1e6 <= p50 <= p99 <= p999 <= top == max(values) / 1e6
    assert sum(v / 1e6 <= p99 for v in values) >= 0.99 * len(values)  # at least 99 % at or below the p99


def test_summarize_reports_the_fixed_rate_figures() -> None:
    lags = array.array("q", [100_000, 300_000, 2_000_000])
    pub = loadgen.PubResult(pub_id=0, qos=1, sent=4, acked=4, acked_map=b"\x01" * 4, behind=6,
                            send_lags=lags.tobytes())
    lat = array.array("q", [1_000_000, 2_000_000, 3_000_000, 40_000_000])
    sub = loadgen.SubResult(sub_id=0, sources=[0], delivered=4, in_window=4, seen={0: b"\x01" * 4},
                            latencies=lat.tobytes())
    r = loadgen.summarize("t", 1, 2.0, [pub], [sub], sent_in_window=4, target_rate=5.0)
    assert (r.target_rate, r.rate, r.behind) == (5.0, 2.0, 6)
    assert (r.p50_ms, r.p99_ms, r.p999_ms, r.max_ms) == (2.0, 40.0, 40.0, 40.0)
    assert (r.lag_p99_ms, r.lag_max_ms) == (2.0, 2.0)
    closed = loadgen.summarize("t", 1, 2.0, [loadgen.PubResult(0, 1)], [])
    assert (closed.target_rate, closed.behind, closed.lag_p99_ms) == (None, 0, None)


# ------------------------------------------------------------------------------------------------ the clients


def publishes(data: bytes) -> list[Publish]:
    dec = Decoder(server=True, protocol_level=4)
    dec.receive_data(data)
    out = []
    for _ in range(100_000):
        p = dec.next_packet()
        if p is NEED_DATA:
            break
        assert isinstance(p, Publish)
        out.append(p)
    return out


def stamps(packets: list[Publish]) -> list[tuple[int, int]]:
    """(sequence number, time in the payload) of each PUBLISH."""
    return [loadgen.HEADER.unpack_from(p.payload)[1:] for p in packets]


async def test_subscriber_counts_by_due_time_also_after_the_window() -> None:
    sub = loadgen.Subscriber(0, "bench/#", 0, [1])
    sub.connection_made(FakeTransport())
    now = loadgen.monotonic_ns()
    sub.w0, sub.w1 = now - 1_000_000_000, now - 500_000_000  # the window ended half a second ago
    sub.by_due_time = True
    due = [sub.w0 - 1, sub.w0, sub.w1 - 1, sub.w1]  # before, first, last, after
    sub.data_received(b"".join(encode(Publish("bench/x", loadgen.payload(1, k, t), qos=0), 4)
                               for k, t in enumerate(due)))
    # the latencies of the two due in the window; none received in it (the rate counts by receive time)
    assert (sub.delivered, sub.in_window, len(sub.latencies)) == (4, 0, 2)
    # measured from the due time, not from when it was written or read: at least the half second since w1
    assert min(sub.latencies) >= 500_000_000


async def test_paced_qos1_publisher_waits_for_its_window_and_stamps_due_times() -> None:
    pub = loadgen.PacedPublisher(0, "bench/p", 1, rate=1000, publishers=1, window=4)
    fake = FakeTransport()
    pub.connection_made(fake)
    t0 = loadgen.monotonic_ns() - 9_500_000  # 10 messages (1 ms apart) are due already: the publisher is late
    task = pub.begin(t0, t0 + 20_000_000)  # 20 before the end
    await asyncio.sleep(0)
    sent = publishes(bytes(fake.written))
    assert pub.limit == 20 and pub.outstanding == 4
    assert stamps(sent) == [(k, t0 + k * 1_000_000) for k in range(4)]  # its due time, not the send time
    fake.written.clear()
    ids = [p.packet_id for p in sent]
    assert None not in ids
    pub.data_received(encode(Puback(ids[1] or 0), 4) + encode(Puback(ids[0] or 0), 4))
    assert stamps(publishes(bytes(fake.written))) == [(4, t0 + 4_000_000), (5, t0 + 5_000_000)]
    pub.stop()  # the end: 14 due messages were never sent
    await asyncio.wait_for(task, 1)
    assert pub.result().behind == 14 and pub.sent == 6


async def test_paced_qos0_publisher_catches_up_and_stops_at_the_end() -> None:
    pub = loadgen.PacedPublisher(0, "bench/q", 0, rate=20_000, publishers=1, tick=0)
    fake = FakeTransport()
    pub.connection_made(fake)
    now = loadgen.monotonic_ns()
    t0 = now - 10_000_000  # 200 messages due already (every 50 us)
    task = pub.begin(t0, now + 20_000_000)
    await asyncio.wait_for(task, 2)
    r = pub.result()
    assert r.behind == 0 and pub.sent == pub.limit == 600
    sent = publishes(bytes(fake.written))
    assert stamps(sent) == [(k, t0 + k * 50_000) for k in range(600)]
    assert max(len(publishes(w)) for w in fake.writes) == MAX_BURST  # the backlog, in bursts
    lags = array.array("q")
    lags.frombytes(r.send_lags)
    assert lags[0] >= 10_000_000  # the first wake-up found a message due 10 ms before


@pytest.mark.parametrize("kwargs", [{"rate": 0.0}, {"rate": 10.0, "tick": 2.0}, {"rate": 10.0, "publishers": 0}])
async def test_paced_publisher_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"publishers": 1, **kwargs}
    with pytest.raises(ValueError):
        loadgen.PacedPublisher(0, "bench/q", 0, **args)
