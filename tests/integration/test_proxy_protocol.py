"""The PROXY protocol on an MQTT listener (`listener.tcp.NAME.proxy_protocol = on`, docs/load-balancing.md):
raw sockets send v1 and v2 headers made by vmqpy.broker.listeners.proxy_protocol's encoders, then MQTT; the client's
address from the header is what `vmq-admin session show` lists; bad headers close the socket, are counted and
logged, and the node keeps serving. A listener without the option closes a socket that sends a header."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable

import pytest

from tests.integration.admin_api import metric, sessions
from tests.integration.clients import CONNACK, RawClient, enc_connect, unique
from tests.integration.conftest import Broker, free_port, wait_until
from vmqpy.broker.listeners.proxy_protocol import Address, Command, Family, encode_v1, encode_v2

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's PROXY protocol listener option")]


@pytest.fixture
def node(broker_factory: Callable[..., Broker]) -> tuple[Broker, str, int]:
    """A node whose default listener requires the PROXY header, with a second, plain listener on `plain`."""
    http_port, plain = free_port(), free_port()
    broker = broker_factory(**{
        "listener.http.default": f"127.0.0.1:{http_port}",
        "listener.tcp.default.proxy_protocol": "on",
        "listener.tcp.plain": f"127.0.0.1:{plain}",
    })
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    return broker, url, plain


def proxied(broker: Broker, header: bytes) -> RawClient:
    """A raw client that has sent `header` (and nothing else yet) to the PROXY listener."""
    client = RawClient(broker.port, broker.host, 4)
    client.send(header)
    return client


def assert_closed_without_answer(client: RawClient) -> None:
    assert client.wait_closed(5.0) == [], "the broker answered instead of closing the connection"


def assert_proxied_serving(broker: Broker) -> None:
    """A QoS 1 round trip between two clients through the PROXY listener."""
    topic = unique("proxy/alive/")
    here = Address("127.0.0.1", 1)
    sub = proxied(broker, encode_v1(Address("198.51.100.1", 1000), here))
    pub = proxied(broker, encode_v2(source=Address("198.51.100.2", 2000), destination=here))
    try:
        sub.connect(unique("alive-sub"))
        sub.subscribe(topic, qos=1)
        pub.connect(unique("alive-pub"))
        pub.publish(topic, b"ping", qos=1)
        [message] = sub.recv_publishes(1)
        assert (message.topic, message.payload) == (topic, b"ping")
    finally:
        sub.close()
        pub.close()


CASES = [
    ("v1-tcp4", lambda port: encode_v1(Address("203.0.113.7", 40001), Address("127.0.0.1", port)),
     ("203.0.113.7", 40001)),
    ("v1-tcp6", lambda port: encode_v1(Address("2001:db8::7", 40002), Address("2001:db8::1", port)),
     ("2001:db8::7", 40002)),
    ("v2-tcp4", lambda port: encode_v2(source=Address("192.0.2.44", 51000), destination=Address("127.0.0.1", port)),
     ("192.0.2.44", 51000)),
    ("v2-tcp6", lambda port: encode_v2(family=Family.TCP6, source=Address("2001:db8:0:1::44", 51001),
                                       destination=Address("2001:db8::1", port)), ("2001:db8:0:1::44", 51001)),
    ("v2-tlvs", lambda port: encode_v2(source=Address("192.0.2.45", 51002), destination=Address("127.0.0.1", port),
                                       tlvs=[(0x02, b"mqtt.example.com")], checksum=True), ("192.0.2.45", 51002)),
]


@pytest.mark.parametrize(("case", "header", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_address_in_the_header_is_the_clients(node: tuple[Broker, str, int], case: str,
                                                 header: Callable[[int], bytes],
                                                 expected: tuple[str, int]) -> None:
    broker, url, _plain = node
    client_id = unique(case)
    client = proxied(broker, header(broker.port))
    try:
        client.connect(client_id)  # the header and the CONNECT arrive as two writes
        row = sessions(broker, url)[client_id]
        assert (row["peer_host"], row["peer_port"]) == expected
        assert_proxied_serving(broker)
    finally:
        client.close()


def test_a_header_split_in_single_bytes_and_sent_with_the_connect(node: tuple[Broker, str, int]) -> None:
    broker, url, _plain = node
    client_id = unique("split")
    header = encode_v1(Address("203.0.113.99", 1234), Address("127.0.0.1", broker.port))
    client = RawClient(broker.port, broker.host, 4)
    try:
        for byte in header[:-1]:
            client.send(bytes([byte]))
            time.sleep(0.002)
        client.send(header[-1:] + enc_connect(client_id))  # the header's last byte and the CONNECT together
        assert client.expect(CONNACK).reason_code == 0
        row = sessions(broker, url)[client_id]
        assert (row["peer_host"], row["peer_port"]) == ("203.0.113.99", 1234)
    finally:
        client.close()


@pytest.mark.parametrize("header", [encode_v2(Command.LOCAL, Family.UNSPEC), encode_v1()],
                         ids=["v2-local", "v1-unknown"])
def test_a_local_header_keeps_the_sockets_address(node: tuple[Broker, str, int], header: bytes) -> None:
    """A balancer's health check (v2 LOCAL) and v1 UNKNOWN: the address of the socket itself stands."""
    broker, url, _plain = node
    client_id = unique("local")
    client = proxied(broker, header)
    try:
        client.connect(client_id)
        own_host, own_port = client.sock.getsockname()[:2]
        row = sessions(broker, url)[client_id]
        assert (row["peer_host"], row["peer_port"]) == (own_host, own_port)
    finally:
        client.close()


