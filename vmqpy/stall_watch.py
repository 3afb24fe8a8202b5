"""Notice when the node's event loop stalls: one turn that kept every other timer and socket waiting.

A node is one event loop. A turn that runs long (a large synchronous job, the collector walking a big heap, the
process not scheduled by the system) delays everything at once: heartbeats to the other nodes (a peer declares
the node silent after `cluster.detect_timeout`), PUBACKs, keep-alives. Such a stall is invisible from outside
except through its effects, so the node watches its own periodic tick: `StallWatch.tick(now)`, called at each
tick with the loop's clock, returns how late that tick ran when it was late by more than `warn_after` seconds
(the node logs a warning and counts it: `broker.loop_stalls`, the Prometheus counter `vmqpy_loop_stalls`).
VerneMQ's operators know the same signal as the Erlang VM's `long_schedule` monitor. `StallSampler` says where
the loop was: a watchdog thread takes the loop thread's stack while the tick is late, and the warning carries it
(`where`).
"""

from __future__ import annotations

import sys
import threading
import time
from types import FrameType

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


class StallSampler:
    """Where the loop was when it stalled: a watchdog thread that, once the loop's tick is late by more than
    `warn_after`, takes the loop thread's stack (innermost frames first) once per stall; the tick collects it
    with `beat()` and the node logs it with the stall (`where`). It sleeps until the loop's tick would be late
    (its last beat + `interval` + `warn_after`), at least `period` seconds: three or four wake-ups a second while
    the loop ticks, every `period` while it is stalled; taking a stack costs it about a millisecond, and only
    while the loop is stalled. (Waking every `period` instead cost an idle node 8-14 ms of CPU a second on the
    project's machine, more than its ten ticks: docs/performance.md, "An idle node".)"""

    def __init__(self, interval: float, warn_after: float = STALL_WARN_AFTER, period: float = 0.05,
                 depth: int = 12) -> None:
        self.interval = interval
        self.warn_after = warn_after
        self.period = period
        self.depth = depth
        self._loop_thread = threading.get_ident()  # made on the loop's thread
        self._beat = time.monotonic()
        self._where: str | None = None
        self._stopped = threading.Event()
        self.wakeups = 0
        self._thread = threading.Thread(target=self._watch, name="vmqpy-stall-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(1.0)

    def beat(self) -> str | None:
        """The loop ran its tick: the stack taken during the stall before it (None: none taken)."""
        self._beat = time.monotonic()
        where, self._where = self._where, None
        return where

    @property
    def taken(self) -> bool:
        """Whether a stack was taken that the next `beat()` returns."""
        return self._where is not None

    def _watch(self) -> None:
        late_after = self.interval + self.warn_after
        while not self._stopped.wait(max(self.period, self._beat + late_after - time.monotonic())):
            self.wakeups += 1
            if self._where is None and time.monotonic() - self._beat > late_after:
                self._where = self.describe()

    def describe(self) -> str:
        """The loop thread's stack, then each other thread's innermost frames by name: when the loop thread is in
        native code (waiting for the GIL, in the event loop's C code) the other threads say who holds it."""
        frames = sys._current_frames()
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        others = [f"[{names.get(ident, ident)}] {describe_stack(frame, 3)}" for ident, frame in frames.items()
                  if ident not in (self._loop_thread, threading.get_ident())]
        return " || ".join([describe_stack(frames.get(self._loop_thread), self.depth), *others])


def describe_stack(frame: FrameType | None, depth: int) -> str:
    """`depth` frames of `frame`'s stack, innermost first: `module.function:line < ...`."""
    parts: list[str] = []
    while frame is not None and len(parts) < depth:
        code = frame.f_code
        module = frame.f_globals.get("__name__", "?")
        parts.append(f"{module}.{code.co_qualname}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(parts)
