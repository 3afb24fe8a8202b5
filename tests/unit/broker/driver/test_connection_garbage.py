"""A closed connection is freed at once, by reference counting, whatever it did: no reference cycle keeps it for
the garbage collector, which a busy node runs rarely (vmqpy.node.tune_garbage_collector). Before 2026-11-26 every
connection was such a cycle (the listener's wrapper of `connection_lost`, the acknowledgement queue's failure
callback, a WebSocket transport and its protocol), and a node serving many short connections grew by about
20 KB of memory per WebSocket connection until a full collection."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from tests.unit.broker.fakes import MemoryMetadata
from tests.unit.transports import FakeTransport
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listeners import Listeners
from vmqpy.broker.listeners.tls import ListenerContexts
from vmqpy.broker.listeners.tls import settings_of as tls_settings_of
from vmqpy.config import Config
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connect, Disconnect, Publish, SubOptions, Subscribe, Subscription
from vmqpy.storage import Storage

CONFIG = Config(tcp_listeners=(("default", "127.0.0.1", 1883),), ws_listeners=(("web", "127.0.0.1", 8080),),
                allow_anonymous=True)


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def alive() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, MQTTConnection))


async def use(conn: MQTTConnection, client_id: str, clean: bool) -> None:
    conn.connection_made(FakeTransport())
    conn.data_received(encode(Connect(client_id, protocol_level=5, clean_start=clean), 5))
    await asyncio.sleep(0.01)
    conn.data_received(encode(Subscribe(1, [Subscription("t/#", SubOptions(1))]), 5))
    conn.data_received(encode(Publish("t/x", b"p", qos=1, packet_id=2), 5))
    await asyncio.sleep(0.05)  # the storage barrier of the persistent session's writes
    conn.data_received(encode(Disconnect(0), 5))
    conn.connection_lost(None)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "persistent"])
async def test_a_closed_connection_is_freed_without_the_garbage_collector(
    storage: Storage, no_collector: None, clean: bool
) -> None:
    broker = Broker(CONFIG, SessionStore(storage), MemoryMetadata())
    connections: set[MQTTConnection] = set()
    listeners = Listeners(CONFIG, broker, storage, Authenticator(True, {}), connections,
                          ListenerContexts(tls_settings_of(CONFIG)))
    before = alive()
    await use(listeners.open_mqtt("tcp", "default"), "tcp-client", clean)
    protocol = listeners.websocket_connection("ws", "web")
    assert isinstance(protocol, MQTTConnection)
    await use(protocol, "ws-client", clean)
    del protocol
    await asyncio.sleep(0.05)
    assert connections == set()
    assert listeners.limits[("ws", "web")].live == 0, "the WebSocket's max_connections place is free again"
    assert alive() == before, "a closed connection is still alive: something holds it in a reference cycle"
