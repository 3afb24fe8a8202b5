"""Clean clients that come and go leave nothing behind on the node (issue 21, "memory handed back"): every map
keyed by client id is emptied when the client leaves, and the Python heap does not grow with the number of
clients that came and went. A per-client entry that is never removed would grow the heap by at least the entry
(a client id string of about 60 bytes and a table slot) per client: the bound below, 40 bytes per client over
2,000 clients after a warm-up, catches one such entry. The log lines are dropped during the measure: the test
runner's capture of them grows with every line and is not the node's memory."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import pytest
import structlog

from tests.unit.broker.connections import CONFIG
from tests.unit.broker.fakes import MemoryMetadata
from tests.unit.loop_turns import settle
from tests.unit.transports import FakeTransport
from vmqpy.broker.access.auth import Authenticator
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.listeners.listeners import Listeners
from vmqpy.broker.listeners.tls import ListenerContexts
from vmqpy.broker.listeners.tls import settings_of as tls_settings_of
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Connect, Disconnect, SubOptions, Subscribe, Subscription
from vmqpy.storage import Storage

WARMUP = 200
CLIENTS = 2_000
BYTES_PER_CLIENT = 40


@pytest.fixture
def no_log_lines() -> Iterator[None]:
    saved = structlog.get_config()
    structlog.configure(processors=[drop_event], cache_logger_on_first_use=False)
    try:
        yield
    finally:
        structlog.configure(**saved)


def drop_event(_logger: Any, _name: str, _event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    raise structlog.DropEvent


async def come_and_go(conn: MQTTConnection, client_id: str, level: int) -> None:
    conn.connection_made(FakeTransport())
    conn.data_received(encode(Connect(client_id, protocol_level=level, clean_start=True), level))
    await settle(5)
    conn.data_received(encode(Subscribe(1, [Subscription(f"fleet/{client_id}/#", SubOptions(1))]), level))
    await settle(5)
    conn.data_received(encode(Disconnect(0), level))
    conn.connection_lost(None)
    await settle(5)


def node(storage: Storage) -> tuple[Broker, Listeners, set[MQTTConnection]]:
    broker = Broker(CONFIG, SessionStore(storage), MemoryMetadata())
    connections: set[MQTTConnection] = set()
    listeners = Listeners(CONFIG, broker, storage, Authenticator(True, {}), connections,
                          ListenerContexts(tls_settings_of(CONFIG)))
    return broker, listeners, connections


@pytest.mark.parametrize("level", [4, 5], ids=["3.1.1", "5"])
async def test_a_clean_client_that_left_is_in_no_map_of_the_node(storage: Storage, level: int) -> None:
    broker, listeners, connections = node(storage)
    for i in range(20):
        await come_and_go(listeners.open_mqtt("tcp", "default"), f"c{i}", level)
    assert broker.sessions == {}
    assert broker.enforcer.usernames == {}
    assert broker.wills.pending == {}
    assert connections == set()
    assert len(broker.router) == 0, "the subscriptions of the clean sessions left the routing trie"


async def test_the_heap_does_not_grow_with_the_clients_that_came_and_went(storage: Storage, no_log_lines: None) -> None:
    _broker, listeners, _connections = node(storage)
    for i in range(WARMUP):
        await come_and_go(listeners.open_mqtt("tcp", "default"), f"w{i}", 4)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(CLIENTS):
            await come_and_go(listeners.open_mqtt("tcp", "default"), f"client-{i:08d}", 4)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < CLIENTS * BYTES_PER_CLIENT, f"{grown / CLIENTS:.0f} bytes kept per client that came and went"
