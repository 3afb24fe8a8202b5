"""Real MetadataServices in one event loop, on a loopback network whose links can be cut: the shared set-up of
the service tests (test_service, test_service_confirm, test_hostile_input, cluster/test_handover_routes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from vmqpy.metadata.replication_log import ReplicationLog
from vmqpy.metadata.service import MetadataService
from vmqpy.storage import Storage


class LoopbackNetwork:
    """Frames between services in one event loop, delivered on a later loop pass; links can be cut."""

    def __init__(self) -> None:
        self.receivers: dict[str, Callable[[str, bytes], None]] = {}
        self.cut: set[frozenset[str]] = set()
        self.frames = 0

    def transport(self, node: str) -> LoopbackTransport:
        return LoopbackTransport(self, node)


class LoopbackTransport:
    def __init__(self, network: LoopbackNetwork, node: str) -> None:
        self.network = network
        self.node = node

    def send(self, peer: str, data: bytes) -> None:
        if frozenset((self.node, peer)) in self.network.cut:
            return
        receiver = self.network.receivers.get(peer)
        if receiver is not None:
            self.network.frames += 1
            asyncio.get_running_loop().call_soon(receiver, self.node, data)

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None:
        self.network.receivers[self.node] = receiver


def start(tmp: Path, node: str, network: LoopbackNetwork, peers: list[str]) -> MetadataService:
    storage = Storage(tmp / node / "md.db")
    storage.open()
    log = ReplicationLog(tmp / node / "replication.log", node)
    log.open()
    service = MetadataService(node, storage, replication_log=log, transport=network.transport(node),
                              sync_interval=0.05, seed=1)
    service.start()
    service.set_peers(peers)
    service.set_reachable(peers)
    return service


def stop(service: MetadataService) -> None:
    service.stop()
    assert service.replication_log is not None
    service.replication_log.close()
    service.storage.close()


async def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)
