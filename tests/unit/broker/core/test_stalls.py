"""No subscriber holds its publishers back for ever (vmqpy.broker.core.stalls, docs/broker.md "Overload"): QoS 0 never
congests a session, its queue is bounded in bytes as well as messages, and once a congested session has held
publishers back for queue.max_stall seconds it lets them go and loses (or keeps on disk) what it cannot take."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.broker.core.session import Session, message_size
from vmqpy.broker.core.stalls import StallBound
from vmqpy.config_schema import SCHEMA
from vmqpy.mqtt.packets import Packet
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Delivery


class Sink:
    """A connection whose socket takes nothing (`writable` False) until told otherwise."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.writable = False

    def write_packet(self, packet: Packet) -> None:
        pass

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False) -> None:
        self.published.append(message.topic)

    def can_write(self) -> bool:
        return self.writable

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        return None, 0.0


def online(max_online: int = 4, max_offline: int = 10, max_bytes: int = 0, expiry: float | None = None,
           metrics: Counter[str] | None = None) -> tuple[Session, Sink]:
    s = Session("s", protocol_level=5, expiry_interval=expiry, max_inflight=2, max_online=max_online,
                max_offline=max_offline, max_bytes=max_bytes, metrics=metrics)
    sink = Sink()
    s.attach(sink, 65535, 0, 0.0)
    return s, sink


def msg(n: int, qos: int = 1, size: int = 10) -> Message:
    return Message(f"t/{n}", b"x" * size, qos)  # topic of 3 or 4 bytes and `size` bytes of payload


def test_qos0_never_congests_and_is_dropped_for_a_full_queue() -> None:
    s, _sink = online(max_online=2)
    outcomes = [s.deliver(msg(i, qos=0), 0, False, [], 0.0) for i in range(5)]
    assert outcomes == [Delivery.QUEUED] * 2 + [Delivery.DROPPED] * 3
    assert not s.congested and s.dropped == 3
    assert s.deliver(msg(9), 1, False, [], 0.0) is Delivery.QUEUED  # QoS 1 counts on its own
    assert not s.congested


def test_the_queue_is_bounded_in_bytes() -> None:
    s, _sink = online(max_online=1000, max_bytes=100)
    for i in range(2):
        assert s.deliver(msg(i, size=40), 1, False, [], 0.0) is Delivery.QUEUED
    assert s.queued_bytes == 86 and not s.congested
    assert s.deliver(msg(2, qos=0, size=40), 0, False, [], 0.0) is Delivery.DROPPED  # QoS 0 beyond the bytes
    assert s.deliver(msg(3, size=40), 1, False, [], 0.0) is Delivery.QUEUED  # QoS 1: kept, publishers slowed
    assert s.congested


def test_an_offline_queue_is_bounded_in_bytes() -> None:
    s = Session("s", protocol_level=5, expiry_interval=None, max_inflight=2, max_online=10, max_offline=10,
                max_bytes=50)
    assert s.deliver(msg(1, size=40), 1, False, [], 0.0) is Delivery.QUEUED
    assert s.deliver(msg(2, size=40), 1, False, [], 0.0) is Delivery.DROPPED
    assert s.dropped == 1 and s.queued_bytes == 43


def test_bytes_are_counted_out_as_messages_leave() -> None:
    s, sink = online(max_online=1000, max_bytes=1000)
    for i in range(5):
        s.deliver(msg(i, size=40), 1, False, [], 0.0)
    assert s.queued_bytes == 5 * 43
    sink.writable = True
    s.pump(0.0)  # two go out (the window)
    assert s.queued_bytes == 3 * 43
    s.detach(1.0)
    s.forget_upto(10)
    assert s.queued_bytes == 0


def test_a_congested_session_holds_publishers_back_for_max_stall_only() -> None:
    metrics: Counter[str] = Counter()
    s, _sink = online(max_online=2, expiry=0.0, metrics=metrics)
    stalls = StallBound(5.0)
    for i in range(2):
        s.deliver(msg(i), 1, False, [], 10.0)
    assert s.congested
    released: list[int] = []
    s.wait_for_drain(lambda: released.append(1))
    stalls.watch([s], 10.0)
    stalls.watch([s], 12.0)  # still the same stall: its clock runs from 10
    assert stalls.due(14.9) == [] and released == []
    assert stalls.due(15.0) == [s] and len(stalls) == 0
    s.overflow(s.max_online)  # what the broker does for a clean session (queue.overflow = queue)
    assert released == [1] and not s.congested
    # now it loses itself: QoS 0 at once, QoS 1/2 beyond its limit (a clean session: max_online)
    assert s.deliver(msg(7, qos=0), 0, False, [], 16.0) is Delivery.DROPPED
    assert s.deliver(msg(8), 1, False, [], 16.0) is Delivery.DROPPED
    assert metrics["queue_overflow_dropped"] == 2 and metrics["queue_message_drop"] == 2


