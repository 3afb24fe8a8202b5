"""Time the cyclic garbage collector: how often each generation is collected, how long that takes, and which
passes were long enough to stall the node.

CPython's collector runs inside whatever allocation crosses its threshold, holding the interpreter for the whole
pass: a pass over the oldest generation walks every container object the node keeps that is not frozen
(`gc.freeze`, done after start-up loads: vmqpy.bulk_load, vmqpy.node). On a node that grows a large heap while it
runs (a million metadata keys replicated to it, say), such a pass takes a good part of a second and holds every
heartbeat, PUBACK and keep-alive meanwhile; the node's `event loop stalled` warning (vmqpy.stall_watch) then says
that the loop was late, and this watch says whether the collector was the reason.

`GcWatch.callback` is installed in `gc.callbacks` (`install`/`uninstall`): CPython calls it at the start and the
end of every pass with the generation. It only adds numbers and, for a pass of at least `warn_after` seconds,
keeps a `Pause` (the last `KEEP` of them) for the node's tick to log; nothing is logged from inside the
collector.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vmqpy.stall_watch import STALL_WARN_AFTER

__all__ = ["GENERATIONS", "KEEP", "GcWatch", "Pause"]

GENERATIONS = 3
#: Long passes kept until the tick takes them (older ones are dropped, still counted in the totals).
KEEP = 64


@dataclass(frozen=True, slots=True)
class Pause:
    """One collector pass that took at least `warn_after` seconds."""

    generation: int
    seconds: float
    collected: int


class GcWatch:
    """Totals per generation (`collections`, `seconds`, `longest`) and the long passes not yet taken."""

    __slots__ = ("_clock", "_pending", "_started", "collections", "longest", "seconds", "warn_after")

    def __init__(self, warn_after: float = STALL_WARN_AFTER, clock: Callable[[], float] = time.perf_counter) -> None:
        if not warn_after > 0:
            raise ValueError(f"warn_after must be positive, not {warn_after!r}")
        self.warn_after = warn_after
        self._clock = clock
        self._started: float | None = None
        self._pending: deque[Pause] = deque(maxlen=KEEP)
        self.collections = [0] * GENERATIONS
        self.seconds = [0.0] * GENERATIONS
        self.longest = 0.0

    def callback(self, phase: str, info: Mapping[str, int]) -> None:
        """What `gc.callbacks` calls: `phase` "start" or "stop", `info` with "generation" and "collected"."""
        if phase == "start":
            self._started = self._clock()
            return
        started, self._started = self._started, None
        generation = info.get("generation", -1)
        if started is None or not 0 <= generation < GENERATIONS:
            return  # a stop without its start (installed mid-pass) or a generation CPython does not have
        took = max(0.0, self._clock() - started)
        self.collections[generation] += 1
        self.seconds[generation] += took
        if took > self.longest:
            self.longest = took
        if took >= self.warn_after:
            self._pending.append(Pause(generation, took, info.get("collected", 0)))

    def take(self) -> list[Pause]:
        """The long passes since the last call, oldest first."""
        pauses = list(self._pending)
        self._pending.clear()
        return pauses

    def counters(self) -> dict[str, int | float]:
        """The node's metric keys (`gc_collections_genN`, `gc_seconds_genN`), as totals."""
        out: dict[str, int | float] = {}
        for generation in range(GENERATIONS):
            out[f"gc_collections_gen{generation}"] = self.collections[generation]
            out[f"gc_seconds_gen{generation}"] = self.seconds[generation]
        return out

    def install(self) -> None:
        if self.callback not in gc.callbacks:
            gc.callbacks.append(self.callback)

    def uninstall(self) -> None:
        while self.callback in gc.callbacks:
            gc.callbacks.remove(self.callback)
