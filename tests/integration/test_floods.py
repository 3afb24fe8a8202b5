"""Slow clients and floods (docs/security.md "Slow clients and floods", issue 15): sockets that never complete a
CONNECT are closed by `mqtt.connect_timeout` while real clients go on publishing and receiving; a flood of idle
sockets, at or under `listener.max_connections`, does not stop the clients already served; a CONNECT announcing
more bytes than allowed is refused on its fixed header, before its body is sent. Outcomes only (closed,
delivered), every wait bounded. bench/flood.py measures the same attacks at full size.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from tests.integration.clients import RawClient, enc_connect, unique
from tests.integration.conftest import Broker, assert_serving, free_port, wait_until

pytestmark = pytest.mark.vmqpy_only("mqtt.connect_timeout and the CONNECT size bound are vmqpy's")

# A CONNECT whose last byte never comes: a long client id, so that one byte a second lasts minutes.
SLOW_CONNECT = enc_connect("slowloris-" + "x" * 240)[:-1]


class AttackSockets:
    """`count` raw sockets to `port` that never complete a CONNECT; `closed_by_node` counts the ones the node
    closed (end of stream or reset seen by `poll`)."""

    def __init__(self, port: int, count: int) -> None:
        self.open: list[socket.socket] = []
        self.sent: dict[socket.socket, int] = {}
        self.closed_by_node = 0
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
            sock.setblocking(False)
            self.open.append(sock)
            self.sent[sock] = 0

    def trickle(self) -> None:
        """One more byte of the slow CONNECT on every open socket."""
        for sock in self.open:
            sent = self.sent[sock]
            if sent < len(SLOW_CONNECT):
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    sock.send(SLOW_CONNECT[sent:sent + 1])
                    self.sent[sock] = sent + 1

    def poll(self) -> int:
        """Count the sockets the node closed since the last poll; how many are still open."""
        still = []
        for sock in self.open:
            try:
                closed = sock.recv(4096) == b""
            except BlockingIOError:
                closed = False
            except ConnectionError:
                closed = True
            if closed:
                self.closed_by_node += 1
                sock.close()
            else:
                still.append(sock)
        self.open = still
        return len(still)

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.open = []


@pytest.fixture
def attack() -> Iterator[Callable[[int, int], AttackSockets]]:
    made: list[AttackSockets] = []

    def make(port: int, count: int) -> AttackSockets:
        made.append(AttackSockets(port, count))
        return made[-1]

    yield make
    for sockets in made:
        sockets.close()


class RoundTrips:
    """A QoS 1 publisher and subscriber that exchange one message per `once()`."""

    def __init__(self, broker: Broker) -> None:
        self.topic = unique("flood/")
        self.subscriber = broker.raw()
        self.subscriber.connect(unique("flood-sub"))
        self.subscriber.subscribe(self.topic, qos=1)
        self.publisher = broker.raw()
        self.publisher.connect(unique("flood-pub"))
        self.sent = 0
        self.delivered = 0

    def once(self) -> None:
        self.sent += 1
        payload = f"m{self.sent}".encode()
        self.publisher.publish(self.topic, payload, qos=1)
        [message] = self.subscriber.recv_publishes(1, timeout=10.0)
        assert message.payload == payload
        self.delivered += 1

    def close(self) -> None:
        self.publisher.close()
        self.subscriber.close()


def test_slow_loris_sockets_are_closed_by_the_connect_timeout_while_a_client_is_served(
        broker_factory: Callable[..., Broker], attack: Callable[[int, int], AttackSockets]) -> None:
    broker = broker_factory(**{"mqtt.connect_timeout": "2s"})
    probe = RoundTrips(broker)
    sockets = attack(broker.port, 300)
    for _ in range(30):  # one byte a second each, bounded: 30 s at most
        sockets.trickle()
        probe.once()
        if sockets.poll() == 0:
            break
        time.sleep(1.0)
    assert sockets.closed_by_node == 300
    assert max(sockets.sent.values()) < len(SLOW_CONNECT)  # every CONNECT was still incomplete
    assert probe.delivered == probe.sent
    probe.close()
    assert_serving(broker)


def test_a_flood_of_idle_sockets_does_not_stop_real_clients(
        broker_factory: Callable[..., Broker], attack: Callable[[int, int], AttackSockets]) -> None:
    broker = broker_factory(**{"mqtt.connect_timeout": "3s"})
    probe = RoundTrips(broker)
    sockets = attack(broker.port, 2000)
    late = broker.raw()  # a client that connects in the middle of the flood is served too
    late.connect(unique("flood-late"))
    late.close()
    for _ in range(40):  # bounded: about 20 s
        probe.once()
        if sockets.poll() == 0:
            break
        time.sleep(0.5)
    assert sockets.closed_by_node == 2000
    assert probe.delivered == probe.sent
    probe.close()
    assert_serving(broker)


def test_a_flood_at_max_connections_leaves_the_existing_clients_served(
        broker_factory: Callable[..., Broker], attack: Callable[[int, int], AttackSockets]) -> None:
    broker = broker_factory(**{"mqtt.connect_timeout": "2s", "listener.max_connections": 20})
    probe = RoundTrips(broker)  # two of the 20 places
    sockets = attack(broker.port, 500)
    for _ in range(40):  # bounded: about 20 s
        probe.once()
        if sockets.poll() == 0:
            break
        time.sleep(0.5)
    # 482 refused at once, 18 held until their CONNECT timeout: all closed by the node.
    assert sockets.closed_by_node == 500
    assert probe.delivered == probe.sent
    # Once the idle sockets are gone, their places are free for new clients.
    late = broker.raw()
    late.connect(unique("flood-after"))
    late.close()
    probe.close()


@pytest.mark.parametrize(("extra", "announced"), [
    ({"max_message_size": 1024}, 1025),
    ({}, 2 * 1024 * 1024),  # no max_message_size: a CONNECT may have 1 MiB
    ({}, 268_435_455),
])
def test_a_connect_announcing_too_many_bytes_is_refused_before_its_body(
        broker_factory: Callable[..., Broker], extra: dict[str, int], announced: int) -> None:
    broker = broker_factory(**extra)
    remaining, length = announced - 5, b""
    while True:  # the remaining length, as a variable byte integer of 4 bytes (fixed header of 5)
        byte, remaining = remaining & 0x7F, remaining >> 7
        length += bytes([byte | (0x80 if len(length) < 3 else 0)])
        if len(length) == 4:
            break
    client = RawClient(broker.port)
    client.send(b"\x10" + length + b"\x00\x04MQTT\x04\x02\x00\x3c")  # the start of the body, no more
    assert client.wait_closed(timeout=5.0) == []
    client.close()
    assert_serving(broker)


def test_a_large_connect_under_the_bound_is_served(broker: Broker) -> None:
    """The bound leaves room for every CONNECT without user properties: a 60 KB will payload connects."""
    client = broker.raw()
    connack = client.connect(unique("big"), will={"topic": "big/will", "payload": b"w" * 60_000, "qos": 0})
    assert connack.reason_code == 0
    client.close()


def test_idle_websocket_sockets_are_closed_by_the_connect_timeout(
        broker_factory: Callable[..., Broker], attack: Callable[[int, int], AttackSockets]) -> None:
    """Before the upgrade, a WebSocket listener's socket gets the same time to start as a CONNECT: an idle
    socket and one sending its HTTP request a byte a second are both closed."""
    ws_port = free_port()
    broker = broker_factory(**{"mqtt.connect_timeout": "2s", "listener.ws.default": f"127.0.0.1:{ws_port}"})
    sockets = attack(ws_port, 20)
    slow = socket.create_connection(("127.0.0.1", ws_port), timeout=5.0)
    request = b"GET /mqtt HTTP/1.1\r\nHost: x\r\n"
    closed = False
    for index in range(30):  # bounded: 30 s
        with contextlib.suppress(OSError):
            slow.send(request[index:index + 1])
        slow.settimeout(0.01)
        try:
            closed = slow.recv(4096) == b""
        except TimeoutError:
            closed = False
        except ConnectionError:
            closed = True
        if sockets.poll() == 0 and closed:
            break
        time.sleep(1.0)
    slow.close()
    assert sockets.closed_by_node == 20 and closed
    wait_until(broker.alive, 1.0, what="the node alive")


def test_sockets_that_end_before_their_connect_are_not_a_failure(broker: Broker) -> None:
    """Health checks and port scans (connect, close) leave the node serving and are not logged as failures."""
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5.0) as sock:
            sock.send(b"\x10")
    assert_serving(broker)
    assert "no CONNECT in time" not in broker.log.read_text()
