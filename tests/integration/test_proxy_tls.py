"""The PROXY protocol on TLS and WebSocket listeners (`listener.ssl|ws|wss.NAME.proxy_protocol = on`,
docs/load-balancing.md) and failed TLS handshakes counted and logged (docs/security.md):

- raw sockets send a v1 or v2 header, then a real TLS handshake (Python's ssl) or an HTTP upgrade; the header's
  address is what `vmq-admin session show` lists; the header and the ClientHello (or the upgrade request) in one
  write work too; a TLS client without the header is closed and counted in `broker.proxy_protocol_refused`;
- the real HAProxy with `send-proxy-v2` in front of an `ssl` and a `ws` listener: paho-mqtt connects through it
  from 127.0.0.50, and the node lists 127.0.0.50, not HAProxy's address;
- a client with the wrong CA, and one without a certificate on a `require_certificate` listener: the node counts
  (`broker.tls_handshake_failed`, /metrics `vmqpy_connect_refused_total{reason="tls_handshake"}`), logs the
  reason and goes on serving.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from chaos import processes
from chaos.haproxy import HAPROXY
from tests.integration.admin_api import admin, metric, sessions
from tests.integration.clients import CONNACK, PahoClient, RawClient, enc_connect, unique
from tests.integration.conftest import Broker, free_port, port_open, wait_until
from tests.integration.pki import Pki, organization, pki, tls_raw
from vmqpy.broker.listeners.proxy_protocol import Address, Family, encode_v1, encode_v2

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's PROXY protocol and TLS listeners")]

__all__ = ["pki"]  # the fixture this module's tests take

HERE = Address("127.0.0.1", 1)


@pytest.fixture
def node(broker_factory: Callable[..., Broker], pki: Pki) -> tuple[Broker, str, dict[str, int]]:
    """A node with PROXY listeners `ssl.proxied`, `ws.proxied`, `wss.proxied` and `ssl.proxied_mutual` (mutual
    TLS, use_identity_as_username), a plain TLS listener `ssl.default` and a mutual TLS one `ssl.mutual`; the
    admin API at the returned URL."""
    ports = {name: free_port() for name in ("ssl", "ws", "wss", "tls", "mutual", "proxied_mutual", "http")}
    broker = broker_factory(**{
        "listener.http.default": f"127.0.0.1:{ports['http']}",
        "listener.ssl.proxied": f"127.0.0.1:{ports['ssl']}",
        "listener.ssl.proxied.proxy_protocol": "on",
        "listener.ws.proxied": f"127.0.0.1:{ports['ws']}",
        "listener.ws.proxied.proxy_protocol": "on",
        "listener.wss.proxied": f"127.0.0.1:{ports['wss']}",
        "listener.wss.proxied.proxy_protocol": "on",
        "listener.ssl.default": f"127.0.0.1:{ports['tls']}",
        "listener.ssl.mutual": f"127.0.0.1:{ports['mutual']}",
        "listener.ssl.mutual.require_certificate": "on",
        "listener.ssl.proxied_mutual": f"127.0.0.1:{ports['proxied_mutual']}",
        "listener.ssl.proxied_mutual.proxy_protocol": "on",
        "listener.ssl.proxied_mutual.require_certificate": "on",
        "listener.ssl.proxied_mutual.use_identity_as_username": "on",
        "listener.ssl.certfile": str(pki.cert_file),
        "listener.ssl.keyfile": str(pki.key_file),
        "listener.ssl.cafile": str(pki.ca_file),
        "listener.wss.certfile": str(pki.cert_file),
        "listener.wss.keyfile": str(pki.key_file),
    })
    url = f"http://127.0.0.1:{ports['http']}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    # Not port_open: a connection without a header would count as refused on the PROXY listeners.
    wait_until(lambda: "node started" in broker.log_tail(100), 15, what="every listener open")
    return broker, url, ports


def listed_peer(broker: Broker, url: str, client_id: str) -> tuple[str, int]:
    row = wait_until(lambda: sessions(broker, url).get(client_id), 10, what=f"session {client_id} listed")
    return str(row["peer_host"]), int(row["peer_port"])


# -- TLS after the header -------------------------------------------------------------------------------------------
def tls_after_header(port: int, context: ssl.SSLContext, header: bytes) -> RawClient:
    """A RawClient that sent `header` in clear, then shook hands in TLS on the same socket."""
    client = RawClient(port, "127.0.0.1", 4)
    client.send(header)
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


class PipelinedTls:
    """A TLS client over a socket whose first write is the PROXY header and the ClientHello together (ssl's
    MemoryBIO: the ClientHello is made before anything is sent)."""

    def __init__(self, port: int, context: ssl.SSLContext, header: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        self.sock.sendall(header + self.outgoing.read())  # one write: header + ClientHello
        for _ in range(20):  # a TLS handshake is a few round trips
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._fill()
        self._flush()

    def _flush(self) -> None:
        if pending := self.outgoing.read():
            self.sock.sendall(pending)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the node closed the connection")
        self.incoming.write(data)

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def recv(self, size: int) -> bytes:
        out = b""
        for _ in range(50):
            if len(out) >= size:
                break
            try:
                out += self.tls.read(size - len(out))
            except ssl.SSLWantReadError:
                self._fill()
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(("version", "header", "source"), [
    ("v1", encode_v1(Address("198.51.100.7", 40001), HERE), ("198.51.100.7", 40001)),
    ("v2", encode_v2(family=Family.TCP6, source=Address("2001:db8::9", 40002),
                   destination=Address("::1", 1)), ("2001:db8::9", 40002)),
], ids=["v1", "v2"])
def test_a_header_then_a_tls_handshake_gives_the_clients_address(
        node: tuple[Broker, str, dict[str, int]], pki: Pki, version: str, header: bytes,
        source: tuple[str, int]) -> None:
    broker, url, ports = node
    client_id = unique(f"tls-{version}")
    client = tls_after_header(ports["ssl"], pki.client_context(), header)
    try:
        client.connect(client_id)
        assert listed_peer(broker, url, client_id) == source
    finally:
        client.close()


def test_the_header_and_the_client_hello_in_one_write(node: tuple[Broker, str, dict[str, int]], pki: Pki) -> None:
    """HAProxy sends the header and waits, but a client may pipeline: nothing after the header is lost."""
    broker, url, ports = node
    client_id = unique("pipelined")
    client = PipelinedTls(ports["ssl"], pki.client_context(),
                          encode_v2(source=Address("203.0.113.5", 5555), destination=HERE))
    try:
        client.send(enc_connect(client_id))
        assert client.recv(4) == bytes([CONNACK << 4, 2, 0, 0])
        assert listed_peer(broker, url, client_id) == ("203.0.113.5", 5555)
    finally:
        client.close()


def test_a_tls_client_without_the_header_is_refused_and_counted(node: tuple[Broker, str, dict[str, int]],
                                                                pki: Pki) -> None:
    broker, url, ports = node
    before = metric(broker, url, "broker.proxy_protocol_refused")
    with socket.create_connection(("127.0.0.1", ports["ssl"]), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1")  # a ClientHello is no PROXY header
    wait_until(lambda: metric(broker, url, "broker.proxy_protocol_refused") == before + 1, 10,
               what="the refusal counted")
    assert "no valid PROXY protocol header" in broker.log_tail(200)
    client = tls_after_header(ports["ssl"], pki.client_context(), encode_v1(Address("198.51.100.8", 1), HERE))
    try:
        client.connect(unique("still-served"))  # the listener goes on serving
    finally:
        client.close()


def test_a_certificate_behind_the_header_names_the_user(node: tuple[Broker, str, dict[str, int]], pki: Pki) -> None:
    """require_certificate and use_identity_as_username on a PROXY listener: the certificate's CN is the user,
    the header's address the peer."""
    broker, url, ports = node
    client_id = unique("proxied-cert")
    client = tls_after_header(ports["proxied_mutual"], pki.client_context(with_certificate=True),
                              encode_v1(Address("198.51.100.30", 3030), HERE))
    try:
        client.send(enc_connect(client_id, username="mallory", password=b"wrong"))
        assert client.expect(CONNACK).reason_code == 0
        out = admin(url, broker.data_dir, "session", "show", "--client_id", "--user", "--peer_host", "--json")
        assert out.returncode == 0, out.stderr
        row = {r["client_id"]: r for r in json.loads(out.stdout)}[client_id]
        assert (row["user"], row["peer_host"]) == ("device-42", "198.51.100.30")
    finally:
        client.close()
    with socket.create_connection(("127.0.0.1", ports["proxied_mutual"]), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        raw.sendall(encode_v1(Address("198.51.100.31", 3131), HERE))
        tls = pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1")  # no certificate
        tls.sendall(enc_connect(unique("no-cert")))
        if tls.recv(100) == b"":
            raise ConnectionError("closed without an answer")


def test_sighup_serves_a_new_certificate_behind_the_header(node: tuple[Broker, str, dict[str, int]],
                                                          pki: Pki) -> None:
    broker, _url, ports = node

    def served() -> dict[str, object]:
        with socket.create_connection(("127.0.0.1", ports["ssl"]), timeout=10) as raw:
            raw.sendall(encode_v1(Address("198.51.100.40", 4040), HERE))
            with pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                cert = tls.getpeercert()
                assert cert is not None
                return dict(cert)

    first = served()
    assert organization(first) == "vmqpy-first"
    pki.issue_server("vmqpy-second")
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGHUP)
    second = wait_until(lambda: (c := served())["serialNumber"] != first["serialNumber"] and c, 10,
                        what="the new certificate served")
    assert organization(second) == "vmqpy-second"


