"""vmqpy.broker.listeners.handshake_prelude and the failed-handshake reasons of vmqpy.broker.listeners.tls:

- `header_bytes_to_take` takes every byte of an incomplete header and exactly the rest of a whole one, so the
  bytes after the header (a TLS ClientHello, an HTTP request) stay in the socket, however they arrive;
- `HandshakeWait` gives the protocol it hands on to everything asyncio delivered before, in order;
- `HandshakePrelude` on a real socket pair (no network): the header and what follows in one write; a TLS
  handshake pipelined behind the header; a bad header and a plain client on a TLS socket counted; a socket that
  ends before its first byte is not a failed handshake;
- `handshake_failure_reason` says what went wrong in words.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import trustme
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.transports import FakeTransport
from vmqpy.broker.listeners.handshake_prelude import HandshakePrelude, HandshakeWait, Peer, header_bytes_to_take
from vmqpy.broker.listeners.preludes import FailureLog
from vmqpy.broker.listeners.proxy_protocol import Address, Command, Family, ProxyHeaderError, encode_v1, encode_v2
from vmqpy.broker.listeners.tls import handshake_failure_reason

V1 = encode_v1(Address("198.51.100.1", 1000), Address("127.0.0.1", 1883))
V2 = encode_v2(source=Address("198.51.100.2", 2000), destination=Address("127.0.0.1", 1883))
V2_LOCAL = encode_v2(Command.LOCAL, Family.UNSPEC)
HELLO = b"\x16\x03\x01\x00\x05hello"  # what a ClientHello starts with


# -- header_bytes_to_take -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("taken", "peeked", "count", "whole"), [
    (b"", V1 + HELLO, len(V1), True),  # the header and the ClientHello in one segment: only the header
    (b"", V1[:10], 10, False),  # a part of the header: all of it
    (V1[:10], V1[10:] + HELLO, len(V1) - 10, True),  # the rest of the header, not a byte more
    (b"", V2 + HELLO, len(V2), True),
    (V2[:15], V2[15:16], 1, False),  # v2's length is in bytes 15-16
    (V2[:16], V2[16:] + HELLO, len(V2) - 16, True),
    (b"", V2_LOCAL + HELLO, len(V2_LOCAL), True),
])
def test_how_many_bytes_are_taken(taken: bytes, peeked: bytes, count: int, whole: bool) -> None:
    got, header = header_bytes_to_take(taken, peeked)
    assert got == count
    assert (header is not None) == whole
    if header is not None:
        assert header.length == len(taken) + count


@pytest.mark.parametrize("peeked", [HELLO, b"GET /mqtt HTTP/1.1\r\n", b"\x10\x0c\x00\x04MQTT", b"PROXY TCP9 x\r\n"])
def test_what_cannot_start_a_header_is_refused(peeked: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        header_bytes_to_take(b"", peeked)


@given(st.sampled_from([V1, V2, V2_LOCAL]), st.binary(max_size=64),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=40))
def test_whatever_the_arrivals_exactly_the_header_is_taken(header: bytes, after: bytes, cuts: list[int]) -> None:
    """The stream arrives in pieces of the sizes `cuts` (then the rest); each time, the prelude peeks at what
    arrived and was not taken, and takes what it is told: once the header is whole, exactly the header was
    taken and every byte after it is still waiting."""
    stream = header + after
    arrived, taken, done = 0, b"", False
    for cut in [*cuts, len(stream)]:
        arrived = min(len(stream), arrived + cut)
        count, parsed = header_bytes_to_take(taken, stream[len(taken):arrived])
        taken += stream[len(taken):len(taken) + count]
        assert len(taken) <= len(header)
        if parsed is not None:
            done = True
            break
    assert done and taken == header


# -- HandshakeWait --------------------------------------------------------------------------------------------------
class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def connection_made(self, transport: Any) -> None:
        self.events.append(("made", transport))

    def data_received(self, data: bytes) -> None:
        self.events.append(("data", data))

    def eof_received(self) -> bool | None:
        self.events.append(("eof",))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", exc))


def test_what_came_during_the_wait_is_handed_on_in_order() -> None:
    wait = HandshakeWait()
    wait.connection_made(FakeTransport())
    wait.data_received(b"\x10")
    wait.data_received(b"\x02")
    wait.eof_received()
    error = ConnectionResetError("gone")
    wait.connection_lost(error)
    protocol, transport = Recorder(), FakeTransport()
    wait.hand_on(protocol, transport)
    assert transport.protocol is protocol
    assert protocol.events == [("made", transport), ("data", b"\x10"), ("data", b"\x02"), ("eof",),
                               ("lost", error)]
    wait.data_received(b"later")  # a late call still reaches the protocol
    assert protocol.events[-1] == ("data", b"later")
    assert wait.made


# -- HandshakePrelude on a socket pair ------------------------------------------------------------------------------
Run = Callable[[Coroutine[Any, Any, Any]], Any]
RUNNERS: dict[str, Run] = {"asyncio": asyncio.run}
with contextlib.suppress(ImportError):  # the node runs on uvloop when it is installed (vmqpy.__main__)
    import uvloop

    RUNNERS["uvloop"] = uvloop.run


@pytest.fixture(params=sorted(RUNNERS))
def run(request: pytest.FixtureRequest) -> Run:
    return RUNNERS[request.param]


class SocketTransport:
    """What the listener's server gives the prelude: a transport of an accepted socket, not read yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"socket": self.sock, "peername": ("10.0.0.9", 9999)}.get(name, default)

    def abort(self) -> None:
        self.aborted = True
        self.sock.close()  # as the transport closes its own descriptor


