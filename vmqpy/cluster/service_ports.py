"""What the cluster service (service.py) and node.py need of the node links: the port that
vmqpy.cluster.tcp.ClusterNetwork implements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from vmqpy.cluster.forward_driver import ForwardLinks
from vmqpy.cluster.framing import FrameType

__all__ = ["Network"]


class Network(ForwardLinks, Protocol):
    """What the service needs of the node links (vmqpy.cluster.tcp.ClusterNetwork), its forwarding included."""

    def add_peer(self, name: str, host: str, port: int, intent: str | None = None) -> None: ...

    def remove_peer(self, name: str) -> None: ...

    def set_intent(self, intent: str | None) -> None: ...

    def set_incarnation(self, incarnation: int) -> None: ...

    def set_admission(self, admission: Callable[[str, int, str | None], str | None] | None) -> None: ...

    def on_refused(self, callback: Callable[[str, str], None]) -> None: ...

    def reachable(self) -> set[str]: ...

    def incarnation_of(self, name: str) -> int | None: ...

    def stats(self) -> dict[str, int]: ...

    def on_message(self, callback: Callable[[str, FrameType, Any], None]) -> None:
        """The one callback of every FORWARD, REPLICA, CONTROL and REACHABILITY frame (node.py registers its
        control table; a later call replaces it)."""

    def on_reachability(self, callback: Callable[[str, bool], None]) -> None: ...