# -- WebSocket after the header -------------------------------------------------------------------------------------
def upgrade_request(port: int) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
            ).encode()


def binary_frame(payload: bytes) -> bytes:
    """One masked binary WebSocket frame (a client's frames are masked), payload under 126 bytes."""
    assert len(payload) < 126
    mask = os.urandom(4)
    return bytes([0x82, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def recv_exactly(sock: socket.socket | ssl.SSLSocket, size: int) -> bytes:
    out = b""
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {out!r}")
        out += chunk
    return out


def mqtt_over_websocket(sock: socket.socket | ssl.SSLSocket, first_write: bytes, client_id: str) -> bytes:
    """Send `first_write` (ending with the upgrade request), read the 101, CONNECT in a frame; the CONNACK."""
    sock.sendall(first_write)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError(f"closed during the upgrade: {answer!r}")
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 101"), answer
    sock.sendall(binary_frame(enc_connect(client_id)))
    head = recv_exactly(sock, 2)
    assert head[0] == 0x82, head  # a binary frame, unmasked
    return recv_exactly(sock, head[1] & 0x7F)


def test_a_websocket_after_the_header_in_the_same_write(node: tuple[Broker, str, dict[str, int]]) -> None:
    broker, url, ports = node
    client_id = unique("ws-proxied")
    header = encode_v2(source=Address("198.51.100.20", 2020), destination=HERE)
    with socket.create_connection(("127.0.0.1", ports["ws"]), timeout=10) as sock:
        assert mqtt_over_websocket(sock, header + upgrade_request(ports["ws"]), client_id) == b"\x20\x02\x00\x00"
        assert listed_peer(broker, url, client_id) == ("198.51.100.20", 2020)


def test_a_secure_websocket_after_the_header(node: tuple[Broker, str, dict[str, int]], pki: Pki) -> None:
    broker, url, ports = node
    client_id = unique("wss-proxied")
    with socket.create_connection(("127.0.0.1", ports["wss"]), timeout=10) as raw:
        raw.sendall(encode_v1(Address("198.51.100.21", 2121), HERE))
        with pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert mqtt_over_websocket(tls, upgrade_request(ports["wss"]), client_id) == b"\x20\x02\x00\x00"
            assert listed_peer(broker, url, client_id) == ("198.51.100.21", 2121)


def test_a_websocket_without_the_header_is_refused_and_counted(node: tuple[Broker, str, dict[str, int]]) -> None:
    broker, url, ports = node
    before = metric(broker, url, "broker.proxy_protocol_refused")
    with socket.create_connection(("127.0.0.1", ports["ws"]), timeout=10) as sock:
        sock.sendall(upgrade_request(ports["ws"]))
        try:
            answer = sock.recv(100)
        except ConnectionResetError:  # closed with the request unread: the kernel resets the connection
            answer = b""
        assert answer == b"", "the node answered an upgrade without the PROXY header"
    wait_until(lambda: metric(broker, url, "broker.proxy_protocol_refused") == before + 1, 10,
               what="the refusal counted")


# -- failed TLS handshakes --------------------------------------------------------------------------------------------
def prometheus_tls_failures(broker: Broker, url: str) -> float:
    key = (broker.data_dir / "api.key").read_text().strip()
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith("vmqpy_connect_refused_total{") and 'reason="tls_handshake"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("vmqpy_connect_refused_total{reason=\"tls_handshake\"} not in /metrics")


def test_failed_handshakes_are_counted_and_logged_and_the_node_serves_on(
        node: tuple[Broker, str, dict[str, int]], pki: Pki) -> None:
    broker, url, ports = node
    before = metric(broker, url, "broker.tls_handshake_failed")
    # A client that does not trust the node's CA refuses its certificate (alert: unknown ca).
    stranger = ssl.create_default_context(cadata=trustme.CA().cert_pem.bytes().decode())
    with socket.create_connection(("127.0.0.1", ports["tls"]), timeout=10) as raw, pytest.raises(ssl.SSLError):
        stranger.wrap_socket(raw, server_hostname="127.0.0.1")
    wait_until(lambda: metric(broker, url, "broker.tls_handshake_failed") == before + 1, 10,
               what="the unknown CA counted")
    assert "unknown ca" in broker.log_tail(200)
    # No certificate on a listener that requires one (TLS 1.3: the refusal comes on the client's first read).
    with socket.create_connection(("127.0.0.1", ports["mutual"]), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError)):
        tls = pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(enc_connect(unique("no-cert")))
        if tls.recv(100) == b"":
            raise ConnectionError("closed without an answer")
    wait_until(lambda: metric(broker, url, "broker.tls_handshake_failed") == before + 2, 10,
               what="the missing certificate counted")
    assert prometheus_tls_failures(broker, url) == before + 2
    assert "connection closed: TLS handshake failed" in broker.log_tail(200)
    for port, context in ((ports["tls"], pki.client_context()), (ports["mutual"], pki.client_context(True))):
        client = tls_raw(port, context)
        try:
            client.connect(unique("after-failures"))  # both listeners go on serving
        finally:
            client.close()


def test_a_socket_closed_before_its_handshake_is_no_failure(node: tuple[Broker, str, dict[str, int]]) -> None:
    """A TCP health check (connect, close) is not a failed handshake."""
    broker, url, ports = node
    before = metric(broker, url, "broker.tls_handshake_failed")
    for _ in range(3):
        socket.create_connection(("127.0.0.1", ports["tls"]), timeout=10).close()
    client = RawClient(ports["tls"], "127.0.0.1")  # a plain MQTT CONNECT on the TLS port: a failure
    try:
        client.send(enc_connect(unique("plain-on-tls")))
        assert client.wait_closed(10.0) == []
    finally:
        client.close()
    wait_until(lambda: metric(broker, url, "broker.tls_handshake_failed") == before + 1, 10,
               what="the plain CONNECT counted")
    assert metric(broker, url, "broker.tls_handshake_failed") == before + 1


# -- the real HAProxy with send-proxy-v2 ----------------------------------------------------------------------------
HAPROXY_CONFIG = """\
global
    log stderr format raw local0
    maxconn 256
defaults
    mode tcp
    log global
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend mqtt_tls_in
    bind 127.0.0.1:{tls_front}
    default_backend mqtt_tls
backend mqtt_tls
    server n1 127.0.0.1:{tls_node} send-proxy-v2
frontend mqtt_ws_in
    bind 127.0.0.1:{ws_front}
    default_backend mqtt_ws
backend mqtt_ws
    server n1 127.0.0.1:{ws_node} send-proxy-v2
"""


@pytest.fixture
def haproxy(node: tuple[Broker, str, dict[str, int]], tmp_path: Path) -> Iterator[dict[str, int]]:
    """HAProxy in TCP mode with send-proxy-v2 in front of the node's `ssl.proxied` and `ws.proxied` listeners:
    its frontend ports by kind."""
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed (scripts/debian-deps.sh)")
    _broker, _url, ports = node
    fronts = {"ssl": free_port(), "ws": free_port()}
    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(tls_front=fronts["ssl"], tls_node=ports["ssl"], ws_front=fronts["ws"],
                                            ws_node=ports["ws"]))
    proc = processes.spawn([str(HAPROXY), "-db", "-f", str(config)], tmp_path / "haproxy.log", tmp_path, {})
    try:
        wait_until(lambda: port_open(fronts["ssl"]) and port_open(fronts["ws"]), 15, what="HAProxy listening")
        yield fronts
    finally:
        processes.stop(proc)