class Served(asyncio.Protocol):
    """The listener's protocol: records the peer it was opened for and every byte it reads."""

    def __init__(self, peer: Peer | None) -> None:
        self.peer = peer
        self.data = b""
        self.transport: asyncio.Transport | None = None
        self.got: asyncio.Event = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.got.set()


class Tls:
    def __init__(self, directory: Path) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("localhost")
        self.server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(self.server)
        self.client = ssl.create_default_context()
        ca.configure_trust(self.client)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return Tls(tmp_path_factory.mktemp("tls"))


def failures(metrics: Counter[str], metric: str) -> FailureLog:
    return FailureLog("test", metric, "closed", metrics)


async def start(tls: ssl.SSLContext | None, proxy: bool, metrics: Counter[str],
                opened: list[Served]) -> tuple[socket.socket, set[asyncio.Task[None]]]:
    """A prelude on the server end of a socket pair; the client end."""
    server, client = socket.socketpair()
    server.setblocking(False)
    pending: set[asyncio.Task[None]] = set()

    def open_protocol(peer: Peer | None, _transport: asyncio.Transport) -> asyncio.Protocol:
        opened.append(Served(peer))
        return opened[-1]

    prelude = HandshakePrelude(open_protocol, tls=tls, tls_failures=failures(metrics, "tls"),
                               proxy_failures=failures(metrics, "proxy") if proxy else None, pending=pending,
                               header_timeout=5.0, handshake_timeout=5.0)
    transport = SocketTransport(server)
    prelude.connection_made(transport)  # type: ignore[arg-type]
    assert transport.aborted  # the prelude took the socket over
    client.setblocking(False)
    return client, pending


async def until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_header_and_what_follows_in_one_write_without_tls(run: Run) -> None:
    async def scenario() -> tuple[list[Served], Counter[str]]:
        metrics: Counter[str] = Counter()
        opened: list[Served] = []
        client, _pending = await start(None, True, metrics, opened)
        client.sendall(V2 + b"GET /mqtt HTTP/1.1\r\n")
        await until(lambda: opened and opened[0].data == b"GET /mqtt HTTP/1.1\r\n", "the request served")
        client.close()
        return opened, metrics

    opened, metrics = run(scenario())
    assert opened[0].peer == ("198.51.100.2", 2000) and not metrics


