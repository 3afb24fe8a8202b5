"""The node's periodic tick: every `TICK_INTERVAL` seconds the broker's own tick (expiries, resends, pacing), the
heap trim after a burst of closed connections (vmqpy.heap_trim) and the watch on the event loop's own lateness
(vmqpy.stall_watch: a late tick is logged as `event loop stalled` and counted as `broker.loop_stalls`).

The warning comes after the stall, when the loop runs again, and cannot say what held it. So the tick also keeps
a watchdog armed (the standard library's `faulthandler`, a thread of its own): if no tick re-arms it for
`STALL_DUMP_AFTER` seconds, it writes the stack of every thread of the node to stderr (the node's log) while the
stall is still going on, which names the function that holds the loop (docs/operations.md)."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import itertools
import time
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from vmqpy import heap_trim
from vmqpy.stall_watch import StallWatch

if TYPE_CHECKING:
    from vmqpy.broker.broker import Broker

log = structlog.get_logger("vmqpy.node")

TICK_INTERVAL = 0.1
STALL_DUMP_AFTER = 1.0  # seconds without a tick after which every thread's stack goes to stderr
_REARM_EVERY = 5  # ticks between two re-arms of the watchdog (each costs about 50 us: it restarts its thread)


@contextlib.asynccontextmanager
async def background(*jobs: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run `jobs` as tasks while the context is open; cancel them, and wait for them to end, when it closes."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(job) for job in jobs]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def ticking(broker: Broker, interval: float = TICK_INTERVAL,
                  dump_after: float = STALL_DUMP_AFTER) -> AsyncIterator[None]:
    """Run the tick (and its watchdog) while the context is open."""
    burst = heap_trim.BurstTrim()
    stalls = StallWatch(interval)
    loop = asyncio.get_running_loop()

    async def tick() -> None:
        for n in itertools.count():
            if n % _REARM_EVERY == 0:
                faulthandler.dump_traceback_later(dump_after)
            await asyncio.sleep(interval)
            try:
                late = stalls.tick(loop.time())
                if late is not None:
                    broker.metrics["loop_stalls"] += 1
                    log.warning("event loop stalled", late_by=round(late, 3), stalls=stalls.stalls)
                broker.tick(time.time())
                burst.tick(broker.metrics["socket_close"])
            except Exception:
                log.exception("tick failed")

    try:
        async with background(tick()):
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()
