"""The drain pacing (vmqpy.drain): table tests with concrete times, and properties of whole simulated drains."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.drain import RECHECK_INTERVAL, Drain, Outcome


@pytest.mark.parametrize(
    ("rate", "now", "waiting", "expected", "wake_at"),
    [
        (10.0, 100.0, ["a", "b", "c"], ["a"], 100.1),  # one token at the start, the next 1/rate later
        (10.0, 100.25, ["a", "b", "c", "d"], ["a", "b", "c"], 100.3),  # 1 + floor(0.25 * 10) tokens
        (2.0, 101.0, ["a", "b"], ["a", "b"], 101.0 + RECHECK_INTERVAL),  # everyone told: look again soon
        (1000.0, 100.0, ["a"], ["a"], 100.0 + RECHECK_INTERVAL),
        (0.5, 103.9, ["a", "b", "c"], ["a", "b"], 104.0),
    ],
)
def test_first_step(rate: float, now: float, waiting: list[str], expected: list[str], wake_at: float) -> None:
    drain = Drain(rate=rate, timeout=60.0, started=100.0)
    step = drain.step(now, waiting, 0)
    assert step.disconnect == expected
    assert step.outcome is Outcome.DRAINING
    assert step.wake_at == pytest.approx(wake_at)
    assert drain.disconnected == len(expected)


def test_paced_sequence() -> None:
    drain = Drain(rate=4.0, timeout=10.0, started=0.0)
    clients = list("abcdef")
    told: list[str] = []
    assert drain.step(0.0, clients, 0).disconnect == ["a"]
    told.append("a")
    assert drain.step(0.1, clients[1:], 1).disconnect == []  # no token yet
    step = drain.step(0.25, clients[1:], 1)
    assert step.disconnect == ["b"]
    assert step.wake_at == pytest.approx(0.5)
    assert drain.step(1.0, clients[2:], 0).disconnect == ["c", "d", "e"]  # 5 tokens by t=1, 2 used
    assert drain.step(1.1, clients[5:], 0).disconnect == []
    assert drain.step(1.25, clients[5:], 0).disconnect == ["f"]
    assert drain.step(1.3, [], 1).outcome is Outcome.DRAINING  # told, not gone yet
    assert drain.step(1.4, [], 0).outcome is Outcome.EMPTY


def test_empty_node_is_drained_at_once() -> None:
    drain = Drain(rate=1.0, timeout=5.0, started=0.0)
    step = drain.step(0.0, list[str](), 0)
    assert (step.disconnect, step.outcome, step.wake_at) == ([], Outcome.EMPTY, None)


def test_timeout_stops_the_drain_and_it_stays_over() -> None:
    drain = Drain(rate=1.0, timeout=2.0, started=0.0)
    assert drain.step(0.0, ["a", "b", "c", "d"], 0).disconnect == ["a"]
    step = drain.step(1.5, ["b", "c", "d"], 1)
    assert step.disconnect == ["b"]
    assert step.wake_at == pytest.approx(2.0)  # never later than the deadline
    over = drain.step(2.0, ["c", "d"], 0)
    assert (over.disconnect, over.outcome, over.wake_at) == ([], Outcome.TIMED_OUT, None)
    assert drain.step(9.0, [], 0).outcome is Outcome.TIMED_OUT  # an over drain does not start again


def test_clients_still_leaving_at_the_deadline_time_out() -> None:
    drain = Drain(rate=100.0, timeout=1.0, started=0.0)
    drain.step(0.0, ["a"], 0)
    assert drain.step(1.0, [], 1).outcome is Outcome.TIMED_OUT


@pytest.mark.parametrize(("rate", "timeout"), [(0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0), (math.inf, 1.0),
                                               (1.0, -0.5), (1.0, math.nan), (1.0, math.inf)])
def test_bad_parameters_are_refused(rate: float, timeout: float) -> None:
    with pytest.raises(ValueError, match="drain"):
        Drain(rate=rate, timeout=timeout, started=0.0)


@given(
    rate=st.floats(min_value=0.1, max_value=1000.0),
    clients=st.integers(min_value=0, max_value=200),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=300),
)
def test_a_whole_drain(rate: float, clients: int, gaps: list[float]) -> None:
    """Driven at arbitrary times, with every client gone as soon as it is told: each client is told exactly once,
    in order; by any time t no more than 1 + rate * t clients were told; the drain ends EMPTY or TIMED_OUT and
    asks to be woken no later than its deadline."""
    timeout = 30.0
    drain = Drain(rate=rate, timeout=timeout, started=0.0)
    waiting = list(range(clients))
    told: list[int] = []
    now = 0.0
    for gap in gaps:
        step = drain.step(now, waiting, 0)
        told.extend(step.disconnect)
        waiting = waiting[len(step.disconnect):]
        assert len(told) <= 1 + rate * now + 1e-9
        if step.outcome is not Outcome.DRAINING:
            assert step.wake_at is None
            assert (step.outcome is Outcome.EMPTY) == (not waiting)
            break
        assert step.wake_at is not None and now <= step.wake_at <= drain.deadline
        now += gap
    assert told == list(range(len(told)))


@given(rate=st.floats(min_value=0.1, max_value=1000.0), clients=st.integers(min_value=1, max_value=300))
def test_woken_when_asked_a_drain_ends_in_time(rate: float, clients: int) -> None:
    """A driver that sleeps exactly until `wake_at` empties the node within the time the rate needs (or times
    out), in a bounded number of steps."""
    drain = Drain(rate=rate, timeout=3600.0, started=0.0)
    waiting = list(range(clients))
    now = 0.0
    for _ in range(clients + 10):
        step = drain.step(now, waiting, 0)
        waiting = waiting[len(step.disconnect):]
        if step.wake_at is None:
            break
        now = step.wake_at
    assert drain.outcome is Outcome.EMPTY
    assert now <= (clients - 1) / rate + RECHECK_INTERVAL + 1e-6
