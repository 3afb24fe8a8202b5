"""MQTT connections of one node driven over a fake transport (tests.unit.transports.FakeTransport), for the
driver's unit tests: `connection` (client c1 connected straight to an MQTTConnection), `node` (a Broker and its
listeners over a metadata store that counts its calls), `received` (what the driver wrote, decoded)."""

from __future__ import annotations

import asyncio
from typing import Any

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
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connect, Packet
from vmqpy.sessions import records
from vmqpy.storage import Storage

#: One TCP listener (tcp.default on 127.0.0.1:1883), anonymous clients allowed.
CONFIG = Config(tcp_listeners=(("default", "127.0.0.1", 1883),), allow_anonymous=True)


class CountingMetadata(MemoryMetadata):
    """The in-memory store, counting the calls a connect makes."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.puts = 0

    def get(self, prefix: str, key: records.Key) -> Any | None:
        self.gets += 1
        return super().get(prefix, key)

    def put(self, prefix: str, key: records.Key, value: Any, confirm: Any = None) -> None:
        self.puts += 1
        super().put(prefix, key, value)


def node(storage: Storage, config: Config = CONFIG) -> tuple[Broker, Listeners, CountingMetadata]:
    """A Broker over `storage` and a CountingMetadata, and its listeners (anonymous clients allowed)."""
    metadata = CountingMetadata()
    broker = Broker(config, SessionStore(storage), metadata)
    listeners = Listeners(config, broker, storage, Authenticator(True, {}), set(),
                          ListenerContexts(tls_settings_of(config)))
    return broker, listeners, metadata


def connection(storage: Storage, config: Config, level: int = 5) -> tuple[MQTTConnection, FakeTransport, Broker]:
    """Client c1 (protocol `level`) connected to an MQTTConnection of a Broker over an in-memory metadata store."""
    broker = Broker(config, SessionStore(storage), MemoryMetadata())
    conn = MQTTConnection(broker, config, None, Authenticator(True, {}), "default")
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.data_received(encode(Connect("c1", protocol_level=level), level))
    return conn, transport, broker


async def received(transport: FakeTransport, level: int) -> list[Packet]:
    """Every packet the driver wrote so far (after the event loop flushed them)."""
    await asyncio.sleep(0)
    decoder = Decoder(server=False, protocol_level=level)
    decoder.receive_data(bytes(transport.written))
    packets = []
    while (packet := decoder.next_packet()) is not NEED_DATA:
        packets.append(packet)
    return packets  # type: ignore[return-value]
