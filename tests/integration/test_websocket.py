"""MQTT over WebSocket (`listener.ws.NAME`, `listener.wss.NAME`, docs/security.md "WebSocket listeners"):
paho-mqtt with transport="websockets", plain and over TLS, on 3.1.1 and 5.0, exchanges messages with a plain TCP
client; packets cut across frames and frames holding several packets; what is refused (no `mqtt` subprotocol,
text frames) and that the node goes on serving."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable

import aiohttp
import pytest

from tests.integration.admin_api import admin
from tests.integration.clients import (
    PahoClient,
    RawClient,
    enc_connect,
    enc_pingreq,
    enc_publish,
    enc_subscribe,
    unique,
)
from tests.integration.conftest import Broker, free_port, wait_until
from tests.integration.pki import Pki, pki

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's WebSocket listeners")]

__all__ = ["pki"]  # the fixture this module's tests take


@pytest.fixture
def ws_node(broker_factory: Callable[..., Broker], pki: Pki) -> tuple[Broker, int, int, str]:
    """A node with a plain TCP listener, a ws listener and a wss listener, and the admin API."""
    ws_port, wss_port, http_port = free_port(), free_port(), free_port()
    broker = broker_factory(**{
        "listener.http.default": f"127.0.0.1:{http_port}",
        "listener.ws.default": f"127.0.0.1:{ws_port}",
        "listener.wss.default": f"127.0.0.1:{wss_port}",
        "listener.wss.certfile": str(pki.cert_file),
        "listener.wss.keyfile": str(pki.key_file),
    })
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    return broker, ws_port, wss_port, url


def round_trip(broker: Broker, client: PahoClient, version: int) -> None:
    """`client` and a TCP client each receive what the other publishes (QoS 1)."""
    plain = RawClient(broker.port, broker.host, version)
    try:
        client.connect()
        plain.connect(unique("tcp"))
        to_ws, to_tcp = unique("ws/in/"), unique("ws/out/")
        client.subscribe(to_ws, qos=1)
        plain.subscribe(to_tcp, qos=1)
        plain.publish(to_ws, b"from tcp", qos=1)
        message = client.get()
        assert (message.topic, message.payload) == (to_ws, b"from tcp")
        big = bytes(range(256)) * 1024  # 256 KiB: more than one read, more than the write high-water mark
        client.publish(to_tcp, big, qos=1)
        client.publish(to_tcp, b"from websocket", qos=1)
        first, second = plain.recv_publishes(2, timeout=10)
        assert (first.topic, first.payload, second.payload) == (to_tcp, big, b"from websocket")
    finally:
        client.disconnect()
        client.stop()
        plain.close()


@pytest.mark.parametrize("version", [4, 5])
def test_paho_over_websocket_exchanges_messages_with_a_tcp_client(ws_node: tuple[Broker, int, int, str],
                                                                  version: int) -> None:
    broker, ws_port, _wss, _url = ws_node
    client = PahoClient(ws_port, version, unique(f"ws{version}"), transport="websockets")
    round_trip(broker, client, version)


@pytest.mark.parametrize("version", [4, 5])
def test_paho_over_secure_websocket_exchanges_messages_with_a_tcp_client(ws_node: tuple[Broker, int, int, str],
                                                                         pki: Pki, version: int) -> None:
    broker, _ws, wss_port, _url = ws_node
    client = PahoClient(wss_port, version, unique(f"wss{version}"), transport="websockets")
    client.client.tls_set(ca_certs=str(pki.ca_file))
    round_trip(broker, client, version)


async def _raw_session(port: int, steps: Callable[[aiohttp.ClientWebSocketResponse], object],
                       ssl_context: ssl.SSLContext | bool = False) -> object:
    scheme = "wss" if ssl_context else "ws"
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"{scheme}://127.0.0.1:{port}/mqtt", protocols=("mqtt",), ssl=ssl_context) as ws:
        assert ws.protocol == "mqtt"
        result = steps(ws)
        assert asyncio.iscoroutine(result)
        return await result


async def _next_binary(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    message = await asyncio.wait_for(ws.receive(), 5)
    assert message.type is aiohttp.WSMsgType.BINARY, message
    assert isinstance(message.data, bytes)
    return message.data


async def _read_bytes(ws: aiohttp.ClientWebSocketResponse, count: int) -> bytes:
    data = b""
    while len(data) < count:
        data += await _next_binary(ws)
    return data


def test_packets_cut_across_frames_and_frames_with_several_packets(ws_node: tuple[Broker, int, int, str]) -> None:
    broker, ws_port, _wss, _url = ws_node
    topic = unique("ws/frames/")

    async def steps(ws: aiohttp.ClientWebSocketResponse) -> None:
        connect = enc_connect(unique("frames"))
        for i in range(len(connect)):  # the CONNECT one byte per frame
            await ws.send_bytes(connect[i:i + 1])
        assert await _read_bytes(ws, 4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
        # SUBSCRIBE, PUBLISH and PINGREQ in one frame: SUBACK, the PUBLISH back and PINGRESP come out.
        await ws.send_bytes(enc_subscribe(1, [(topic, 0)]) + enc_publish(topic, b"one frame") + enc_pingreq())
        expected = b"\x90\x03\x00\x01\x00" + enc_publish(topic, b"one frame") + b"\xd0\x00"
        assert await _read_bytes(ws, len(expected)) == expected

    asyncio.run(_raw_session(ws_port, steps))
    assert broker.alive()


def test_a_text_frame_closes_the_connection(ws_node: tuple[Broker, int, int, str]) -> None:
    broker, ws_port, _wss, _url = ws_node

    async def steps(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMsgType:
        await ws.send_bytes(enc_connect(unique("text")))
        assert await _read_bytes(ws, 4) == b"\x20\x02\x00\x00"
        await ws.send_str("not mqtt")
        message = await asyncio.wait_for(ws.receive(), 10)
        return message.type

    assert asyncio.run(_raw_session(ws_port, steps)) in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert "a text frame" in broker.log_tail(50)


def test_a_handshake_without_the_mqtt_subprotocol_is_refused(ws_node: tuple[Broker, int, int, str]) -> None:
    broker, ws_port, _wss, url = ws_node

    async def attempt() -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(f"ws://127.0.0.1:{ws_port}/mqtt", protocols=("chat",)):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    assert asyncio.run(attempt()) == 400
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{ws_port}/other", timeout=5)
    assert err.value.code == 404
    out = admin(url, broker.data_dir, "metrics", "show", "--json")
    rows = json.loads(out.stdout)
    values = {r["Metric"]: r["Value"] for r in rows} if isinstance(rows, list) else rows
    assert values["broker.connections"] == 0


def test_secure_websocket_with_a_client_certificate_as_the_user(broker_factory: Callable[..., Broker],
                                                                pki: Pki) -> None:
    """listener.wss.* has the TLS keys of listener.ssl.*: mutual TLS and use_identity_as_username included."""
    wss_port, http_port = free_port(), free_port()
    broker = broker_factory(**{
        "listener.http.default": f"127.0.0.1:{http_port}",
        "listener.wss.default": f"127.0.0.1:{wss_port}",
        "listener.wss.certfile": str(pki.cert_file),
        "listener.wss.keyfile": str(pki.key_file),
        "listener.wss.cafile": str(pki.ca_file),
        "listener.wss.require_certificate": "on",
        "listener.wss.use_identity_as_username": "on",
    })
    url = f"http://127.0.0.1:{http_port}"
    wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200, 15, what="admin API")
    client_id = unique("wss-cert")
    client = PahoClient(wss_port, 5, client_id, transport="websockets")
    client.client.tls_set(ca_certs=str(pki.ca_file), certfile=str(pki.client_cert), keyfile=str(pki.client_key))
    try:
        client.connect()
        out = admin(url, broker.data_dir, "session", "show", "--client_id", "--user", "--json")
        assert out.returncode == 0, out.stderr
        assert {"client_id": client_id, "user": "device-42"} in json.loads(out.stdout)
    finally:
        client.disconnect()
        client.stop()
    anonymous = PahoClient(wss_port, 5, unique("wss-no-cert"), transport="websockets")
    anonymous.client.tls_set(ca_certs=str(pki.ca_file))
    try:
        with pytest.raises((ssl.SSLError, ConnectionError, AssertionError)):
            anonymous.connect(timeout=5)
    finally:
        anonymous.stop()


def test_max_connections_of_a_websocket_listener_counts_websockets(broker_factory: Callable[..., Broker]) -> None:
    ws_port = free_port()
    broker = broker_factory(**{"listener.ws.default": f"127.0.0.1:{ws_port}",
                               "listener.ws.default.max_connections": "1"})

    async def scenario() -> tuple[bytes, bool, bytes]:
        async with aiohttp.ClientSession() as session:
            first = await session.ws_connect(f"ws://127.0.0.1:{ws_port}/mqtt", protocols=("mqtt",))
            await first.send_bytes(enc_connect(unique("first")))
            accepted = await _read_bytes(first, 4)
            try:  # the socket counts from its accept: the second is closed before its upgrade
                second = await session.ws_connect(f"ws://127.0.0.1:{ws_port}/mqtt", protocols=("mqtt",))
            except aiohttp.ClientError:
                refused = True
            else:
                refused = False
                await second.close()
            await first.close()  # its place is free again
            for _ in range(100):
                try:
                    third = await session.ws_connect(f"ws://127.0.0.1:{ws_port}/mqtt", protocols=("mqtt",))
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)  # pacing of the retries; the first's socket is still closing
                    continue
                await third.send_bytes(enc_connect(unique("third")))
                answer = await asyncio.wait_for(third.receive(), 5)
                await third.close()
                if answer.type is aiohttp.WSMsgType.BINARY:
                    return accepted, refused, answer.data
                await asyncio.sleep(0.05)
            return accepted, refused, b""

    accepted, refused, later = asyncio.run(scenario())
    assert accepted == b"\x20\x02\x00\x00" and later == b"\x20\x02\x00\x00"
    assert refused
    assert "max_connections" in broker.log_tail(50)
