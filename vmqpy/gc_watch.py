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

It also keeps those passes short (`THRESHOLDS`, `freeze_if_due`). Measured on three nodes taking a million
metadata keys (docs/performance.md, "Metadata keys"): with the node's earlier thresholds (50,000, 20, 10) every
pass over generation 1 walked the survivors of 20 young collections, about a second each while the heap grew, and
the passes over generation 2 took 8.0 to 11.5 s: the node's peers declared it silent every time. Now generation 1
holds the survivors of at most 4 young collections, and a pass over generation 2 that took `freeze_after` seconds
or more (its objects have lived through every collection: the node's long-lived state) makes the next tick move
everything alive out of the collector's sight (`gc.freeze`, as after a start-up load) and start the count of old
objects again from zero, so that the next full pass walks only what was built since. The price: a reference cycle
among frozen objects that later turns into garbage is never collected. What the node keeps for long makes no
such cycles (a closed connection is freed by reference counting: tests/unit/broker/driver/test_connection_garbage.py;
the stored records are tuples, lists, dicts and messages). The freezes are counted (`vmqpy_gc_freezes`); the size
of the frozen set is not reported, because `gc.get_freeze_count()` walks the whole set on every call.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vmqpy.stall_watch import STALL_WARN_AFTER

__all__ = ["FREEZE_AFTER", "GENERATIONS", "KEEP", "THRESHOLDS", "GcWatch", "Pause"]

GENERATIONS = 3
#: Long passes kept until the tick takes them (older ones are dropped, still counted in the totals).
KEEP = 64
#: `gc.set_threshold`: a young collection after 50,000 net allocations (every message in flight is a few
#: objects: with CPython's 700, collections took about 9 % of a busy node's CPU); CPython collects generation 1
#: once more than 3 young collections ran since its last pass (it walks the survivors of at most 4), and
#: generation 2 once more than 1 pass over generation 1 ran (and its old objects grew by a quarter since the last
#: full pass; after a freeze there are none): a full pass walks at most what survived 8 young collections plus the
#: old objects not frozen yet.
THRESHOLDS = (50_000, 3, 1)
#: A pass over generation 2 at least this long makes the next tick freeze what is alive.
FREEZE_AFTER = 0.02


@dataclass(frozen=True, slots=True)
class Pause:
    """One collector pass that took at least `warn_after` seconds."""

    generation: int
    seconds: float
    collected: int


class GcWatch:
    """Totals per generation (`collections`, `seconds`, `longest`) and the long passes not yet taken."""

    __slots__ = ("_clock", "_pending", "_started", "collections", "freeze_after", "freeze_due", "freezes",
                 "longest", "seconds", "warn_after")

    def __init__(self, warn_after: float = STALL_WARN_AFTER, clock: Callable[[], float] = time.perf_counter,
                 freeze_after: float = FREEZE_AFTER) -> None:
        if not warn_after > 0 or not freeze_after > 0:
            raise ValueError(f"warn_after and freeze_after must be positive, not {warn_after!r}, {freeze_after!r}")
        self.warn_after = warn_after
        self.freeze_after = freeze_after
        self.freeze_due = False
        self.freezes = 0
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
        if generation == GENERATIONS - 1 and took >= self.freeze_after:
            self.freeze_due = True
        if took >= self.warn_after:
            self._pending.append(Pause(generation, took, info.get("collected", 0)))

    def take(self) -> list[Pause]:
        """The long passes since the last call, oldest first."""
        pauses = list(self._pending)
        self._pending.clear()
        return pauses

    def freeze_if_due(self) -> bool:
        """After a slow full pass (called from the node's tick, never from inside the collector): freeze what is
        alive, then collect generation 2 (empty now: nothing to walk) so that CPython's count of old objects
        starts from zero. Only in a process whose collector the node tuned (`THRESHOLDS`, set by vmqpy.node.serve):
        a test process that runs nodes in process keeps its own collector as it is. Returns whether it froze."""
        if not self.freeze_due:
            return False
        self.freeze_due = False
        if gc.get_threshold() != THRESHOLDS:
            return False
        gc.freeze()
        gc.collect(GENERATIONS - 1)
        self.freezes += 1
        return True

    def counters(self) -> dict[str, int | float]:
        """The node's metric keys (`gc_collections_genN`, `gc_seconds_genN`, `gc_freezes`). Not the size of the
        frozen set: `gc.get_freeze_count()` walks all of it (millions of objects on a large node: about a second
        per call, which every $SYS round and scrape would pay)."""
        out: dict[str, int | float] = {}
        for generation in range(GENERATIONS):
            out[f"gc_collections_gen{generation}"] = self.collections[generation]
            out[f"gc_seconds_gen{generation}"] = self.seconds[generation]
        out["gc_freezes"] = self.freezes
        return out

    def install(self) -> None:
        if self.callback not in gc.callbacks:
            gc.callbacks.append(self.callback)

    def uninstall(self) -> None:
        while self.callback in gc.callbacks:
            gc.callbacks.remove(self.callback)
