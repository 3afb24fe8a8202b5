"""A session handed over to this node (its node leaves, `cluster leave -k`) is acknowledged to the old owner only
once the other reachable members route its subscriptions here (subscription.acknowledge = cluster): the old owner
lets the session go at the last acknowledgement, and a node that leaves is removed then, so nothing may still route
to it. One real RegistrationService and Broker (node b) with a real metadata store whose other member c is played
by the test: it answers b's pushes of the subscription records with a PushAck, or stays silent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.cluster.registration_script import ScriptedLinks
from tests.unit.loop_turns import settle
from tests.unit.metadata.services import wait_for
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.cluster.registration import RegistrationService
from vmqpy.config import Config
from vmqpy.metadata import messages
from vmqpy.metadata.service import MetadataService
from vmqpy.mqtt.packets import SubOptions
from vmqpy.mqtt.topics import parse_shared
from vmqpy.sessions import records
from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.parts import SubEntry
from vmqpy.storage import Storage


class CapturedPushes:
    """b's metadata transport: what b sends to c is kept."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, Any]] = []
        self.receiver: Any = None

    def send(self, peer: str, data: bytes) -> None:
        self.frames.append((peer, messages.decode(data)))

    def set_receiver(self, receiver: Any) -> None:
        self.receiver = receiver

    def pushes_to(self, peer: str) -> list[int]:
        return [m.dot[1] for p, m in self.frames if p == peer and isinstance(m, messages.Push)
                and m.prefix == records.SUBSCRIPTION]


def image_with(client_id: str, *filters: str) -> SessionImage:
    image = SessionImage(client_id, True, 5, 600.0, source="a")
    for topic_filter in filters:
        group, match_filter = parse_shared(topic_filter)
        image.subscriptions.append(SubEntry(topic_filter, match_filter, SubOptions(qos=1), None, group))
    return image


@pytest.mark.parametrize("mode", ["cluster", "local"])
async def test_the_handover_is_acknowledged_once_the_members_route_here(tmp_path: Path, mode: str) -> None:
    storage = Storage(tmp_path / "b.db")
    storage.open()
    transport = CapturedPushes()
    metadata = MetadataService("b", storage, transport=transport, acknowledged=[records.SUBSCRIPTION],
                               ack_timeout=30.0)
    metadata.start()
    metadata.set_peers(["a", "c"])
    metadata.set_reachable(["a", "c"])
    config = Config(nodename="b@127.0.0.1", cluster_listener=("127.0.0.1", 0), subscription_acknowledge=mode)
    broker = Broker(config, SessionStore(storage), metadata)
    links = ScriptedLinks()
    service = RegistrationService(links, broker.migration, None, allow_without_leader=lambda: False,
                                  majority_serves=lambda: False)
    try:
        client_id = "leaving-session"
        image = image_with(client_id, "x/#", "$share/g/y")
        service.on_control("a", {"op": "mig_begin", "client_id": client_id, "migration": 7, "image": image.pack(),
                                 "stamp": None})
        service.on_control("a", {"op": "mig_batch", "client_id": client_id, "migration": 7, "messages": []})
        await wait_for(lambda: len(transport.pushes_to("c")) == 2 and len(transport.pushes_to("a")) == 2, 10)
        # (the pushes leave after b's storage barrier, on its storage thread: a busy machine takes a while)
        if mode == "local":
            assert links.take("mig_ack")["upto"] == 0
            return
        assert not [body for _node, body in links.sent if body["op"] == "mig_ack"], "acknowledged before c routes"
        metadata._on_frame("a", messages.encode(messages.PushAck(tuple(transport.pushes_to("a")))))
        metadata._on_frame("c", messages.encode(messages.PushAck(tuple(transport.pushes_to("c")[:1]))))
        await settle(5)
        assert not [body for _node, body in links.sent if body["op"] == "mig_ack"], "c applied one of two routes"
        metadata._on_frame("c", messages.encode(messages.PushAck(tuple(transport.pushes_to("c")[1:]))))
        await settle(5)
        assert links.take("mig_ack")["upto"] == 0
        assert broker.metrics["subscription_acks_waited"] == 1 and broker.metrics["subscription_acks_late"] == 0
    finally:
        await service.stop()
        metadata.stop()
        storage.close()
