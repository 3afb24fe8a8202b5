"""A DISCONNECT with a reason code reaches a client that is still writing (issue 33, finding 10).

The node closes a connection right after a DISCONNECT (here 0x93 Receive Maximum exceeded: more unacknowledged
QoS 2 PUBLISHes than the Receive Maximum it announced). A client that keeps writing meanwhile (the PUBRELs for
the PUBRECs it got) used to get a TCP reset for the bytes that reached a closed socket, and the kernel then
throws away what it had not read yet: the DISCONNECT. The node now closes as HTTP servers do (a lingering
close): it shuts down its writing side, reads and discards for a bounded time and size, then closes.

The client here is a raw socket that writes everything it has before it reads, as a single-threaded client
library does; each run must read the DISCONNECT 0x93, never a reset. Several runs, since the reset depends on
the bytes in flight when the node closes (on the code before the fix, the first run over TCP was reset every
time). The same over TLS (close_notify, then the TLS layer discards what arrives) and over a WebSocket (the
close frame, then aiohttp discards frames), which drained already before the fix and must keep doing so.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
import trustme

from tests.integration.clients import PUBREL, RawClient, enc_ack, enc_connect, enc_publish, unique
from tests.integration.conftest import Broker, assert_serving, broker_kind, free_port, public_metrics, wait_until
from tests.integration.overrun import RECEIVE_MAXIMUM, overrun_while_writing, packets

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's close path")]

RUNS = 5
LINGER_CUT = "vmqpy_socket_linger_cut_total"
HTTP_PORT = free_port()  # the node's admin listener: /metrics is public (metrics.public = on)


class Tls:
    """The node's TLS listener: its port and a client context trusting the test CA (trustme)."""

    def __init__(self, workdir: Path) -> None:
        ca = trustme.CA()
        self.ca_file, self.cert_file, self.key_file = workdir / "ca.pem", workdir / "server.pem", workdir / "key.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        server = ca.issue_cert("127.0.0.1")
        server.cert_chain_pems[0].write_to_path(str(self.cert_file))
        server.private_key_pem.write_to_path(str(self.key_file))
        self.port = free_port()
        self.ws_port = free_port()  # the node's plain WebSocket listener
        self.context = ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return Tls(tmp_path_factory.mktemp("linger-pki"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[Broker]:
    workdir: Path = tmp_path_factory.mktemp("linger")
    broker = Broker(broker_kind(), workdir, {
        "allow_anonymous": "on", "max_inflight_messages": RECEIVE_MAXIMUM,
        "listener.ssl.default": f"127.0.0.1:{tls.port}", "listener.ssl.certfile": str(tls.cert_file),
        "listener.ssl.keyfile": str(tls.key_file), "listener.ws.default": f"127.0.0.1:{tls.ws_port}",
        "listener.http.default": f"127.0.0.1:{HTTP_PORT}", "metrics.public": "on",
    }).start()
    yield broker
    broker.stop()


def tcp_client(node: Broker, _tls: Tls) -> RawClient:
    return RawClient(node.port, version=5)


def tls_client(_node: Broker, tls: Tls) -> RawClient:
    client = RawClient(tls.port, version=5)
    client.sock = tls.context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


CLIENTS: dict[str, Callable[[Broker, Tls], RawClient]] = {"tcp": tcp_client, "ssl": tls_client}


DISCONNECT = 14


@pytest.mark.parametrize("kind", list(CLIENTS))
def test_a_client_still_writing_reads_the_disconnect_reason(node: Broker, tls: Tls, kind: str) -> None:
    for run in range(RUNS):
        got, ending = overrun_while_writing(CLIENTS[kind](node, tls))
        assert (DISCONNECT, 0x93) in got, f"run {run}: no DISCONNECT 0x93 read, the stream ended by {ending}: {got}"
        assert ending == "eof", f"run {run}: {ending}"
    assert node.alive()


def overrun(port: int) -> RawClient:
    """A client that got DISCONNECT 0x93 (read), its socket still open on its side."""
    client = RawClient(port, version=5)
    client.connect(unique("overrun-"))
    client.send(b"".join(enc_publish("linger/t", b"x", qos=2, packet_id=i, version=5)
                         for i in range(1, RECEIVE_MAXIMUM + 2)))
    disconnect = client.expect(DISCONNECT)
    assert disconnect.reason_code == 0x93
    return client


def test_a_client_that_keeps_writing_after_the_disconnect_loses_its_socket(node: Broker) -> None:
    """The drain is bounded in bytes (64 KiB): a client writing on and on is cut off long before 16 MiB."""
    cut_before = public_metrics(HTTP_PORT, [LINGER_CUT])[LINGER_CUT]
    client = overrun(node.port)
    sock = client.sock
    sock.settimeout(5.0)
    sent, chunk = 0, b"\xc0\x00" * 8192  # PINGREQs, 16 KiB a write
    try:
        while sent < 16 * 1024 * 1024:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    client.close()
    assert sent < 16 * 1024 * 1024, "the node kept taking bytes after its DISCONNECT"
    wait_until(lambda: public_metrics(HTTP_PORT, [LINGER_CUT])[LINGER_CUT] == cut_before + 1, 10,
               what=f"the cut drain counted in {LINGER_CUT}")
    assert_serving(node)


def test_a_client_that_neither_closes_nor_writes_is_closed_by_the_node(node: Broker) -> None:
    """The drain is bounded in time (2 s): the node closes a half-closed socket its client keeps open."""
    client = overrun(node.port)
    client.sock.settimeout(10.0)
    try:
        rest = client.sock.recv(65536)
    except ConnectionResetError:
        rest = b""
    assert rest == b"", "nothing after the DISCONNECT but the end of the stream"
    client.close()
    assert_serving(node)


async def overrun_over_websocket(port: int) -> tuple[list[tuple[int, int | None]], str]:
    """The same over a WebSocket: CONNECT, the overrun and ~256 KiB of PUBRELs in binary frames, all written
    before reading; then every frame read until the node's close frame ("close") or an error."""
    received = bytearray()
    async with aiohttp.ClientSession() as http, \
            http.ws_connect(f"http://127.0.0.1:{port}/mqtt", protocols=("mqtt",), autoclose=False) as ws:
        await ws.send_bytes(enc_connect(unique("ws-overrun-"), version=5))
        connack = await ws.receive(timeout=5)
        assert connack.type is aiohttp.WSMsgType.BINARY and connack.data[0] >> 4 == 2
        await ws.send_bytes(b"".join(enc_publish("linger/t", b"x", qos=2, packet_id=i, version=5)
                                     for i in range(1, RECEIVE_MAXIMUM + 2)))
        pubrels = b"".join(enc_ack(PUBREL, i, version=5) for i in range(1, RECEIVE_MAXIMUM + 1)) * 64
        try:
            for _ in range(100):
                await ws.send_bytes(pubrels)
        except (ConnectionError, RuntimeError):
            pass
        ending = "timeout"
        for _ in range(10_000):  # bounded: far more frames than the node sends
            try:
                message = await ws.receive(timeout=10)
            except TimeoutError:
                break
            if message.type is aiohttp.WSMsgType.BINARY:
                received += message.data
                continue
            ending = "close" if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING) else \
                f"{message.type.name}: {message.data!r}"
            break
    return packets(bytes(received)), ending


def test_a_websocket_client_still_writing_reads_the_disconnect_reason(node: Broker, tls: Tls) -> None:
    for run in range(RUNS):
        got, ending = asyncio.run(overrun_over_websocket(tls.ws_port))
        assert (DISCONNECT, 0x93) in got, f"run {run}: no DISCONNECT 0x93 read, the stream ended by {ending}: {got}"
        assert ending == "close", f"run {run}: {ending}"
    assert node.alive()
