"""vmqpy.broker.listeners.preludes: the PROXY header prelude hands the socket on with the header's address and the bytes
after the header, however the header is cut into reads; refuses everything else (counted, logged at most once a
second); the option is accepted on every kind of MQTT listener."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.transports import FakeTransport
from vmqpy import config
from vmqpy.broker.listeners.preludes import FailureLog, ProxyPrelude
from vmqpy.broker.listeners.proxy_protocol import Address, Command, Family, encode_v1, encode_v2


class Recorder(asyncio.Protocol):
    def __init__(self, peer: tuple[str, int] | None) -> None:
        self.peer = peer
        self.transport: Any = None
        self.data = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data


def run(chunks: list[bytes]) -> tuple[ProxyPrelude, FakeTransport, list[Recorder], Counter[str], list[int]]:
    """Feed `chunks` to a ProxyPrelude inside a running loop; return what happened."""
    made: list[Recorder] = []
    metrics: Counter[str] = Counter()
    lost: list[int] = []

    async def scenario() -> tuple[ProxyPrelude, FakeTransport]:
        def open_connection(peer: tuple[str, int] | None) -> Recorder:
            made.append(Recorder(peer))
            return made[-1]

        prelude = ProxyPrelude(open_connection, FailureLog("default", "refused", "refused", metrics),
                               lambda: lost.append(1))
        transport = FakeTransport()
        prelude.connection_made(transport)
        for chunk in chunks:
            receiver = transport.protocol or prelude
            assert isinstance(receiver, asyncio.Protocol)
            receiver.data_received(chunk)
        prelude.connection_lost(None)
        return prelude, transport

    prelude, transport = asyncio.run(scenario())
    return prelude, transport, made, metrics, lost


HEADERS = [
    (encode_v1(Address("203.0.113.7", 40001), Address("127.0.0.1", 1883)), ("203.0.113.7", 40001)),
    (encode_v1(Address("2001:db8::7", 1), Address("2001:db8::1", 2)), ("2001:db8::7", 1)),
    (encode_v2(source=Address("192.0.2.44", 51000), destination=Address("127.0.0.1", 1883)), ("192.0.2.44", 51000)),
    (encode_v2(family=Family.TCP6, source=Address("2001:db8::44", 9), destination=Address("::1", 1883)),
     ("2001:db8::44", 9)),
    (encode_v2(Command.LOCAL, Family.UNSPEC), None),
    (encode_v1(), None),
]
MQTT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"


@given(st.sampled_from(HEADERS), st.data())
def test_any_cut_of_the_header_gives_the_same_connection(case: tuple[bytes, Any], data: st.DataObject) -> None:
    header, peer = case
    stream = header + MQTT
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=6)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    _prelude, transport, made, metrics, lost = run(chunks)
    assert [r.peer for r in made] == [peer]
    assert made[0].data == MQTT and made[0].transport is transport and transport.protocol is made[0]
    assert not transport.aborted and metrics == Counter() and lost == []


def test_bytes_that_are_no_header_are_refused_counted_and_the_socket_aborted() -> None:
    for garbage in (MQTT, b"GET / HTTP/1.1\r\n", b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n", b"\r\n\r\n\x00\r\nQUIT\n\x31"):
        _prelude, transport, made, metrics, lost = run([garbage])
        assert made == [] and transport.aborted
        assert metrics == Counter({"refused": 1}) and lost == [1]


def test_the_end_of_the_stream_inside_the_header_is_refused() -> None:
    async def scenario() -> tuple[bool, Counter[str]]:
        metrics: Counter[str] = Counter()
        prelude = ProxyPrelude(Recorder, FailureLog("default", "refused", "refused", metrics), lambda: None)
        transport = FakeTransport()
        prelude.connection_made(transport)
        prelude.data_received(b"PROXY TCP4 ")
        prelude.eof_received()
        return transport.aborted, metrics

    assert asyncio.run(scenario()) == (True, Counter({"refused": 1}))


def test_a_header_that_never_completes_is_refused_at_the_deadline() -> None:
    async def scenario() -> tuple[bool, Counter[str]]:
        metrics: Counter[str] = Counter()
        prelude = ProxyPrelude(Recorder, FailureLog("default", "refused", "refused", metrics), lambda: None,
                               timeout=0.01)
        transport = FakeTransport()
        prelude.connection_made(transport)
        prelude.data_received(encode_v2(source=Address("1.2.3.4", 1), destination=Address("5.6.7.8", 2))[:20])
        for _ in range(200):
            if transport.aborted:
                break
            await asyncio.sleep(0.01)
        return transport.aborted, metrics

    assert asyncio.run(scenario()) == (True, Counter({"refused": 1}))


def test_failures_are_logged_at_most_once_a_second() -> None:
    metrics: Counter[str] = Counter()
    failures = FailureLog("default", "refused", "refused", metrics)
    logged = [failures.failed("why", None, now) for now in (0.0, 0.2, 0.9, 1.0, 1.5, 2.1)]
    assert logged == [True, False, False, True, False, True]
    assert metrics["refused"] == 6 and failures.unlogged == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("", {"default": False}),
    ("listener.tcp.default.proxy_protocol = on\n", {"default": True}),
    ("listener.tcp.a = 127.0.0.1:1\nlistener.tcp.b = 127.0.0.1:2\nlistener.tcp.proxy_protocol = on\n"
     "listener.tcp.b.proxy_protocol = off\n", {"a": True, "b": False}),
])
def test_proxy_protocol_is_set_per_listener_or_for_every_tcp_listener(
        tmp_path: Path, text: str, expected: dict[str, bool]) -> None:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    cfg = config.load(path, environ={})
    assert {name: config.listener_option(cfg, name, "proxy_protocol") for name, _h, _p in cfg.tcp_listeners} == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("listener.ssl.a = 127.0.0.1:1\nlistener.ssl.a.proxy_protocol = on\n", {("ssl", "a"): True}),
    ("listener.ws.a = 127.0.0.1:1\nlistener.wss.b = 127.0.0.1:2\nlistener.ws.proxy_protocol = on\n",
     {("ws", "a"): True, ("wss", "b"): False}),
    ("listener.wss.b = 127.0.0.1:2\nlistener.wss.proxy_protocol = on\n", {("wss", "b"): True}),
])
def test_proxy_protocol_is_set_on_tls_and_websocket_listeners(
        tmp_path: Path, text: str, expected: dict[tuple[str, str], bool]) -> None:
    path = tmp_path / "vmqpy.conf"
    (tmp_path / "c.pem").write_text("unused: certificates are read when the node starts\n")
    path.write_text(text + "".join(f"listener.{kind}.{opt} = {tmp_path / 'c.pem'}\n"
                                   for kind in ("ssl", "wss") for opt in ("certfile", "keyfile")))
    cfg = config.load(path, environ={})
    assert {(kind, name): config.listener_option(cfg, name, "proxy_protocol", kind)
            for kind, name, _h, _p in config.mqtt_listeners(cfg)} == expected


@pytest.mark.parametrize("text", ["listener.proxy_protocol = on\n",
                                  "listener.tcp.default.proxy_protocol = maybe\n"])
def test_proxy_protocol_elsewhere_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "vmqpy.conf"
    path.write_text(text)
    with pytest.raises(config.ConfigError):
        config.load(path, environ={})
