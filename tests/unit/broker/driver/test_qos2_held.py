"""QoS 2 exactly once across the loss of a persistent session's node (docs/replication.md, "The owner's loss,
simulated"): what the connection writes to a QoS 2 client of a persistent session waits until the state it
follows from is durable (on disk, and on the queue replicas: the composite barrier). A failover before that
would otherwise deliver the message twice, or take the client's next publish for a resend.

- the QoS 2 PUBLISH waits for the journal write of its packet id (`MQTTConnection.write_publish`);
- the PUBREL answering a PUBREC, the PUBCOMP answering a PUBREL and the PUBREC of a resent PUBLISH are
  acknowledgements that wait for the barrier (`protocol.py`), for persistent sessions only.
The seeded simulation tests/unit/replicas/test_simulation_owner_loss.py shows why each of the four is needed."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

import pytest

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
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import (
    Connect,
    Packet,
    Properties,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    SubOptions,
    Subscribe,
    Subscription,
)
from vmqpy.sessions.message import Message
from vmqpy.storage import Storage


class HeldBarriers:
    """The node's storage, whose barriers (what acknowledgements wait for) the test lets pass."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.futures: list[Future[None]] = []

    def barrier(self) -> Future[None]:
        self.futures.append(Future())
        return self.futures[-1]

    def release(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def packets(transport: FakeTransport) -> list[Packet]:
    decoder = Decoder(server=False, protocol_level=5)
    decoder.receive_data(bytes(transport.written))
    out = []
    while (packet := decoder.next_packet()) is not NEED_DATA:
        out.append(packet)
    return out  # type: ignore[return-value]


async def connected(storage: Storage, clean: bool) -> tuple[Broker, MQTTConnection, FakeTransport, HeldBarriers]:
    broker = Broker(CONFIG, SessionStore(storage), MemoryMetadata())
    held = HeldBarriers(storage)
    listeners = Listeners(CONFIG, broker, held, Authenticator(True, {}), set(),  # type: ignore[arg-type]
                          ListenerContexts(tls_settings_of(CONFIG)))
    conn = listeners.open_mqtt("tcp", "default")
    transport = FakeTransport()
    conn.connection_made(transport)
    props = Properties()
    props.session_expiry_interval = 0 if clean else 3600
    conn.data_received(encode(Connect("c1", protocol_level=5, clean_start=clean, properties=props), 5))
    await asyncio.sleep(0.01)
    conn.data_received(encode(Subscribe(1, [Subscription("t/#", SubOptions(2))]), 5))
    for _ in range(3):
        await settle(5)
        held.release()
    await settle(5)
    transport.written.clear()
    return broker, conn, transport, held


@pytest.mark.parametrize("clean", [False, True], ids=["persistent", "clean"])
async def test_what_a_qos2_exchange_writes_waits_for_the_barrier_in_a_persistent_session(
        storage: Storage, clean: bool) -> None:
    broker, conn, transport, held = await connected(storage, clean)
    waits = not clean

    async def written(what: str) -> list[Packet]:
        """What the connection writes: nothing while it waits for the barrier (persistent), then all of it."""
        await settle(5)
        if waits:
            assert packets(transport) == [], f"{what} written before the barrier passed"
            held.release()
            await settle(5)
        out = packets(transport)
        transport.written.clear()
        return out

    broker.publish(Message("t/x", b"payload", 2), 100.0)  # to the client: PUBLISH
    [publish] = await written("the QoS 2 PUBLISH")
    assert isinstance(publish, Publish) and publish.qos == 2
    conn.data_received(encode(Pubrec(publish.packet_id or 0), 5))  # the client: PUBREC -> PUBREL
    assert [type(p) for p in await written("PUBREL")] == [Pubrel]

    conn.data_received(encode(Publish("elsewhere/in", b"from the client", qos=2, packet_id=9), 5))
    assert [type(p) for p in await written("PUBREC")] == [Pubrec]
    conn.data_received(encode(Publish("elsewhere/in", b"from the client", qos=2, packet_id=9, dup=True), 5))  # a resend
    assert [type(p) for p in await written("the PUBREC of a resend")] == [Pubrec]
    conn.data_received(encode(Pubrel(9), 5))  # the client: PUBREL -> PUBCOMP
    assert [type(p) for p in await written("PUBCOMP")] == [Pubcomp]
