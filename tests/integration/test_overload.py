"""Overload: several QoS 1 publishers, one subscriber that reads slowly at first. Every message the broker
acknowledged (PUBACK) must reach the QoS 1 subscriber: backpressure on the publishers rather than drops."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.clients import PUBACK, Closed, RawClient, enc_publish, unique

pytestmark = pytest.mark.integration


class Publisher(threading.Thread):
    """Pipelined QoS 1 publisher with a window of unacknowledged PUBLISHes; records what was acknowledged."""

    def __init__(self, port: int, version: int, topic: str, name: str, n: int, deadline: float,
                 window: int = 10, payload_size: int = 200):
        super().__init__(daemon=True)
        self.port, self.version, self.topic, self.name_, self.n = port, version, topic, name, n
        self.deadline, self.window, self.pad = deadline, window, b"." * payload_size
        self.acked: list[bytes] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c = RawClient(self.port, version=self.version)
            c.connect(unique(f"{self.name_}-"))
            outstanding: dict[int, bytes] = {}
            sent = 0
            while (sent < self.n or outstanding) and time.monotonic() < self.deadline:
                while sent < self.n and len(outstanding) < self.window:
                    pid = sent + 1
                    payload = f"{self.name_}:{sent}:".encode() + self.pad
                    c.send(enc_publish(self.topic, payload, qos=1, packet_id=pid, version=self.version))
                    outstanding[pid] = payload
                    sent += 1
                try:
                    p = c.recv(max(0.05, min(1.0, self.deadline - time.monotonic())))
                except TimeoutError:
                    continue  # backpressure: the broker is not reading us right now
                assert p.type == PUBACK, f"publisher got {p!r}"
                self.acked.append(outstanding.pop(p.packet_id))
            c.disconnect()
        except (AssertionError, Closed, OSError) as e:
            self.error = e


def run_fan_in(broker, clients, publishers: int, per_publisher: int, slow_seconds: float = 1.0):
    topic = unique("overload/")
    sub = clients.raw(broker, 4)
    sub.subscribe(topic, qos=1)
    deadline = time.monotonic() + 25
    pubs = [Publisher(broker.port, 4, topic, f"p{i}", per_publisher, deadline) for i in range(publishers)]
    for p in pubs:
        p.start()
    received: list[bytes] = []

    def take(timeout: float) -> bool:
        try:
            pkt = sub.recv(timeout)
        except TimeoutError:
            return False
        assert pkt.qos == 1, f"subscriber got {pkt!r}"
        received.append(pkt.payload)
        sub.ack(pkt)
        return True

    # slow phase: nothing read at all for a while, then one message every 20 ms
    t_slow_end = time.monotonic() + slow_seconds
    time.sleep(slow_seconds / 2)  # load shape (the subscriber stalls), not synchronisation
    while time.monotonic() < t_slow_end:
        take(0.05)
        time.sleep(0.02)
    # fast phase: read everything while the publishers finish
    while any(p.is_alive() for p in pubs) and time.monotonic() < deadline:
        take(0.05)
    for p in pubs:
        p.join(max(0.1, deadline - time.monotonic()))
    errors = [p.error for p in pubs if p.error]
    assert not errors, f"publisher errors: {errors}"
    acked = [m for p in pubs for m in p.acked]
    assert len(acked) == publishers * per_publisher, (
        f"only {len(acked)} of {publishers * per_publisher} publishes acknowledged before the deadline")
    # drain what is still queued for the subscriber (until complete, or 2 s without progress)
    idle_since = time.monotonic()
    while len(received) < len(acked) and time.monotonic() - idle_since < 2.0:
        if take(0.2):
            idle_since = time.monotonic()
    extra_deadline = time.monotonic() + 0.3
    while time.monotonic() < extra_deadline:
        take(0.1)
    missing = set(acked) - set(received)
    assert not missing, (f"{len(missing)} acknowledged messages never delivered (received {len(received)}, "
                         f"acked {len(acked)}), e.g. {[m.split(b':.')[0] for m in sorted(missing)[:5]]}")
    assert len(received) == len(acked), f"received {len(received)} for {len(acked)} acked (duplicates?)"
    # per publisher, order is preserved
    for p in pubs:
        seq = [int(m.split(b":")[1]) for m in received if m.startswith(f"{p.name_}:".encode())]
        assert seq == sorted(seq), f"{p.name_}: out of order"
    return len(acked)


def test_fan_in_slow_subscriber_within_queue_limit(broker, clients):
    """4 x 100 QoS 1 messages, below max_online_messages (1000): nothing may be lost."""
    assert run_fan_in(broker, clients, publishers=4, per_publisher=100) == 400


@pytest.mark.vmqpy_only("mosquitto drops QoS 1 messages for an online client beyond max_queued_messages "
                        "after acknowledging them; vmqpy applies backpressure to the publishers instead")
def test_fan_in_slow_subscriber_beyond_queue_limit_backpressure(broker_factory, clients):
    """4 x 150 QoS 1 messages with max_online_messages = 50: the queue limit is exceeded many times over, so
    the broker must stop reading the publishers instead of dropping what it acknowledged."""
    broker = broker_factory(max_online_messages=50)
    assert run_fan_in(broker, clients, publishers=4, per_publisher=150) == 600


@pytest.mark.vmqpy_only("mosquitto drops QoS 1 beyond max_queued_messages (see above)")
def test_fan_in_default_limits_1200_messages(broker, clients):
    """4 x 300 QoS 1 messages against the default max_online_messages = 1000."""
    assert run_fan_in(broker, clients, publishers=4, per_publisher=300, slow_seconds=1.5) == 1200