BAD = [
    ("mqtt-without-header", enc_connect("no-header")),
    ("http", b"GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("v1-bad-address", b"PROXY TCP4 999.1.1.1 127.0.0.1 1 2\r\n"),
    ("v1-no-crlf", b"PROXY TCP4 " + b"1" * 120),
    ("v2-bad-version", encode_v2(source=Address("192.0.2.1", 1), destination=Address("192.0.2.2", 2))[:12]
     + b"\x31" + b"\x11\x00\x0c" + bytes(12)),
    ("v2-too-long", encode_v2(source=Address("192.0.2.1", 1), destination=Address("192.0.2.2", 2),
                              tlvs=[(0xE0, bytes(5000))])),
    ("v2-bad-checksum", encode_v2(source=Address("192.0.2.1", 1), destination=Address("192.0.2.2", 2),
                                  checksum=True)[:-1] + b"\x00"),
]


@pytest.mark.parametrize("garbage", [b[1] for b in BAD], ids=[b[0] for b in BAD])
def test_a_connection_without_a_valid_header_is_closed_and_counted(node: tuple[Broker, str, int],
                                                                   garbage: bytes) -> None:
    broker, url, _plain = node
    before = metric(broker, url, "broker.proxy_protocol_refused")
    client = proxied(broker, garbage)
    try:
        assert_closed_without_answer(client)
    finally:
        client.close()
    assert metric(broker, url, "broker.proxy_protocol_refused") >= before + 1
    assert "no valid PROXY protocol header" in broker.log_tail(400)
    assert_proxied_serving(broker)


def test_a_truncated_header_then_end_of_stream_is_refused(node: tuple[Broker, str, int]) -> None:
    broker, url, _plain = node
    header = encode_v2(source=Address("192.0.2.1", 1), destination=Address("192.0.2.2", 2))
    before = metric(broker, url, "broker.proxy_protocol_refused")
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(header[:20])
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        assert sock.recv(100) == b""  # closed by the broker, nothing sent
    wait_until(lambda: metric(broker, url, "broker.proxy_protocol_refused") >= before + 1, 5,
               what="the refusal counted")
    assert "the connection ended inside the PROXY header" in broker.log_tail(400)
    assert_proxied_serving(broker)


def test_a_listener_without_the_option_closes_a_proxy_header(node: tuple[Broker, str, int]) -> None:
    """proxy_protocol off: the header is a malformed packet, closed before any CONNECT; plain MQTT works."""
    broker, _url, plain = node
    for header in (encode_v1(Address("203.0.113.7", 1), Address("127.0.0.1", 2)),
                   encode_v2(source=Address("203.0.113.7", 1), destination=Address("127.0.0.1", 2))):
        client = RawClient(plain, broker.host, 4)
        try:
            client.send(header + enc_connect(unique("plain")))
            assert client.wait_closed(5.0) == []
        finally:
            client.close()
    client = RawClient(plain, broker.host, 4)
    try:
        client.connect(unique("plain-ok"))
    finally:
        client.close()
    assert broker.alive()