class TlsClient:
    """A TLS client over the socket pair's client end, its first write the header and the ClientHello."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, prefix: bytes) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        sock.sendall(prefix + self.outgoing.read())

    async def handshake(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(20):
            try:
                self.tls.do_handshake()
                return
            except ssl.SSLWantReadError:
                if pending := self.outgoing.read():
                    await loop.sock_sendall(self.sock, pending)
                self.incoming.write(await asyncio.wait_for(loop.sock_recv(self.sock, 65536), 5))
        raise AssertionError("no handshake")

    async def send(self, data: bytes) -> None:
        self.tls.write(data)
        await asyncio.get_running_loop().sock_sendall(self.sock, self.outgoing.read())


@pytest.mark.parametrize("header", [V1, V2, V2_LOCAL], ids=["v1", "v2", "v2-local"])
def test_a_tls_handshake_pipelined_behind_the_header(tls: Tls, header: bytes, run: Run) -> None:
    async def scenario() -> tuple[list[Served], Counter[str]]:
        metrics: Counter[str] = Counter()
        opened: list[Served] = []
        client, _pending = await start(tls.server, True, metrics, opened)
        tls_client = TlsClient(client, tls.client, header)
        await tls_client.handshake()
        await tls_client.send(b"\x10\x0cafter the handshake")
        await until(lambda: opened and opened[0].data == b"\x10\x0cafter the handshake", "the data served")
        transport = opened[0].transport
        assert transport is not None and transport.get_extra_info("ssl_object") is not None
        transport.close()
        client.close()
        return opened, metrics

    opened, metrics = run(scenario())
    expected = None if header == V2_LOCAL else {V1: ("198.51.100.1", 1000), V2: ("198.51.100.2", 2000)}[header]
    assert opened[0].peer == expected and not metrics


@pytest.mark.parametrize(("proxy", "first", "metric"), [
    (True, HELLO, "proxy"),  # a TLS client where a PROXY header is due
    (True, V1[:20], "proxy"),  # the stream ends inside the header
    (False, b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c", "tls"),  # plain MQTT on a TLS socket
])
def test_bad_starts_are_counted_and_closed(tls: Tls, proxy: bool, first: bytes, metric: str, run: Run) -> None:
    async def scenario() -> tuple[list[Served], Counter[str], bytes]:
        metrics: Counter[str] = Counter()
        opened: list[Served] = []
        client, pending = await start(tls.server, proxy, metrics, opened)
        client.sendall(first)
        client.shutdown(socket.SHUT_WR)
        await until(lambda: metrics[metric] == 1 and not pending, "the failure counted")
        loop = asyncio.get_running_loop()
        try:
            answer = await asyncio.wait_for(loop.sock_recv(client, 100), 5)
        except ConnectionResetError:  # closed with bytes unread: a reset, still no answer
            answer = b""
        client.close()
        return opened, metrics, answer

    opened, metrics, answer = run(scenario())
    assert opened == [] and metrics == Counter({metric: 1})
    assert metric == "tls" or answer == b""  # a refused header is never answered (TLS may send an alert)


def test_the_end_of_the_stream_before_any_byte_is_not_a_failed_handshake(tls: Tls, run: Run) -> None:
    async def scenario() -> tuple[list[Served], Counter[str], bytes]:
        metrics: Counter[str] = Counter()
        opened: list[Served] = []
        client, _pending = await start(tls.server, False, metrics, opened)
        client.shutdown(socket.SHUT_WR)  # a TCP health check
        loop = asyncio.get_running_loop()
        answer = await asyncio.wait_for(loop.sock_recv(client, 100), 5)  # closed by the prelude
        client.close()
        return opened, metrics, answer

    opened, metrics, answer = run(scenario())
    assert (opened, metrics, answer) == ([], Counter(), b"")


def test_a_silent_socket_is_closed_at_the_deadline(tls: Tls, run: Run) -> None:
    async def scenario() -> Counter[str]:
        metrics: Counter[str] = Counter()
        server, client = socket.socketpair()
        prelude = HandshakePrelude(lambda peer, t: Served(peer), tls=tls.server, tls_failures=failures(metrics, "tls"),
                                   proxy_failures=None, pending=set(), handshake_timeout=0.05)
        prelude.connection_made(SocketTransport(server))  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        client.setblocking(False)
        assert await asyncio.wait_for(loop.sock_recv(client, 100), 5) == b""
        client.close()
        return metrics

    assert run(scenario()) == Counter({"tls": 1})


def test_a_tls_prelude_needs_its_failure_log(tls: Tls, run: Run) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError):
            HandshakePrelude(lambda peer, t: Served(peer), tls=tls.server, tls_failures=None, proxy_failures=None,
                             pending=set())

    run(scenario())


# -- handshake_failure_reason ---------------------------------------------------------------------------------------
def ssl_error(reason: str, cls: type[ssl.SSLError] = ssl.SSLError, **extra: str) -> ssl.SSLError:
    exc = cls(1, f"[SSL: {reason}] ...")
    exc.reason = reason
    for name, value in extra.items():
        setattr(exc, name, value)
    return exc


@pytest.mark.parametrize(("exc", "reason"), [
    (ssl_error("TLSV1_ALERT_UNKNOWN_CA"), "the client sent the alert: unknown ca"),
    (ssl_error("SSLV3_ALERT_BAD_CERTIFICATE"), "the client sent the alert: bad certificate"),
    (ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED"), "the client sent the alert: certificate required"),
    (ssl_error("PEER_DID_NOT_RETURN_A_CERTIFICATE"), "peer did not return a certificate"),
    (ssl_error("WRONG_VERSION_NUMBER"), "wrong version number"),
    (ssl_error("CERTIFICATE_VERIFY_FAILED", ssl.SSLCertVerificationError,
               verify_message="unable to get local issuer certificate"),
     "client certificate verify failed: unable to get local issuer certificate"),
    (ConnectionResetError(), "the client closed the connection during the handshake"),
    (ConnectionAbortedError("SSL handshake is taking longer than 10.0 seconds: aborting the connection"),
     "SSL handshake is taking longer than 10.0 seconds: aborting the connection"),
    (TimeoutError(), "TimeoutError"),
])
def test_handshake_failure_reasons(exc: BaseException, reason: str) -> None:
    assert handshake_failure_reason(exc) == reason
