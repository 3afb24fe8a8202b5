"""The clients of a congested topic, each in its own thread or socket: a paced QoS 1 publisher, a subscriber that
reads everything, and one that never reads after its SUBACK."""

from __future__ import annotations

import threading
import time

from tests.integration.clients import PUBACK, PUBLISH, Closed, RawClient, enc_publish, unique


class Publisher(threading.Thread):
    """QoS 1 at about `rate` messages a second with at most `window` unacknowledged; records when each PUBACK
    came."""

    def __init__(self, port: int, topic: str, count: int, rate: float, payload_size: int = 1000,
                 window: int = 20) -> None:
        super().__init__(daemon=True)
        self.port, self.topic, self.count, self.rate, self.window = port, topic, count, rate, window
        self.pad = b"." * payload_size
        self.acked_at: list[float] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            c = RawClient(self.port)
            c.connect(unique("pub-"))
            start = time.monotonic()
            outstanding: set[int] = set()
            sent = 0
            while len(self.acked_at) < self.count and not self.stop.is_set():
                due = start + sent / self.rate
                while sent < self.count and len(outstanding) < self.window and time.monotonic() >= due:
                    c.send(enc_publish(self.topic, b"%d:" % sent + self.pad, qos=1, packet_id=sent % 65535 + 1))
                    outstanding.add(sent % 65535 + 1)
                    sent += 1
                    due = start + sent / self.rate
                try:
                    p = c.recv(max(0.005, min(0.2, due - time.monotonic())))
                except TimeoutError:
                    continue
                assert p.type == PUBACK, f"publisher got {p!r}"
                outstanding.discard(p.packet_id or 0)
                self.acked_at.append(time.monotonic())
            c.disconnect()
        except (AssertionError, Closed, OSError) as e:
            self.error = e
        finally:
            self.done.set()


class Reader(threading.Thread):
    """A subscriber that reads and acknowledges everything; records the message numbers and when they came."""

    def __init__(self, port: int, topic_filter: str) -> None:
        super().__init__(daemon=True)
        self.client = RawClient(port)
        self.client.connect(unique("reader-"))
        self.client.subscribe(topic_filter, qos=1)
        self.numbers: list[int] = []
        self.received_at: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                p = self.client.recv(0.2)
            except TimeoutError:
                continue
            except (Closed, OSError):
                return
            if p.type == PUBLISH:
                self.client.ack(p)
                self.numbers.append(int(p.payload.split(b":")[0]))
                self.received_at.append(time.monotonic())


def non_reader(port: int, topic_filter: str, qos: int, clean: bool = True, client_id: str | None = None,
               version: int = 4) -> RawClient:
    """CONNECT and SUBSCRIBE with a 4 KiB receive buffer; after the SUBACK the test never reads it."""
    s = RawClient(port, version=version, receive_buffer=4096)
    s.connect(client_id or unique("stuck-"), clean=clean)
    s.subscribe(topic_filter, qos=qos)
    return s
