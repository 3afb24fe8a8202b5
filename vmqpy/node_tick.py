"""The node's periodic tick: every `TICK_INTERVAL` seconds the broker's own tick (expiries, resends, pacing), the
heap trim after a burst of closed connections (vmqpy.heap_trim) and the watch on the event loop's own lateness
(vmqpy.stall_watch: a late tick is logged as `event loop stalled` and counted as `broker.loop_stalls`), with the
garbage collector's passes timed alongside (vmqpy.gc_watch: a long pass is logged as `garbage collection paused
the node`, and what a slow full pass found alive is frozen at the next tick; the context gives the watch, whose
totals the node's metrics report as `process.gc_*`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from vmqpy import heap_trim
from vmqpy.gc_watch import GcWatch
from vmqpy.stall_watch import StallSampler, StallWatch

if TYPE_CHECKING:
    from vmqpy.broker.core.broker import Broker

log = structlog.get_logger("vmqpy.node")

TICK_INTERVAL = 0.1


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
async def ticking(broker: Broker, interval: float = TICK_INTERVAL) -> AsyncIterator[GcWatch]:
    """Run the tick while the context is open; the context's value is the collector's watch."""
    burst = heap_trim.BurstTrim()
    stalls = StallWatch(interval)
    sampler = StallSampler(interval)
    collector = GcWatch()
    loop = asyncio.get_running_loop()

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                late = stalls.tick(loop.time())
                where = sampler.beat()
                pauses = collector.take()
                for pause in pauses:
                    log.warning("garbage collection paused the node", generation=pause.generation,
                                seconds=round(pause.seconds, 3), collected=pause.collected)
                if late is not None:
                    broker.metrics["loop_stalls"] += 1
                    log.warning("event loop stalled", late_by=round(late, 3), stalls=stalls.stalls,
                                collector=round(sum(p.seconds for p in pauses), 3), where=where)
                if collector.freeze_if_due():
                    log.debug("collector's survivors frozen", freezes=collector.freezes)
                broker.tick(time.time())
                burst.tick(broker.metrics["socket_close"])
            except Exception:
                log.exception("tick failed")

    collector.install()
    sampler.start()
    try:
        async with background(tick()):
            yield collector
    finally:
        sampler.stop()
        collector.uninstall()
