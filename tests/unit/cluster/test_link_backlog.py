"""A node that falls behind its peer stays linked: the frames of one large read are handled a turn at a time
(vmqpy.cluster.connection.TURN_BUDGET), so its heartbeats and timers keep running while it works through them.

Seen on a three-node cluster taking 10,000 retained messages on one node: a replica that had fallen behind
handled one read of thousands of metadata frames for more than `cluster.detect_timeout`, sent no heartbeat
meanwhile, and its peers declared it silent and stopped serving ("the cluster is not ready"), dropping QoS 1
publishes without PUBACK (docs/performance.md, "Metadata keys").

The two nodes run on two event loops in two threads (a node per loop, as in production; one shared loop would
stall the judge together with the judged), both uvloop, the node's loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.tcp import ClusterNetwork

from .helpers import COOKIE, A, B

DETECT = 0.5
FRAMES = 3_000
WORK = 0.0015  # seconds of (blocking) work per frame on the slow node: 4.5 s for all, 9x DETECT
BODY = bytes(150)
LIMIT = 60.0  # seconds for anything to happen

T = TypeVar("T")


class LoopThread:
    """An event loop of its own in a thread (the slow node's)."""

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(LIMIT)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(LIMIT)
        self.loop.close()


async def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not predicate():
        assert time.monotonic() < deadline, f"not within {LIMIT} s: {what}"
        await asyncio.sleep(0.01)


def test_a_node_working_through_a_large_read_is_not_declared_silent() -> None:
    handled: list[bytes] = []
    reach: list[tuple[str, str, bool]] = []

    def busy(peer: str, data: bytes) -> None:  # a metadata frame costs the slow node real time
        time.sleep(WORK)
        handled.append(data)

    side = LoopThread()
    slow = ClusterNetwork("slow", 1, COOKIE, (B, 0), detect_timeout=DETECT, reconnect_min=0.02)
    slow.set_receiver(busy)
    slow.on_reachability(lambda peer, up: reach.append(("slow", peer, up)))

    async def main() -> tuple[int, list[tuple[str, str, bool]]]:
        fast = ClusterNetwork("fast", 1, COOKIE, (A, 0), detect_timeout=DETECT, reconnect_min=0.02)
        fast.on_reachability(lambda peer, up: reach.append(("fast", peer, up)))
        try:
            await fast.start()
            side.run(slow.start())
            fast.add_peer("slow", *slow.bound_address())
            side.loop.call_soon_threadsafe(slow.add_peer, "fast", *fast.bound_address())
            await until(lambda: ("fast", "slow", True) in reach and ("slow", "fast", True) in reach, "linked")
            for i in range(FRAMES):  # all at once: the slow node reads them in a few large chunks
                assert fast.send_frame("slow", FrameType.METADATA, i.to_bytes(4, "big") + BODY)
            await until(lambda: len(handled) >= FRAMES or len(reach) > 2, "every frame handled")
            await asyncio.sleep(DETECT)  # a verdict that was due would have come by now
            return int(fast.stats()["links_down"]), list(reach)
        finally:
            await fast.stop()

    try:
        links_down, seen = asyncio.run(main())
    finally:
        side.run(slow.stop())
        side.close()
    assert links_down == 0 and sorted(seen) == [("fast", "slow", True), ("slow", "fast", True)], \
        f"the link went down while the slow node worked: {seen}"
    assert handled == [i.to_bytes(4, "big") + BODY for i in range(FRAMES)]  # all, in order, once
