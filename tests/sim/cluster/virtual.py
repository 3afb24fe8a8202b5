"""Simulated time for the nodes' real code: an event loop whose clock is virtual, the node's clock reads patched
onto it, and a storage that commits on that loop instead of a writer thread.

`VirtualLoop` is asyncio's selector loop with two changes: `time()` is the simulation's monotonic clock, and its
selector never sleeps: when no callback is ready it moves the clock to the next timer. Nothing else runs
between two callbacks, so a history depends only on the seed (no real sockets: the self-pipe is the only file
descriptor, and it only carries wake-ups written on this thread).

`clock_patches(clock)` points the vmqpy modules' clock reads at the virtual clock for the duration of a
simulation: their `time` module, the clock functions they bound to names of their own, and the clocks the node
hands its metadata service. The wall clock can be stepped per node (`VirtualClock.step`): each node's metadata
service stamps its writes (hybrid logical clock) with its own wall clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import selectors
import sys
import time
import types
import zlib
from collections.abc import Iterator
from functools import partial
from typing import Any
from unittest import mock

from vmqpy.storage import _BARRIER, _SCHEMA, Storage

START_WALL = 1_800_000_000.0  # 2027-01-15: the wall clock of every simulation at its start


class Stalled(RuntimeError):
    """Nothing is ready and no timer is armed: the simulated cluster waits for something that never comes."""


class VirtualClock:
    """The simulation's clocks: one monotonic time, and per node a wall clock (the start's, plus its steps)."""

    def __init__(self) -> None:
        self.mono = 1_000.0
        self._wall_base = START_WALL - self.mono
        self.steps: dict[str, float] = {}  # node name -> seconds its wall clock was stepped by

    def monotonic(self) -> float:
        return self.mono

    def monotonic_ns(self) -> int:
        return int(self.mono * 1e9)

    def wall(self) -> float:
        return self.mono + self._wall_base

    def wall_of(self, node: str) -> float:
        return self.wall() + self.steps.get(node, 0.0)

    def step(self, node: str, seconds: float) -> None:
        """`node`'s wall clock jumps by `seconds` (back when negative); the monotonic clock does not move."""
        self.steps[node] = self.steps.get(node, 0.0) + seconds

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self.mono += seconds


class _VirtualSelector(selectors.DefaultSelector):
    """Reports what the real file descriptors (the loop's self-pipe) have, without waiting; else moves the clock
    by the timeout the loop asked to wait."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if events:
            return events
        if timeout is None:
            raise Stalled("the simulation has nothing to do and no timer armed")
        self.clock.advance(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a `VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(selector=_VirtualSelector(clock))
        self.clock = clock

    def time(self) -> float:
        return self.clock.mono


class _TimeModule(types.SimpleNamespace):
    """What the vmqpy modules see as `time`: the virtual clocks, the rest of the real module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


#: The real clocks, and what each becomes in a simulation (a `VirtualClock` method name).
_CLOCKS = {time.time: "wall", time.monotonic: "monotonic", time.monotonic_ns: "monotonic_ns",
           time.perf_counter: "monotonic"}


@contextlib.contextmanager
def clock_patches(clock: VirtualClock, seed: int = 0) -> Iterator[None]:
    """Every clock read of the node's code on `clock` while the block runs (see the module docstring), and the
    random choices of the metadata services (exchange partners, jitter) and of the `random` module seeded."""
    shim = _TimeModule(time=clock.wall, monotonic=clock.monotonic, monotonic_ns=clock.monotonic_ns,
                       perf_counter=clock.monotonic, time_ns=lambda: int(clock.wall() * 1e9))
    with contextlib.ExitStack() as stack:
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] in ("vmqpy", "admin") and getattr(module, "time", None) is time:
                stack.enter_context(mock.patch.object(module, "time", shim))
        # the clocks bound to a name of their own at import (`from time import monotonic_ns`, `clock =
        # time.monotonic`): the turn budget's perf_counter, the latency metrics, the TCP links' clock
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] not in ("vmqpy", "admin"):
                continue
            for attribute, value in list(vars(module).items()):
                if not attribute.startswith("__") and _is_clock(value):
                    stack.enter_context(mock.patch.object(module, attribute, getattr(clock, _CLOCKS[value])))
        # the metadata service's clocks are arguments with the real clocks as defaults: each node's own wall clock
        from vmqpy import node as node_module
        from vmqpy.metadata.service import MetadataService

        def metadata(node_id: str, *args: Any, **kwargs: Any) -> MetadataService:
            name = node_id.partition("#")[0]
            return MetadataService(node_id, *args, wall=partial(clock.wall_of, name), monotonic=clock.monotonic,
                                   seed=zlib.crc32(f"{seed}:{node_id}".encode()), **kwargs)

        stack.enter_context(mock.patch.object(node_module, "MetadataService", metadata))
        state = random.getstate()
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(state)


def _is_clock(value: object) -> bool:
    try:
        return value in _CLOCKS
    except TypeError:  # unhashable
        return False


class SimStorage(Storage):
    """`Storage` without its writer thread: writes are committed on the loop, `max_delay` after the first one
    queued or at the next `barrier()`, whichever comes first. `crash()` loses what was not committed yet."""

    _commit_timer: asyncio.TimerHandle | None = None
    crashed = False

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer = self._connect()
        self._incremental_vacuum_mode(writer)
        writer.execute(_SCHEMA)
        self._writer = writer
        self._reader = self._connect()
        self._state = "open"
        self._reject = None

    def _queued(self) -> None:
        if self._commit_timer is None and not self.crashed:
            self._commit_timer = asyncio.get_running_loop().call_later(self.max_delay, self.commit)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if self.crashed:
            return
        super().put(table, key, value)
        self._queued()

    def delete(self, table: str, key: bytes) -> None:
        if self.crashed:
            return
        super().delete(table, key)
        self._queued()

    def delete_prefix(self, table: str, prefix: bytes) -> None:
        if self.crashed:
            return
        super().delete_prefix(table, prefix)
        self._queued()

    def barrier(self) -> Any:
        if self.crashed:  # a dead process: what waits on it is dead too
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            done.set_result(None)
            return done
        fut = super().barrier()
        self.commit()
        return fut

    def commit(self) -> None:
        """Everything queued, in one transaction (the barriers queued with it resolved)."""
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        batch: list[tuple[Any, ...]] = []
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        if batch:
            self._process(batch, sum(1 for item in batch if item[0] < _BARRIER))

    def close(self) -> None:
        if self.crashed or self._state == "closed":
            return
        if self._state == "open":
            self.commit()
        self._shut()

    def crash(self) -> None:
        """The process dies: what is queued is lost, the files stay as they are; later calls do nothing."""
        self.crashed = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._shut()

    def _shut(self) -> None:
        if self._commit_timer is not None:
            self._commit_timer.cancel()
            self._commit_timer = None
        self._state = "closed"
        self._reject = "storage is closed"
        for conn in (self._writer, self._reader):
            if conn is not None:
                conn.close()
        self._writer = self._reader = None
