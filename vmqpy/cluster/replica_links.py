"""The metadata store's `Transport` over the node links: replica ids (`name#incarnation`) to node names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol


class Links(Protocol):
    def send(self, peer: str, data: bytes) -> None: ...

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None: ...


class ReplicaLinks:
    """Sends a replica's frames to the node of that replica; names the sender of a frame by its replica id."""

    def __init__(self, links: Links, incarnations: Mapping[str, int]) -> None:
        self._links = links
        self._incarnations = incarnations  # node name -> incarnation, kept current by the cluster service

    def send(self, peer: str, data: bytes) -> None:
        self._links.send(peer.partition("#")[0], data)

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None:
        def receive(node: str, data: bytes) -> None:
            incarnation = self._incarnations.get(node)
            receiver(node if incarnation is None else f"{node}#{incarnation}", data)

        self._links.set_receiver(receive)
