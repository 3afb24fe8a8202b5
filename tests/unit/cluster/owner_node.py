"""A node of the registration tests with a real Broker, MetadataService and SQLite storage, its links scripted
(registration_script.py), and alice's persistent session on it: shared by test_registration_owner.py and
test_registration_moving.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.unit.broker.fakes import TakenOverSink
from tests.unit.cluster.registration_script import ScriptedLinks
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.registration import RegistrationService
from vmqpy.config import Config
from vmqpy.metadata.service import MetadataService
from vmqpy.mqtt.packets import SubOptions, Subscription
from vmqpy.sessions.message import Message
from vmqpy.storage import Storage

__all__ = ["CLIENT_ID", "NOW", "alices_session", "frames", "handover_from_b", "node"]

CLIENT_ID = "alice-phone"
NOW = 1_795_600_000.0


@contextmanager
def node(tmp_path: Path, name: str, **config: Any) -> Iterator[tuple[Broker, RegistrationService, ScriptedLinks]]:
    storage = Storage(tmp_path / f"{name}.db")
    storage.open()
    metadata = MetadataService(name, storage)
    metadata.start()
    broker = Broker(Config(nodename=f"{name}@127.0.0.1", **config), SessionStore(storage), metadata)
    broker.nodes = lambda: ["a", "b"]
    links = ScriptedLinks()
    links.name = name
    service = RegistrationService(links, broker.migration, None, allow_without_leader=lambda: False,
                                  majority_serves=lambda: False)
    try:
        yield broker, service, links
    finally:
        metadata.stop()
        storage.close()


def alices_session(broker: Broker, online: bool) -> TakenOverSink:
    """alice's persistent session `alice-phone` on this node, subscribed to `secret/#`, with 3 messages queued
    (offline, or online with a connection that reads nothing)."""
    sink = TakenOverSink()
    session, _present = broker.open_session(CLIENT_ID, 5, False, None, sink, NOW, username="alice")
    broker.attach(session, sink, 10, 0, NOW)
    broker.subscribe(session, [Subscription("secret/#", SubOptions(1))], None)
    if online:
        sink.writable = False
    else:
        broker.close_session(session, sink, NOW + 1, None, 0)
    for i in range(3):
        broker.publish(Message(f"secret/{i}", b"for alice only", 1), NOW + 2)
    assert len(session.pending(0)) == 3
    return sink


def frames(links: ScriptedLinks, op: str) -> list[dict[str, Any]]:
    return [body for to, body in links.sent if body["op"] == op and to == "b"]


async def handover_from_b(service: RegistrationService, body: dict[str, Any], clean: bool = False) -> None:
    service.on_control("b", {"op": "handover", "client_id": CLIENT_ID, "migration": 7, "clean": clean, **body})
    for _ in range(20):  # the handover task sends its batches over a few loop turns
        await asyncio.sleep(0)
