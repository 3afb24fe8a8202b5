"""No client holds others back (issue 33, finding 2 and the bytes of finding 8), on a real node.

S subscribes `news/#` with a receive buffer of 4 KiB and never reads again (it keeps sending PINGREQ); G reads
and acknowledges; P publishes QoS 1 with a window of unacknowledged messages. Before queue.max_stall existed, P
got no PUBACK and G nothing after about 1,020 messages (S at QoS 1) or 2,529 (S at QoS 0), for as long as S
stayed. Now S may slow P for queue.max_stall seconds at most (QoS 0 not at all); after that S alone loses
(queue.overflow), and a persistent S keeps its QoS 1 messages up to max_offline_messages and gets them when it
reads again. The queue of a non-reader is bounded in bytes too (max_queued_bytes): the node's resident memory
stays under a bound derived from it; and a packet is at most 1 MiB by default (max_message_size).

The counts are asserted over bounded waits; the rates before and after the stall are printed, never asserted.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from tests.integration.clients import (
    DISCONNECT,
    PUBLISH,
    RawClient,
    enc_pingreq,
    enc_publish,
    unique,
)
from tests.integration.conftest import free_port, port_open, public_metrics, wait_until
from tests.integration.congestion import Publisher, Reader, non_reader
from tests.integration.process_usage import rss

pytestmark = [pytest.mark.integration,
              pytest.mark.vmqpy_only("queue.max_stall, queue.overflow and max_queued_bytes are vmqpy's")]

OVERFLOW_COUNTERS = ("vmqpy_queue_stalls_ended_total", "vmqpy_queue_overflow_dropped_total",
                     "vmqpy_queue_overflow_kept_total", "vmqpy_queue_overflow_disconnected_total")
QUEUED_BYTES = 8 * 1024 * 1024  # max_queued_bytes' default
DEADLINE = 90.0  # every wait of a test together, at most


def ping_until(stuck: list[RawClient], done: threading.Event, timeout: float) -> None:
    """The non-readers keep their connections alive (PINGREQ every second) until `done` or `timeout`."""
    deadline = time.monotonic() + timeout
    while not done.wait(1.0) and time.monotonic() < deadline:
        for s in stuck:
            try:
                s.send(enc_pingreq())
            except OSError:
                pass  # closed by the node (queue.overflow = disconnect)


def rate(times: list[float], since: float, until: float) -> float:
    return sum(1 for t in times if since <= t < until) / max(1e-9, until - since)


def report(what: str, times: list[float], started: float) -> None:
    """Messages per second in each 2-second window (printed, not asserted) and the longest gap."""
    if not times:
        print(f"{what}: nothing")
        return
    end = times[-1]
    starts = [started + 2.0 * i for i in range(int((end - started) / 2) + 1)]
    windows = [round(rate(times, t, t + 2.0)) for t in starts]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    print(f"{what}: {len(times)} in {end - started:.1f} s; per second by 2 s window: {windows}; "
          f"longest gap {max(gaps, default=0.0):.2f} s")


def log_text(broker) -> str:  # type: ignore[no-untyped-def]
    return Path(broker.log).read_text(errors="replace")


@pytest.mark.parametrize("stuck_qos", [0, 1])
def test_a_subscriber_that_never_reads_holds_nobody_back_for_long(broker, stuck_qos: int) -> None:
    """The publisher keeps getting PUBACKs and the reader keeps receiving, well past the 1,020 (QoS 1) or 2,529
    (QoS 0) messages after which both stopped for as long as the non-reader stayed."""
    prefix = unique("news")
    total = 5000  # of 4 KB: more than the socket buffers (up to 4 MiB on the node's side) and the queue take
    reader = Reader(broker.port, f"{prefix}/#")
    reader.start()
    stuck = non_reader(broker.port, f"{prefix}/#", stuck_qos)
    publisher = Publisher(broker.port, f"{prefix}/a", total, rate=400.0, payload_size=4000)
    started = time.monotonic()
    publisher.start()
    try:
        ping_until([stuck], publisher.done, DEADLINE)
        wait_until(lambda: len(reader.numbers) >= len(publisher.acked_at), 20.0, what="the reader to catch up")
    finally:
        publisher.stop.set()
        publisher.join(10)
        reader.stop.set()
        reader.join(5)
        stuck.close()
        reader.client.close()
    report("publisher PUBACKs", publisher.acked_at, started)
    report("reader", reader.received_at, started)
    assert publisher.error is None, publisher.error
    assert len(publisher.acked_at) == total, f"only {len(publisher.acked_at)} of {total} acknowledged"
    assert sorted(set(reader.numbers)) == list(range(total)), "the reader missed acknowledged messages"
    assert broker.alive()
    held = "held its publishers back for queue.max_stall" in log_text(broker)
    # QoS 0 never counts towards congestion: the non-reader at QoS 0 never held the publisher back at all
    assert held == (stuck_qos == 1), f"stall ended logged: {held}"


def overflow_counters(port: int) -> dict[str, float]:
    """The node's queue overflow counters, as GET /metrics shows them (metrics.public = on)."""
    return public_metrics(port, OVERFLOW_COUNTERS)


