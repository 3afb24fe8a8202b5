"""What an idle clean connection holds (issue 21, "Memory": at most 3 KB of RSS per idle clean connection).

The shape is pinned where it can be: no attribute dictionary on the per-connection objects, the callbacks of a
connection's end shared by every connection of its listener, no event-loop timer per connection for its keep
alive (one wheel per loop, vmqpy.broker.driver.keepalive), the peer's address read from the socket when asked, not kept;
and the Python heap of 1,000 idle clean 3.1.1 connections made through the tcp listener's CONNECT prelude stays
under BYTES_PER_CONNECTION each (measured 1,743 bytes on 2026-11-27, fourth session, 2,911 before it, the fake
transport's own bytes in neither; a libuv timer per connection would add about 570, a closure and a tuple per
connection about 370). The rest of the RSS is uvloop's transport and the allocator's (docs/performance.md, "Idle
connections and connects").
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from tests.unit.broker.connections import node
from tests.unit.loop_turns import settle
from tests.unit.transports import FakeTransport
from vmqpy import logconfig
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connect, Disconnect
from vmqpy.storage import Storage

CONNECTIONS = 1_000
WARMUP = 100
BYTES_PER_CONNECTION = 2_050


class Socket(FakeTransport):
    """A fake socket that keeps nothing that grows with what is written to it."""

    def write(self, data: Any) -> None:
        pass


def idle_connection(make: Any, client_id: str) -> tuple[MQTTConnection, Socket]:
    socket = Socket()
    prelude = make()
    socket.protocol = prelude
    prelude.connection_made(socket)
    prelude.data_received(encode(Connect(client_id, protocol_level=4, clean_start=True, keep_alive=600), 4))
    conn = socket.protocol
    assert isinstance(conn, MQTTConnection) and conn.session is not None
    return conn, socket


async def test_idle_connections_share_their_end_callbacks_and_arm_no_timer_of_their_own(storage: Storage) -> None:
    _broker, listeners, _metadata = node(storage)
    make = listeners.factory("tcp", "default")
    (a, _), (b, _) = idle_connection(make, "a"), idle_connection(make, "b")
    for conn in (a, b):
        assert not any(hasattr(part, "__dict__") for part in (conn, conn.session, conn.machine, conn.machine.state,
                                                              conn.decoder, conn.acks))
        assert conn.machine._may_write is None, "the ACL's cache of a node without an ACL is never made"
        assert conn._timer is None  # the connection's one timer (CONNECT timeout, resends, a close's abort)
        assert conn.keepalive_bucket is not None and conn in conn.keepalive_bucket
    assert a.on_lost is b.on_lost, "one tuple of callbacks per listener"
    ws = listeners.open_mqtt("ws", "default", release=_nothing)
    assert ws.on_lost is not a.on_lost and ws.on_lost is listeners.open_mqtt("ws", "default", release=_nothing).on_lost
    for conn in (a, b):
        conn.data_received(encode(Disconnect(0), 4))
        conn.connection_lost(None)
        assert conn.keepalive_bucket is None


def _nothing() -> None:
    return None


async def test_an_idle_clean_connection_holds_at_most_its_budget_of_python_heap(storage: Storage) -> None:
    before_level = logconfig.level()
    logconfig.set_level("error")  # the default of a node: no logger is bound, no line built
    _broker, listeners, _metadata = node(storage)
    make = listeners.factory("tcp", "default")
    try:
        for i in range(WARMUP):
            conn, _socket = idle_connection(make, f"w{i}")
            await settle()
            conn.connection_lost(None)
        await settle()
        sockets = [Socket() for _ in range(CONNECTIONS)]  # made before the measure: not the node's memory
        # The loop's clock stands still while they connect: they share one bucket of the keep-alive wheel however
        # fast this machine runs them (on a loaded machine they spread over more buckets, a few bytes each).
        loop = asyncio.get_running_loop()
        frozen = loop.time()
        loop.time = lambda: frozen  # type: ignore[method-assign]  # an instance attribute, removed below
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            held = []
            for i, socket in enumerate(sockets):
                prelude = make()
                socket.protocol = prelude
                prelude.connection_made(socket)
                prelude.data_received(encode(Connect(f"idle-{i:06d}", protocol_level=4, clean_start=True,
                                                     keep_alive=600), 4))
                held.append(socket.protocol)
                await settle()
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before - 8 * CONNECTIONS  # less the list `held`
        finally:
            tracemalloc.stop()
            del loop.time
        per_connection = grown / CONNECTIONS
        assert per_connection < BYTES_PER_CONNECTION, f"{per_connection:.0f} bytes of Python heap per idle connection"
        for protocol in held:
            assert isinstance(protocol, MQTTConnection)
            protocol.connection_lost(None)
        assert all(isinstance(conn, MQTTConnection) and conn.keepalive_bucket is None for conn in held)
    finally:
        logconfig.set_level(before_level)


class GoneSocket(Socket):
    """A socket whose peer can no longer be read (uvloop's, once closed)."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            raise OSError(107, "Transport endpoint is not connected")
        return default


async def test_the_peer_is_read_from_the_socket_when_asked_not_kept(storage: Storage) -> None:
    _broker, listeners, _metadata = node(storage)
    conn, socket = idle_connection(listeners.factory("tcp", "default"), "p")
    assert conn._peer is None, "nothing kept per connection"
    assert conn.peer == ("127.0.0.1", 5555)
    assert conn._connect_at == 0.0, "the CONNECT's time is not kept once the CONNACK is written"
    proxied = listeners.open_mqtt("tcp", "default", ("203.0.113.7", 4242))
    proxied.connection_made(socket)
    assert proxied.peer == ("203.0.113.7", 4242), "a PROXY header's address wins over the socket's"
    gone = listeners.open_mqtt("tcp", "default")
    gone.connection_made(GoneSocket())
    assert gone.peer is None
    unconnected = listeners.open_mqtt("tcp", "default")
    assert unconnected.peer is None
    for each in (conn, proxied, gone):
        each.connection_lost(None)