def test_an_overflowing_persistent_session_keeps_qos1_up_to_its_limit() -> None:
    metrics: Counter[str] = Counter()
    s, sink = online(max_online=2, max_offline=4, metrics=metrics)
    for i in range(2):
        s.deliver(msg(i), 1, False, [], 0.0)
    s.overflow(4)
    outcomes = [s.deliver(msg(i), 1, False, [], 0.0) for i in range(2, 5)]
    assert outcomes == [Delivery.QUEUED, Delivery.QUEUED, Delivery.DROPPED]
    assert metrics["queue_overflow_kept"] == 2 and metrics["queue_overflow_dropped"] == 1
    # it reads again: everything it kept is delivered, and once it drained to half it is an ordinary session
    sink.writable = True
    for packet_id in range(1, 5):
        s.pump(0.0)
        s.on_puback(packet_id, 0.0)
    assert sink.published == ["t/0", "t/1", "t/2", "t/3"]
    assert s.overflow_limit is None and s.stalled_since is None


def test_a_session_that_drains_in_time_is_not_due() -> None:
    s, sink = online(max_online=2)
    stalls = StallBound(5.0)
    for i in range(2):
        s.deliver(msg(i), 1, False, [], 0.0)
    s.wait_for_drain(lambda: None)
    stalls.watch([s], 0.0)
    sink.writable = True
    s.pump(1.0)
    for packet_id in (1, 2):
        s.on_puback(packet_id, 1.0)
    assert stalls.due(10.0) == [] and len(stalls) == 0 and s.stalled_since is None


def test_no_bound_when_max_stall_is_zero() -> None:
    s, _sink = online(max_online=1)
    stalls = StallBound(0.0)
    s.deliver(msg(1), 1, False, [], 0.0)
    stalls.watch([s], 0.0)
    assert stalls.due(1e9) == [] and s.stalled_since is None


def test_the_defaults() -> None:
    assert SCHEMA["queue.max_stall"].default == 5.0
    assert SCHEMA["queue.overflow"].default == "queue"
    assert SCHEMA["max_queued_bytes"].default == 8 * 1024 * 1024


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("deliver"), st.integers(0, 2), st.integers(0, 60)),
    st.tuples(st.just("writable"), st.booleans(), st.just(0)),
    st.tuples(st.just("pump"), st.just(0), st.just(0)),
    st.tuples(st.just("puback"), st.integers(1, 8), st.just(0)),
    st.tuples(st.just("detach"), st.just(0), st.just(0)),
    st.tuples(st.just("attach"), st.just(0), st.just(0)),
    st.tuples(st.just("overflow"), st.integers(1, 6), st.just(0)),
    st.tuples(st.just("forget"), st.integers(0, 40), st.just(0)),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(operations=OPERATIONS, max_online=st.integers(1, 5), max_bytes=st.sampled_from([0, 60, 200]))
def test_the_queue_counts_match_its_messages_and_an_empty_queue_never_congests(
        operations: list[tuple[str, int, int]], max_online: int, max_bytes: int) -> None:
    """The byte and QoS 0 counts follow the queue through every change, and a session whose queue is empty is
    never congested (Router._deliver asks `congested` only of a session with something queued)."""
    s, sink = online(max_online=max_online, max_offline=6, max_bytes=max_bytes, expiry=60.0)
    for n, (op, a, b) in enumerate(operations):
        now = float(n)
        if op == "deliver":
            s.deliver(msg(n, qos=a, size=b), a, False, [], now)
        elif op == "writable":
            sink.writable = bool(a)
        elif op == "pump":
            s.pump(now)
        elif op == "puback":
            s.on_puback(a, now)
        elif op == "detach" and s.sink is not None:
            s.detach(now)
        elif op == "attach" and s.sink is None:
            s.attach(sink, 65535, 0, now)
        elif op == "overflow" and s.sink is not None:
            s.overflow(a)
        elif op == "forget":
            s.forget_upto(a)
        queued = list(s.queue)
        assert s.queued_bytes == sum(message_size(out.message) for out in queued)
        assert s._queued_qos0 == sum(1 for out in queued if out.qos == 0)
        if not queued:
            assert not s.congested
