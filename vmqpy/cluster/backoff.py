"""When a dialer tries a peer again: exponential back-off with jitter, and which failures are worth a log line.

Pure: the attempt number and a random source go in, a delay comes out (docs/cluster-links.md: from
`reconnect_min` doubling up to `reconnect_max`, each step jittered to 50-100 %).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = ["dial_delay", "failure_logged"]

_MAX_DOUBLINGS: Final = 30  # 2**30 steps past the shortest delay is past any sensible longest one


def dial_delay(attempts: int, shortest: float, longest: float, random: Callable[[], float]) -> float:
    """Seconds to wait before the next dial of a peer, after `attempts` dials since its last established link.

    0 before the first dial (and `random` is not drawn from); then `shortest`, doubling with every attempt up
    to `longest`, times a factor in [0.5, 1) from `random()` (uniform in [0, 1)).
    """
    if attempts == 0:
        return 0.0
    step: float = min(longest, shortest * 2 ** min(attempts - 1, _MAX_DOUBLINGS))
    return step * (0.5 + 0.5 * random())


def failure_logged(attempt: int) -> bool:
    """Whether a failed dial is logged: attempts 1, 2, 4, 8, ... (a peer that stays down does not flood the log)."""
    return attempt & (attempt - 1) == 0
