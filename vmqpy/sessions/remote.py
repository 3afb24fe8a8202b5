"""What other nodes answer for a session: `RemoteWait`, something they complete (the members applying the routes of
a session that moved here, a forward's acknowledgements), and `Redirect`, the node a CONNECT belongs on
(`persistent_session_placement = assigned`). The broker waits for the one and sends a client away with the other;
the cluster and the metadata store make them (vmqpy.cluster.placement, vmqpy.metadata.confirmations).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Redirect", "RemoteWait"]


class RemoteWait(Protocol):
    """Something other nodes complete: a forward's acknowledgements (vmqpy.broker.core.remote_ack.RemoteAck), the
    members applying some writes (vmqpy.metadata.confirmations.Confirmation). Done once, failed or not."""

    @property
    def error(self) -> BaseException | None: ...

    def done(self) -> bool: ...

    def add_done_callback(self, callback: Callable[[], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Redirect:
    """Send the client to `node`, whose advertised address for the client's listener kind is `reference`."""

    node: str
    reference: str
    why: str
