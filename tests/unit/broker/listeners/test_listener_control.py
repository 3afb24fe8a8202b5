"""The listeners' life as the operator sees it (vmqpy.broker.listeners.listener_control), with real asyncio servers on
loopback ports chosen by the kernel: opened, stopped, started, and never opened again once the node drains."""

from __future__ import annotations

import asyncio
import socket

import pytest

from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listener_control import ListenerControl
from vmqpy.config import Config
from vmqpy.drain import Drain


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


TCP_PORT, WS_PORT = free_port(), free_port()
CONFIG = Config(tcp_listeners=(("default", "127.0.0.1", TCP_PORT),), ws_listeners=(("web", "127.0.0.1", WS_PORT),))


class Servers:
    """Stands in for vmqpy.broker.listeners.listeners.Listeners: real servers that close every connection at once."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, str]] = []

    async def open(self, kind: str, name: str, host: str, port: int) -> asyncio.Server:
        self.opened.append((kind, name))
        return await asyncio.start_server(lambda _r, w: w.close(), host, port)


def control(left: bool = False) -> tuple[ListenerControl, Servers]:
    connections: set[MQTTConnection] = set()
    lc = ListenerControl(CONFIG, connections, lambda: left)
    servers = Servers()
    lc.listener_set = servers  # type: ignore[assignment]  # the stand-in has the one method used
    return lc, servers


async def test_open_all_opens_every_listener_and_advertises_their_bound_addresses() -> None:
    lc, servers = control()
    await lc.open_all()
    try:
        assert servers.opened == [("tcp", "default"), ("ws", "web")]
        assert lc.advertised() == {"tcp": f"127.0.0.1:{TCP_PORT}", "ws": f"127.0.0.1:{WS_PORT}"}
        assert sorted(lc.bound_ports()) == sorted([("127.0.0.1", TCP_PORT), ("127.0.0.1", WS_PORT)])
    finally:
        lc.close_servers()


async def test_a_stopped_listener_stays_stopped_when_the_others_reopen_and_starts_again() -> None:
    lc, servers = control()
    await lc.open_all()
    try:
        port = TCP_PORT
        assert "stopped" in lc.stop("127.0.0.1", port, kill_sessions=False)
        assert [row["status"] for row in lc.rows()] == ["stopped", "running"]
        lc.close_servers()
        await lc.open_all()  # a `leave -k` reopening: the stopped one stays stopped
        assert servers.opened[-1] == ("ws", "web") and [r["status"] for r in lc.rows()] == ["stopped", "running"]
        assert "started" in await lc.start("127.0.0.1", port)
        assert [row["status"] for row in lc.rows()] == ["running", "running"]
    finally:
        lc.close_servers()


async def test_a_drained_node_never_opens_its_listeners_again() -> None:
    lc, servers = control()
    await lc.open_all()
    lc.drain = Drain(rate=10, timeout=1, started=0.0)
    lc.close_servers()
    await lc.open_all()  # what a `cluster leave -k` after the drain would ask
    assert servers.opened == [("tcp", "default"), ("ws", "web")], "reopened while drained"
    with pytest.raises(RuntimeError, match="drains"):
        await lc.start("127.0.0.1", TCP_PORT)


async def test_a_node_that_left_cannot_start_a_listener() -> None:
    lc, _servers = control(left=True)
    await lc.open_all()
    try:
        lc.stop("127.0.0.1", TCP_PORT, kill_sessions=False)
        with pytest.raises(RuntimeError, match="left the cluster"):
            await lc.start("127.0.0.1", TCP_PORT)
        with pytest.raises(LookupError):
            lc.stop("127.0.0.9", 1, kill_sessions=False)
    finally:
        lc.close_servers()


