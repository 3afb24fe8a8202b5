"""File descriptors and connection counts on a real node (vmqpy.descriptors, vmqpy.broker.listeners.address_limit,
admin.connection_cap): the node raises its soft open files limit to the hard one; idle MQTT sockets at the limit
leave `/health` and `vmq-admin` answering; one address cannot fill the node and lock another out (behind the
PROXY protocol, the client's address counts); idle and trickling admin connections are closed and capped.

Nodes run under `prlimit` (soft and hard RLIMIT_NOFILE of the test's choosing) on free ports; client sockets are
bound to 127.0.0.2 and 127.0.0.3 so the node sees two addresses."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.address_sockets import answered_busy, closed_by_peer, connect_from
from tests.integration.admin_api import admin
from tests.integration.clients import enc_connect
from tests.integration.conftest import Broker, broker_kind, free_port, health, wait_until
from tests.integration.process_usage import descriptors

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's descriptor budget and per-address limits")]

ADDRESS_A = "127.0.0.2"  # the address that floods
ADDRESS_B = "127.0.0.3"  # another client's


class LimitedBroker(Broker):
    """A node started under `prlimit --nofile=SOFT:HARD`."""

    def __init__(self, workdir: Path, soft: int, hard: int, extra: dict[str, Any]) -> None:
        super().__init__(broker_kind(), workdir, extra)
        self.nofile = (soft, hard)

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile[0]}:{self.nofile[1]}", "--", *super().command()]

    def open_files_limit(self) -> tuple[int, int]:
        """(soft, hard) RLIMIT_NOFILE of the running process, from /proc/PID/limits."""
        for line in Path(f"/proc/{self.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
        raise AssertionError("no 'Max open files' line")

    def descriptors(self) -> int:
        return descriptors(self.pid)


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Callable[..., LimitedBroker]]:
    started: list[LimitedBroker] = []

    def make(soft: int, hard: int, **extra: Any) -> LimitedBroker:
        broker = LimitedBroker(tmp_path / f"node{len(started)}", soft, hard, extra)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        broker.stop()


@contextlib.contextmanager
def sockets_from(address: str) -> Iterator[list[socket.socket]]:
    """A list to put client sockets bound to `address` in; all closed at the end."""
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def mqtt_connects_from(address: str, port: int, client_id: str) -> bool:
    """A 3.1.1 CONNECT from `address` gets CONNACK accepted (0x20 0x02, no session, return code 0)."""
    try:
        with connect_from(address, port) as sock:
            sock.settimeout(5)
            sock.sendall(enc_connect(client_id))
            received = b""
            while len(received) < 4:
                chunk = sock.recv(4 - len(received))
                if not chunk:
                    return False
                received += chunk
            return received == b"\x20\x02\x00\x00"
    except OSError:
        return False


# ------------------------------------------------------------------------- the open files limit


def flood_from_30_addresses(idle: list[socket.socket], port: int) -> None:
    """300 idle sockets to `port` (more than a node's 256 descriptors), 10 from each of 30 addresses, added to
    `idle` until one cannot be opened; waits until the node has closed those over its budget at once."""
    for i in range(300):
        try:
            idle.append(connect_from(f"127.0.1.{1 + i % 30}", port))
        except OSError:
            break
    wait_until(lambda: sum(closed_by_peer(s) for s in idle) >= len(idle) - 256 + 64, 20,
               what="idle sockets over the budget closed")


def test_the_node_raises_its_soft_open_files_limit_to_the_hard_one(limited: Callable[..., LimitedBroker]) -> None:
    broker = limited(256, 4096)
    assert broker.open_files_limit() == (4096, 4096)
    wait_until(lambda: "open files limit raised" in broker.log_tail(200), 10, what="the log line")
    line = next(x for x in broker.log_tail(200).splitlines() if "open files limit raised" in x)
    assert "256" in line and "4096" in line


# ------------------------------------------------------------------------- the reserve for the admin API


def test_idle_mqtt_sockets_at_the_limit_leave_health_and_vmq_admin_answering(
        limited: Callable[..., LimitedBroker]) -> None:
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    broker = limited(256, 256, **{"listener.http.default": f"127.0.0.1:{http_port}", "mqtt.connect_timeout": "120s"})
    wait_until(lambda: health(url) == 200, 15, what="admin API")
    with sockets_from(ADDRESS_A) as idle:
        flood_from_30_addresses(idle, broker.port)  # the node holds what its budget allows, closes the rest
        assert broker.descriptors() < 256 - 64  # the admin API's reserve and the spare stay free
        assert health(url) == 200
        shown = admin(url, broker.data_dir, "listener", "show")
        assert shown.returncode == 0, shown.stderr
        assert not mqtt_connects_from(ADDRESS_B, broker.port, "refused-at-the-budget")
    # once the idle sockets are gone, a well-behaved client is served again
    wait_until(lambda: mqtt_connects_from(ADDRESS_B, broker.port, "served-again"), 20, what="a client served again")
    assert "connections refused: the MQTT listeners hold every descriptor" in broker.log_tail(400)


# ------------------------------------------------------------------------- per address


def connected_from(address: str, port: int, client_id: str, prefix: bytes = b"") -> socket.socket | None:
    """A socket from `address` whose CONNECT (after `prefix`, a PROXY header) got CONNACK accepted; None when
    the node closed it instead."""
    try:
        sock = connect_from(address, port)
        sock.settimeout(5)
        sock.sendall(prefix + enc_connect(client_id))
        received = b""
        while len(received) < 4:
            chunk = sock.recv(4 - len(received))
            if not chunk:
                sock.close()
                return None
            received += chunk
    except OSError:
        return None
    assert received == b"\x20\x02\x00\x00", received
    sock.setblocking(False)  # closed_by_peer looks without waiting
    return sock


def test_one_address_cannot_lock_another_out_of_max_connections(limited: Callable[..., LimitedBroker]) -> None:
    broker = limited(4096, 4096, **{"listener.max_connections": 10, "listener.max_connections_per_address": 5})
    with sockets_from(ADDRESS_A) as held_a, sockets_from(ADDRESS_B) as held_b:
        refused_a = 0
        for i in range(10):  # A tries to fill max_connections
            sock = connected_from(ADDRESS_A, broker.port, f"a-{i}")
            if sock is None:
                refused_a += 1
            else:
                held_a.append(sock)
        assert (len(held_a), refused_a) == (5, 5)
        for i in range(5):  # B gets in, 5 of 5
            sock = connected_from(ADDRESS_B, broker.port, f"b-{i}")
            assert sock is not None, f"B's connection {i} refused"
            held_b.append(sock)
        assert not any(closed_by_peer(s) for s in held_a + held_b)
    assert "listener.max_connections_per_address" in broker.log_tail(200)


def test_by_default_one_address_of_idle_sockets_leaves_room_for_another(
        limited: Callable[..., LimitedBroker]) -> None:
    broker = limited(256, 256, **{"mqtt.connect_timeout": "120s"})
    with sockets_from(ADDRESS_A) as idle, sockets_from(ADDRESS_B) as held_b:
        for _ in range(300):
            try:
                idle.append(connect_from(ADDRESS_A, broker.port))
            except OSError:
                break
        # an eighth of the node's MQTT sockets may wait for their CONNECT from one address: at most 256 / 8
        wait_until(lambda: sum(closed_by_peer(s) for s in idle) >= len(idle) - 256 // 8, 20,
                   what="A's sockets over its pending limit closed")
        for i in range(5):
            sock = connected_from(ADDRESS_B, broker.port, f"b-{i}")
            assert sock is not None, f"B's connection {i} refused"
            held_b.append(sock)
    assert "listener.max_pending_per_address" in broker.log_tail(400)


def test_behind_the_proxy_protocol_the_clients_address_counts(limited: Callable[..., LimitedBroker]) -> None:
    broker = limited(4096, 4096, **{"listener.tcp.proxy_protocol": "on",
                                    "listener.max_connections_per_address": 3})

    def header(source: str, port: int) -> bytes:
        return f"PROXY TCP4 {source} 127.0.0.1 {port} {broker.port}\r\n".encode()

    with sockets_from(ADDRESS_A) as held:  # every socket comes from the balancer's one address
        results = [connected_from(ADDRESS_A, broker.port, f"c1-{i}", header("10.0.0.1", 40000 + i))
                   for i in range(5)]
        held.extend(s for s in results if s is not None)
        assert [s is not None for s in results] == [True, True, True, False, False]
        for i in range(3):  # another client behind the same balancer
            sock = connected_from(ADDRESS_A, broker.port, f"c2-{i}", header("10.0.0.2", 41000 + i))
            assert sock is not None, f"10.0.0.2's connection {i} refused"
            held.append(sock)
    assert "10.0.0.1" in broker.log_tail(200)


# ------------------------------------------------------------------------- the admin listener

TRICKLED = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(
    f"X-Filler-{i}: {'x' * 40}\r\n".encode() for i in range(80)) + b"\r\n"


def test_idle_and_trickling_admin_connections_are_closed(limited: Callable[..., LimitedBroker]) -> None:
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    limited(4096, 4096, **{"listener.http.default": f"127.0.0.1:{http_port}"})  # request_timeout 10s
    wait_until(lambda: health(url) == 200, 15, what="admin API")
    with sockets_from(ADDRESS_A) as idle, sockets_from(ADDRESS_A) as trickling:
        for _ in range(40):
            idle.append(connect_from(ADDRESS_A, http_port))
        for _ in range(5):
            trickling.append(connect_from(ADDRESS_A, http_port))
        sent = 0
        # one byte of the header to each trickling socket at a time, paced; the node closes them long before
        # the whole header is there (len(TRICKLED) bytes, 2,000 paced steps)
        while sent < len(TRICKLED) and not all(closed_by_peer(s) for s in trickling):
            for sock in trickling:
                with contextlib.suppress(OSError):
                    sock.send(TRICKLED[sent:sent + 1])
            sent += 1
            time.sleep(0.01)  # pacing of the trickle, not a synchronisation
        assert sent < len(TRICKLED), "a trickled header was read to its end"
        wait_until(lambda: all(closed_by_peer(s) for s in idle), 30, what="idle admin connections closed")
        assert health(url) == 200


def test_admin_connections_over_the_cap_get_503_and_the_api_answers_once_they_go(
        limited: Callable[..., LimitedBroker]) -> None:
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    broker = limited(4096, 4096, **{"listener.http.default": f"127.0.0.1:{http_port}"})  # max_connections 64
    wait_until(lambda: health(url) == 200, 15, what="admin API")
    with sockets_from(ADDRESS_A) as idle:
        for _ in range(100):
            idle.append(connect_from(ADDRESS_A, http_port))
        wait_until(lambda: sum(answered_busy(s) for s in idle) >= 36, 20, what="connections over the cap answered")
        assert sum(answered_busy(s) for s in idle) == 36  # the 64 under the cap are held, unanswered
    wait_until(lambda: health(url) == 200, 20, what="the API answering again")
    assert "listener.http.max_connections" in broker.log_tail(200)


def test_websockets_of_one_address_count_against_its_limit(limited: Callable[..., LimitedBroker]) -> None:
    ws_port = free_port()
    broker = limited(4096, 4096, **{"listener.ws.default": f"127.0.0.1:{ws_port}",
                                    "listener.max_connections_per_address": 2})

    held: list[aiohttp.ClientWebSocketResponse] = []

    async def attempt(session: aiohttp.ClientSession, client_id: str) -> bool:
        """A WebSocket of `session` (bound to its address) whose CONNECT gets CONNACK accepted, kept open (a socket
        over the address's limit is closed at its accept, before the upgrade)."""
        try:
            ws = await session.ws_connect(f"http://127.0.0.1:{ws_port}/mqtt", protocols=("mqtt",))
        except aiohttp.ClientError:
            return False
        held.append(ws)
        await ws.send_bytes(enc_connect(client_id))
        message = await ws.receive(timeout=5)
        return message.type == aiohttp.WSMsgType.BINARY and message.data == b"\x20\x02\x00\x00"

    async def scenario() -> tuple[list[bool], list[bool]]:
        sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0), limit=0))
                    for address in (ADDRESS_A, ADDRESS_B)]
        try:
            a = [await attempt(sessions[0], f"ws-a-{i}") for i in range(4)]
            b = [await attempt(sessions[1], f"ws-b-{i}") for i in range(2)]
            return a, b
        finally:
            for ws in held:
                await ws.close()
            for session in sessions:
                await session.close()

    a, b = asyncio.run(scenario())
    assert (a, b) == ([True, True, False, False], [True, True])
    assert "listener.max_connections_per_address" in broker.log_tail(200)