@pytest.mark.parametrize("policy", ["queue", "drop"])
def test_a_persistent_non_reader_gets_its_qos1_messages_when_it_reads_again(broker_factory, policy: str) -> None:
    """Past the stall, a persistent session keeps its QoS 1 messages (queue.overflow = queue, the default: up to
    max_offline_messages) instead of holding the publisher back, and nothing acknowledged is lost: all of them
    arrive once it reads again. With `drop` (VerneMQ's way) it gets all but those /metrics counts as dropped."""
    http = free_port()
    extra: dict[str, object] = {"max_offline_messages": 3000, "listener.http.default": f"127.0.0.1:{http}",
                                "metrics.public": "on"}
    if policy != "queue":
        extra["queue.overflow"] = policy
    broker = broker_factory(**extra)
    wait_until(lambda: port_open(http), 10.0, what="the HTTP listener")
    at_start = overflow_counters(http)
    assert at_start == {"vmqpy_queue_stalls_ended_total": 0.0, "vmqpy_queue_overflow_dropped_total": 0.0,
                        "vmqpy_queue_overflow_kept_total": 0.0, "vmqpy_queue_overflow_disconnected_total": 0.0}
    prefix = unique("news")
    total = 2500
    client_id = unique("stuck-persistent-")
    stuck = non_reader(broker.port, f"{prefix}/#", 1, clean=False, client_id=client_id)
    publisher = Publisher(broker.port, f"{prefix}/a", total, rate=400.0)
    started = time.monotonic()
    publisher.start()
    try:
        ping_until([stuck], publisher.done, DEADLINE)
        report("publisher PUBACKs", publisher.acked_at, started)
        assert publisher.error is None, publisher.error
        assert len(publisher.acked_at) == total, f"only {len(publisher.acked_at)} of {total} acknowledged"
        counters = overflow_counters(http)
        print(f"queue.overflow = {policy}: {counters}")
        dropped = int(counters["vmqpy_queue_overflow_dropped_total"])
        numbers: list[int] = []
        deadline = time.monotonic() + 60.0
        while len(set(numbers)) < total - dropped and time.monotonic() < deadline:  # it reads again, acknowledging
            try:
                p = stuck.recv(5.0)
            except TimeoutError:
                break
            if p.type == PUBLISH:
                stuck.ack(p)
                numbers.append(int(p.payload.split(b":")[0]))
    finally:
        publisher.stop.set()
        publisher.join(10)
        stuck.close()
    assert counters["vmqpy_queue_stalls_ended_total"] == 1
    if policy == "queue":
        assert dropped == 0 and counters["vmqpy_queue_overflow_kept_total"] > 0, counters
        missing = sorted(set(range(total)) - set(numbers))
        assert not missing, f"{len(missing)} acknowledged messages never delivered, from {missing[:5]}"
    else:
        assert dropped > 0 and counters["vmqpy_queue_overflow_kept_total"] == 0, counters
        assert len(set(numbers)) == total - dropped, f"got {len(set(numbers))} of {total} with {dropped} dropped"
    firsts = list(dict.fromkeys(numbers))
    assert firsts == sorted(firsts), "out of order"


