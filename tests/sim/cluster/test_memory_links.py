"""The memory links (vmqpy.cluster.memory_links) keep ClusterNetwork's promises on simulated time: order per
link, buffering until the link is up, frames held across a cut and delivered at a heal before the failure
detector fires, links closed by the detector after detect_timeout, refusals reported to the dialer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.memory_links import MemoryCluster, MemoryLinks

from .virtual import VirtualClock, VirtualLoop


def simulated(main: Callable[[MemoryCluster], Awaitable[None]], seed: int = 1) -> None:
    loop = VirtualLoop(VirtualClock())
    try:
        loop.run_until_complete(main(MemoryCluster(seed)))
    finally:
        loop.close()


class Node:
    def __init__(self, cluster: MemoryCluster, name: str, incarnation: int = 1) -> None:
        self.links = MemoryLinks(cluster, name, incarnation, "cookie", ("10.0.0.1", 44053), detect_timeout=1.0)
        self.frames: list[tuple[str, Any]] = []
        self.metadata: list[tuple[str, bytes]] = []
        self.reachability: list[tuple[str, bool]] = []
        self.refusals: list[tuple[str, str]] = []
        self.links.on_message(lambda peer, _type, body: self.frames.append((peer, body)))
        self.links.set_receiver(lambda peer, data: self.metadata.append((peer, data)))
        self.links.on_reachability(lambda peer, up: self.reachability.append((peer, up)))
        self.links.on_refused(lambda peer, reason: self.refusals.append((peer, reason)))


def test_frames_keep_their_order_and_wait_for_the_link() -> None:
    async def main(cluster: MemoryCluster) -> None:
        a, b = Node(cluster, "a"), Node(cluster, "b", incarnation=7)
        a.links.add_peer("b", "10.0.0.2", 44053)
        await a.links.start()
        for i in range(3):  # b is down: buffered, in order
            assert a.links.send_frame("b", FrameType.CONTROL, {"op": "n", "i": i})
        await asyncio.sleep(0.5)
        await b.links.start()
        await asyncio.sleep(3.0)  # the next dial (backoff at most reconnect_max)
        assert a.links.reachable() == {"b"} and b.links.reachable() == {"a"}
        assert a.links.incarnation_of("b") == 7
        for i in range(3, 50):
            a.links.send_frame("b", FrameType.CONTROL, {"op": "n", "i": i})
        b.links.send("a", b"metadata")
        await asyncio.sleep(0.1)
        assert [body["i"] for _peer, body in b.frames] == list(range(50))
        assert a.metadata == [("b", b"metadata")]

    simulated(main)


def test_a_cut_holds_frames_until_the_heal_or_closes_the_link_after_detect_timeout() -> None:
    async def main(cluster: MemoryCluster) -> None:
        a, b = Node(cluster, "a"), Node(cluster, "b")
        a.links.add_peer("b", "10.0.0.2", 44053)
        await a.links.start()
        await b.links.start()
        await asyncio.sleep(0.1)
        cluster.cut("a", "b")
        a.links.send_frame("b", FrameType.CONTROL, {"op": "late"})
        await asyncio.sleep(0.5)  # shorter than the detector: the link survives, the frame arrives at the heal
        assert b.frames == []
        cluster.heal("a", "b")
        await asyncio.sleep(0.1)
        assert b.frames == [("a", {"op": "late"})]
        cluster.cut("a", "b")
        a.links.send_frame("b", FrameType.CONTROL, {"op": "lost"})
        await asyncio.sleep(2.0)  # longer than detect_timeout (and its jitter): both ends gave the link up
        assert a.links.reachable() == set() and b.links.reachable() == set()
        assert ("b", False) in a.reachability and ("a", False) in b.reachability
        cluster.heal("a", "b")
        await asyncio.sleep(3.0)  # the dialer comes back (backoff at most reconnect_max)
        assert a.links.reachable() == {"b"}
        assert ("a", {"op": "lost"}) not in b.frames  # written to the broken link: lost (at most once)

    simulated(main)


def test_a_refused_dial_is_reported_and_a_crashed_node_is_noticed() -> None:
    async def main(cluster: MemoryCluster) -> None:
        a, b, c = Node(cluster, "a"), Node(cluster, "b"), Node(cluster, "c")
        b.links.set_admission(lambda peer, _incarnation, _intent: "not a member" if peer == "a" else None)
        a.links.add_peer("b", "10.0.0.2", 44053)
        c.links.add_peer("b", "10.0.0.2", 44053)
        for node in (a, b, c):
            await node.links.start()
        await asyncio.sleep(0.1)
        assert ("b", "not a member") in a.refusals
        assert b.links.reachable() == {"c"}
        cluster.crash("b")
        await asyncio.sleep(0.1)
        assert c.links.reachable() == set() and ("b", False) in c.reachability

    simulated(main)
