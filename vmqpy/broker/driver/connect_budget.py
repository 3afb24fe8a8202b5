"""The node-wide byte budget of the connections still before their CONNECT (`mqtt.connect_budget`).

Every listener kind holds bytes for a socket until its client has completed a CONNECT: a tcp or ssl socket's
partial CONNECT in its `ConnectPrelude` (vmqpy.broker.listeners.preludes), a WebSocket's upgrade request and frames read
before the CONNECT was accepted (`PreConnectMeter`, vmqpy.broker.listeners.websocket). Each socket is bounded on its own
(`mqtt.connect_max_size`); this budget bounds them all together, so that the number of sockets does not multiply
what strangers who never authenticated may make the node hold.

At the limit, the socket whose bytes would take the total past it is closed at once (its bytes are not
read into memory): the newest bytes lose, the sockets already holding their share keep it until their own
CONNECT completes or their `mqtt.connect_timeout` closes them. A well-behaved client's CONNECT arrives in one
read and is handed on without being held, so it needs no share of the budget. Each such closed socket is counted
in the broker's metric `connect_budget_exceeded` (`vmqpy_connect_refused_total{reason="budget"}`).

Sans-I/O: no clock, no sockets.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from vmqpy.config import Config

__all__ = ["BUDGET_EXCEEDED_METRIC", "CONNECT_BUDGET", "LARGEST_PACKET", "ConnectBudget", "connect_max_size"]

BUDGET_EXCEEDED_METRIC: Final = "connect_budget_exceeded"
CONNECT_BUDGET: Final = 16 * 1024 * 1024  # default of mqtt.connect_budget, bytes
LARGEST_PACKET: Final = 268_435_460  # a PUBLISH of the largest remaining length MQTT allows, with its fixed header


def connect_max_size(config: Config) -> int:
    """The largest CONNECT a client may send: mqtt.connect_max_size, or max_message_size when that is smaller.
    64 KiB by default: a CONNECT with a client id, user name, password and a will of a few KiB takes far less; a
    client whose will payload is larger needs the setting raised (every field at its 64 KiB maximum and user
    properties take about 460 KB)."""
    return min(config.connect_max_size, config.max_message_size or LARGEST_PACKET)


class ConnectBudget:
    """`limit` bytes shared by every connection of the node before its CONNECT; `in_use` are taken."""

    __slots__ = ("in_use", "limit", "metrics")

    def __init__(self, limit: int, metrics: Counter[str]) -> None:
        if limit < 1:
            raise ValueError("the pre-CONNECT byte budget must be positive")
        self.limit = limit
        self.in_use = 0
        self.metrics = metrics
        metrics[BUDGET_EXCEEDED_METRIC] += 0  # exists at 0 from the start

    def take(self, size: int) -> bool:
        """Reserve `size` more bytes: True when they fit (they are then in use until `give`), else False (the
        caller closes its socket and counts it in BUDGET_EXCEEDED_METRIC)."""
        if self.in_use + size > self.limit:
            return False
        self.in_use += size
        return True

    def give(self, size: int) -> None:
        """Return `size` bytes taken before (the socket's CONNECT completed, or the socket is gone)."""
        self.in_use = max(0, self.in_use - size)
