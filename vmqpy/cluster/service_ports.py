"""What the cluster service (service.py) needs of the node links, and its polling wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from vmqpy.cluster.forward_driver import ForwardLinks
from vmqpy.cluster.framing import FrameType

__all__ = ["Network"]


async def _poll(done: Callable[[], bool], timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
    """Wait until `done()` (True), checking every 20 ms, at most `timeout` seconds or until `give_up()`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        if loop.time() >= deadline or (give_up is not None and give_up()):
            return False
        await asyncio.sleep(0.02)
    return True


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

    def on_message(self, callback: Callable[[str, FrameType, Any], None]) -> None: ...

    def on_reachability(self, callback: Callable[[str, bool], None]) -> None: ...