# ------------------------------------------------------------------------- sockets before the WebSocket upgrade


def websocket_connects_from(address: str, port: int, client_id: str) -> bool:
    """A WebSocket from `address` whose 3.1.1 CONNECT gets CONNACK accepted."""

    async def attempt() -> bool:
        connector = aiohttp.TCPConnector(local_addr=(address, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.ws_connect(f"http://127.0.0.1:{port}/mqtt", protocols=("mqtt",)) as ws:
                await ws.send_bytes(enc_connect(client_id))
                message = await ws.receive(timeout=5)
                return message.type == aiohttp.WSMsgType.BINARY and message.data == b"\x20\x02\x00\x00"

    try:
        return asyncio.run(asyncio.wait_for(attempt(), 10))
    except (TimeoutError, OSError, aiohttp.ClientError):
        return False


def test_idle_sockets_before_the_websocket_upgrade_leave_health_answering(
        limited: Callable[..., LimitedBroker]) -> None:
    """Sockets on a WebSocket listener that never send their upgrade request count in the MQTT socket budget from
    their accept (before: only from the upgrade, so 300 of them took every descriptor and /health went dark)."""
    http_port, ws_port = free_port(), free_port()
    url = f"http://127.0.0.1:{http_port}"
    broker = limited(256, 256, **{"listener.http.default": f"127.0.0.1:{http_port}",
                                  "listener.ws.default": f"127.0.0.1:{ws_port}", "mqtt.connect_timeout": "120s"})
    wait_until(lambda: health(url) == 200, 15, what="admin API")
    with sockets_from(ADDRESS_A) as idle:
        flood_from_30_addresses(idle, ws_port)
        assert broker.descriptors() < 256 - 64  # the admin API's reserve and the spare stay free
        assert health(url) == 200
    wait_until(lambda: websocket_connects_from(ADDRESS_B, ws_port, "served-again"), 20, what="a WebSocket served")


def test_one_address_of_idle_sockets_before_the_upgrade_leaves_room_for_another(
        limited: Callable[..., LimitedBroker]) -> None:
    """One address's sockets before their upgrade count against listener.max_pending_per_address (auto: an eighth
    of the node's MQTT sockets), so another address's WebSocket clients keep getting in."""
    ws_port = free_port()
    broker = limited(256, 256, **{"listener.ws.default": f"127.0.0.1:{ws_port}", "mqtt.connect_timeout": "120s"})
    with sockets_from(ADDRESS_A) as idle:
        for _ in range(300):
            try:
                idle.append(connect_from(ADDRESS_A, ws_port))
            except OSError:
                break
        wait_until(lambda: sum(closed_by_peer(s) for s in idle) >= len(idle) - 256 // 8, 20,
                   what="A's sockets over its pending limit closed")
        assert broker.descriptors() < 256 // 8 + 64
        for i in range(3):
            assert websocket_connects_from(ADDRESS_B, ws_port, f"b-{i}"), f"B's WebSocket {i} refused"
    assert "listener.max_pending_per_address" in broker.log_tail(400)