def connect_from(client: PahoClient, address: str) -> None:
    """Connect `client` from the local `address` (PahoClient.connect has no bind address)."""
    client.client.connect(client.host, client.port, 60, bind_address=address)
    client.client.loop_start()
    client._started = True
    _flags, rc, _props = client.connacks.get(timeout=10)
    assert not rc.is_failure, rc


@pytest.mark.parametrize("kind", ["ssl", "ws"])
def test_paho_through_haproxy_is_listed_with_its_own_address(
        node: tuple[Broker, str, dict[str, int]], pki: Pki, haproxy: dict[str, int], kind: str) -> None:
    """paho connects from 127.0.0.50 to HAProxy, which connects to the node from 127.0.0.1 and sends the PROXY
    v2 header: `vmq-admin session show` lists 127.0.0.50."""
    broker, url, _ports = node
    client_id = unique(f"haproxy-{kind}")
    client = PahoClient(haproxy[kind], 4, client_id, transport="websockets" if kind == "ws" else "tcp")
    if kind == "ssl":
        client.client.tls_set(ca_certs=str(pki.ca_file))
    try:
        connect_from(client, "127.0.0.50")
        host, port = listed_peer(broker, url, client_id)
        assert host == "127.0.0.50" and port > 0
    finally:
        client.client.disconnect()
        client.client.loop_stop()