def test_a_non_reader_is_disconnected_with_queue_overflow_disconnect(broker_factory) -> None:
    broker = broker_factory(**{"queue.overflow": "disconnect", "queue.max_stall": "1s"})
    prefix = unique("news")
    total = 2000
    stuck = non_reader(broker.port, f"{prefix}/#", 1, version=5)
    publisher = Publisher(broker.port, f"{prefix}/a", total, rate=500.0)
    publisher.start()
    try:
        ping_until([], publisher.done, DEADLINE)
        assert len(publisher.acked_at) == total, f"only {len(publisher.acked_at)} of {total} acknowledged"
        stuck.wait_closed(30.0)  # what it did not read, then the end of the connection
    finally:
        publisher.stop.set()
        publisher.join(10)
        stuck.close()
    assert "disconnected: it held its publishers back for queue.max_stall" in log_text(broker)


def test_the_queues_of_non_readers_are_bounded_in_bytes(broker) -> None:
    """Two non-readers of 100 KB QoS 1 messages: the node's resident memory grows by less than their two byte
    bounds and what is in flight to them and the reader (with room for the allocator), where it grew by 196 MiB
    (1,000 queued messages each)."""
    prefix = unique("big")
    total, size = 1500, 100_000
    reader = Reader(broker.port, f"{prefix}/#")
    reader.start()
    stuck = [non_reader(broker.port, f"{prefix}/#", 1) for _ in range(2)]
    wait_until(lambda: rss(broker.pid) // 1024 > 0, 5.0)
    before = rss(broker.pid) // 1024
    publisher = Publisher(broker.port, f"{prefix}/a", total, rate=150.0, payload_size=size)
    peak = before
    started = time.monotonic()
    publisher.start()
    try:
        deadline = time.monotonic() + DEADLINE
        while not publisher.done.wait(0.25) and time.monotonic() < deadline:
            peak = max(peak, rss(broker.pid) // 1024)
            for s in stuck:
                s.send(enc_pingreq())
        peak = max(peak, rss(broker.pid) // 1024)
        wait_until(lambda: len(reader.numbers) >= len(publisher.acked_at), 30.0, what="the reader to catch up")
    finally:
        publisher.stop.set()
        publisher.join(10)
        reader.stop.set()
        reader.join(5)
        for s in stuck:
            s.close()
        reader.client.close()
    report("publisher PUBACKs", publisher.acked_at, started)
    in_flight = 3 * 20 * size  # max_inflight_messages to each of the three subscribers
    bound_kib = (2 * QUEUED_BYTES + in_flight) // 1024 + 48 * 1024  # 48 MiB for the allocator and the rest
    print(f"node RSS {before // 1024} MiB before, {peak // 1024} MiB at the peak; bound +{bound_kib // 1024} MiB")
    assert peak - before < bound_kib, f"the node grew by {(peak - before) // 1024} MiB"
    assert publisher.error is None, publisher.error
    assert len(publisher.acked_at) == total, f"only {len(publisher.acked_at)} of {total} acknowledged"
    assert sorted(set(reader.numbers)) == list(range(total))


def test_the_default_largest_packet_is_one_mib(broker) -> None:
    """Without max_message_size the node announces and enforces 1 MiB (it took 256 MB): one packet of a client
    can no longer make the node hold hundreds of megabytes."""
    topic = unique("big/")
    reader = RawClient(broker.port, version=5)
    reader.connect(unique("reader-"))
    reader.subscribe(topic, qos=1)
    c = RawClient(broker.port, version=5)
    ack = c.connect(unique("big-"))
    assert ack.props.get("maximum_packet_size") == 1024 * 1024, ack
    c.publish(topic, b"x" * (1024 * 1024 - 100), qos=1)  # a packet just under the bound is served
    assert len(reader.recv_publishes(1)[0].payload) == 1024 * 1024 - 100
    c.send(enc_publish(topic, b"x" * (1024 * 1024), qos=1, packet_id=9, version=5))  # over it by its header
    got = c.wait_closed(10.0)
    assert [(p.type, p.reason_code) for p in got] == [(DISCONNECT, 0x95)], got
    reader.close()
