"""The node's queue counters a session keeps in the broker's metrics (VerneMQ's queue_message_in, _out, _drop,
_expired, as admin.prometheus publishes them from the session's keys): monotonic per node, whatever becomes of
the sessions, and the session's own `dropped` beside them."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from admin.prometheus import families
from tests.unit.broker.fakes import RecordingSink
from tests.unit.broker.sessions import msg
from vmqpy.broker.core.session import Session
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery, Outgoing, OutState

KEYS = ("queue_message_in", "queue_message_out", "queue_message_drop", "queue_message_expired")


def session(metrics: Counter[str], max_inflight: int = 2, max_online: int = 3, max_offline: int = 2) -> Session:
    return Session("c1", protocol_level=5, expiry_interval=None, max_inflight=max_inflight, max_online=max_online,
                   max_offline=max_offline, metrics=metrics)


def counts(metrics: Counter[str]) -> tuple[int, ...]:
    """The four published counters (in, out, drop, expired) of the node keys, as /metrics shows them."""
    published = {f.name: f.samples[0][1] for f in families({f"broker.{k}": v for k, v in metrics.items()}) if f.samples}
    return tuple(int(published.get(key, 0)) for key in KEYS)


def test_written_at_once_is_in_and_out() -> None:
    metrics: Counter[str] = Counter()
    s, sink = session(metrics), RecordingSink()
    s.attach(sink, 65535, 0, 0.0)
    assert s.deliver(msg(1, qos=0), 0, False, [], 0.0) is Delivery.SENT
    assert s.deliver(msg(2, qos=1), 1, False, [], 0.0) is Delivery.SENT
    assert counts(metrics) == (2, 2, 0, 0)
    assert metrics == Counter({"queue_message_direct": 2})  # one increment per message written at once


def test_queued_is_in_and_out_when_written_and_resends_are_not_counted() -> None:
    metrics: Counter[str] = Counter()
    s, sink = session(metrics, max_inflight=1), RecordingSink()
    s.attach(sink, 65535, 0, 0.0)
    s.deliver(msg(1), 1, False, [], 0.0)
    assert s.deliver(msg(2), 1, False, [], 0.0) is Delivery.QUEUED
    assert counts(metrics) == (2, 1, 0, 0)
    s.on_puback(1, 0.0)  # the queued one goes out
    assert counts(metrics) == (2, 2, 0, 0)
    s.detach(1.0)
    s.attach(RecordingSink(), 65535, 0, 2.0)  # resends message 2 with DUP: not out again
    assert counts(metrics) == (2, 2, 0, 0)


def test_drops_count_on_the_node_and_in_the_session() -> None:
    metrics: Counter[str] = Counter()
    s = session(metrics, max_offline=1)
    assert s.deliver(msg(1, qos=0), 0, False, [], 0.0) is Delivery.DROPPED  # QoS 0 to a client gone
    assert s.deliver(msg(2), 1, False, [], 0.0) is Delivery.QUEUED
    assert s.deliver(msg(3), 1, False, [], 0.0) is Delivery.DROPPED  # the offline queue is full
    assert counts(metrics) == (1, 0, 2, 0) and s.dropped == 2


def test_qos0_waiting_for_a_connection_that_goes_is_dropped() -> None:
    metrics: Counter[str] = Counter()
    s, sink = session(metrics), RecordingSink()
    s.attach(sink, 65535, 0, 0.0)
    sink.writable = False
    s.deliver(msg(1, qos=0), 0, False, [], 0.0)
    s.deliver(msg(2, qos=1), 1, False, [], 0.0)
    s.detach(1.0)
    assert counts(metrics) == (2, 0, 1, 0) and s.dropped == 1


def test_a_message_larger_than_the_clients_maximum_is_dropped() -> None:
    metrics: Counter[str] = Counter()
    s = session(metrics)
    s.attach(RecordingSink(), 65535, 20, 0.0)
    big = Message("t/big", b"x" * 100, 1)
    assert s.deliver(big, 1, False, [], 0.0) is Delivery.DROPPED
    assert counts(metrics) == (0, 0, 1, 0)


def test_expired_in_the_offline_queue_is_counted_expired_not_dropped() -> None:
    metrics: Counter[str] = Counter()
    s = session(metrics)
    s.deliver(msg(1, expires_at=5.0), 1, False, [], 0.0)
    s.deliver(msg(2), 1, False, [], 0.0)
    s.attach(RecordingSink(), 65535, 0, 10.0)
    assert counts(metrics) == (2, 1, 0, 1) and s.dropped == 0


def test_expired_in_flight_at_resume_was_out_already() -> None:
    metrics: Counter[str] = Counter()
    s = session(metrics)
    s.attach(RecordingSink(), 65535, 0, 0.0)
    s.deliver(msg(1, expires_at=5.0), 1, False, [], 0.0)
    s.detach(1.0)
    s.attach(RecordingSink(), 65535, 0, 10.0)
    assert counts(metrics) == (1, 1, 0, 0) and not s.inflight


def test_a_handed_over_message_that_cannot_be_resumed_is_dropped() -> None:
    metrics: Counter[str] = Counter()
    s = session(metrics)
    s.attach(RecordingSink(), 65535, 0, 0.0)
    out = Outgoing(1, msg(1, qos=2), 2, False, packet_id=7, state=OutState.RELEASED)
    assert s.adopt(out) is False
    assert counts(metrics) == (0, 0, 1, 0)


def test_the_node_counter_outlives_the_session() -> None:
    metrics: Counter[str] = Counter()
    first = session(metrics, max_offline=0)
    first.deliver(msg(1), 1, False, [], 0.0)
    del first
    second = session(metrics, max_offline=0)
    second.deliver(msg(2), 1, False, [], 0.0)
    assert metrics["queue_message_drop"] == 2  # a counter of the node, not a sum over the sessions alive


def test_a_session_without_the_nodes_counter_counts_for_itself() -> None:
    s = Session("c1", protocol_level=4, expiry_interval=0, max_inflight=1, max_online=1, max_offline=1)
    s.deliver(msg(1, qos=0), 0, False, [], 0.0)
    assert s.metrics["queue_message_drop"] == 1 and s.dropped == 1


@given(st.lists(st.tuples(st.sampled_from(["deliver0", "deliver1", "ack", "attach", "detach", "block", "unblock"]),
                          st.integers(min_value=0, max_value=3)), max_size=60))
def test_every_message_taken_is_accounted_for(steps: list[tuple[str, int]]) -> None:
    """Taken (in) = written (out) + dropped after it was taken + expired + still waiting, whatever happens; and
    the counters never go down."""
    metrics: Counter[str] = Counter()
    s = session(metrics, max_inflight=2, max_online=3, max_offline=3)
    sink: RecordingSink | None = None
    refused = 0  # dropped before being taken (Delivery.DROPPED)
    now = 0.0
    last = counts(metrics)
    for n, (step, arg) in enumerate(steps):
        now += 1.0
        if step in ("deliver0", "deliver1"):
            qos = 0 if step == "deliver0" else 1
            expires = now + arg if arg else None
            if s.deliver(msg(n, qos=qos, expires_at=expires), qos, False, [], now) is Delivery.DROPPED:
                refused += 1
        elif step == "ack" and s.inflight:
            s.on_puback(next(iter(s.inflight)), now)
        elif step == "attach" and sink is None:
            sink = RecordingSink()
            s.attach(sink, 65535, 0, now)
        elif step == "detach" and sink is not None:
            s.detach(now)
            sink = None
        elif step == "block" and sink is not None:
            sink.writable = False
        elif step == "unblock" and sink is not None:
            sink.writable = True
            s.pump(now)
        current = counts(metrics)
        assert all(a >= b for a, b in zip(current, last, strict=True))
        last = current
    taken, written, dropped, expired = counts(metrics)
    # a message in flight was written already (counted out); what still waits is the queue
    assert taken == written + (dropped - refused) + expired + len(s.queue)
    assert s.dropped == dropped
