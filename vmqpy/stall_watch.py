"""Notice when the node's event loop stalls: one turn that kept every other timer and socket waiting.

A node is one event loop. A turn that runs long (a large synchronous job, the collector walking a big heap, the
process not scheduled by the system) delays everything at once: heartbeats to the other nodes (a peer declares
the node silent after `cluster.detect_timeout`), PUBACKs, keep-alives. Such a stall is invisible from outside
except through its effects, so the node watches its own periodic tick: `StallWatch.tick(now)`, called at each
tick with the loop's clock, returns how late that tick ran when it was late by more than `warn_after` seconds
(the node logs a warning and counts it: `broker.loop_stalls`, the Prometheus counter `vmqpy_loop_stalls`).
VerneMQ's operators know the same signal as the Erlang VM's `long_schedule` monitor.
"""

from __future__ import annotations

STALL_WARN_AFTER = 0.25  # seconds a tick may run late before it counts as a stall (a quarter of detect_timeout)


class StallWatch:
    """Feeds on the times of a periodic tick (`interval` seconds apart when the loop is free)."""

    def __init__(self, interval: float, warn_after: float = STALL_WARN_AFTER) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        if not warn_after > 0:
            raise ValueError(f"warn_after must be positive, not {warn_after!r}")
        self.interval = interval
        self.warn_after = warn_after
        self._last: float | None = None
        self.stalls = 0
        self.longest = 0.0

    def tick(self, now: float) -> float | None:
        """How late this tick ran (seconds past `interval` since the previous one), when that is more than
        `warn_after`; otherwise None. The first tick only starts the watch."""
        last, self._last = self._last, now
        if last is None:
            return None
        late = now - last - self.interval
        if late <= self.warn_after:
            return None
        self.stalls += 1
        self.longest = max(self.longest, late)
        return late
