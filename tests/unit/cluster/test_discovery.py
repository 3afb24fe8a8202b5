"""The cluster.discovery driver (vmqpy/cluster/discovery.py) on a fake node: it joins through the first peer that
answers, never itself, stops trying once settled, warns about a failing peer once per period (debug lines
otherwise), does nothing after a leave, and ends with its task; `probe` against real loopback sockets."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from structlog.testing import capture_logs

from vmqpy.cluster.discovery import Discovery, probe
from vmqpy.cluster.discovery_plan import Peer, Situation
from vmqpy.cluster.errors import CommandRefused

ME = "n2@127.0.0.12"
N1 = Peer("n1@127.0.0.11", "127.0.0.11", 44053)
N2 = Peer(ME, "127.0.0.12", 44053)
N3 = Peer("n3@127.0.0.13", "127.0.0.13", 44053)


class FakeNode:
    """The node as discovery sees it: members, a left flag, peers that are up and a join that merges."""

    def __init__(self, up: set[str], listening: set[str] | None = None) -> None:
        self.members = {ME}
        self.listening = {n.split("@")[1] for n in up} if listening is None else listening  # hosts
        self.left = False
        self.up = up
        self.joins: list[str] = []
        self.probes: list[str] = []
        self.now = 0.0

    def situation(self) -> Situation:
        return Situation(ME, frozenset(self.members), left=self.left)

    async def join(self, discovery_node: str) -> str:
        self.joins.append(discovery_node)
        name = discovery_node.rsplit(":", 1)[0]
        if name not in self.up:
            raise CommandRefused(f"discovery node {name} did not answer the join request", 503)
        self.members |= {name, *self.up}
        return f"Done: {ME} joins the cluster of {name}"

    async def reachable(self, host: str, port: int) -> str | None:
        self.probes.append(host)
        return None if host in self.listening else f"nothing at {host}"

    def discovery(self, *peers: Peer, longest: float = 30.0) -> Discovery:
        return Discovery(peers, self.situation, self.join, shortest=0.001, longest=longest,
                         reachable=self.reachable, random=lambda: 0.0, clock=lambda: self.now)


async def test_joins_the_anchor_and_then_does_nothing() -> None:
    node = FakeNode(up={N1.name, N3.name})
    discovery = node.discovery(N3, N2, N1)
    assert await discovery.round(discovery.plan().targets)
    assert node.joins == [str(N1)]  # the anchor first; never itself
    assert discovery.plan().targets == ()
    assert discovery.joined == str(N1)


async def test_tries_the_next_peer_when_one_is_down() -> None:
    node = FakeNode(up={N3.name})  # n1 down (nothing listens), n3 up
    discovery = node.discovery(N1, N3)
    with capture_logs() as logs:
        assert await discovery.round(discovery.plan().targets)  # n3 joined
    assert discovery.plan().targets == (N1,)  # but n1, the anchor, is still to join
    assert node.probes == ["127.0.0.11", "127.0.0.13"]
    assert node.joins == [str(N3)]  # a peer found down is not joined: the node stays in service
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [w["peer"] for w in warnings] == [str(N1)]
    assert "nothing at 127.0.0.11" in warnings[0]["reason"]


async def test_a_failing_peer_is_warned_about_once_per_period() -> None:
    node = FakeNode(up=set())
    discovery = node.discovery(N1, longest=30.0)
    with capture_logs() as logs:
        for step in range(10):
            node.now = step * 5.0  # 0, 5, ..., 45 s: warnings at 0 and 30
            await discovery.round(discovery.plan().targets)
    levels = [e["log_level"] for e in logs if e.get("peer") == str(N1)]
    assert levels.count("warning") == 2
    assert levels.count("debug") == 8
    assert discovery.attempts == 10


async def test_a_new_reason_is_warned_at_once() -> None:
    node = FakeNode(up=set(), listening={N3.host})
    discovery = node.discovery(N3)  # n3 listens, but refuses the join (a cookie, a full cluster port, ...)
    with capture_logs() as logs:
        await discovery.round(discovery.plan().targets)
        node.listening = set()  # now nothing listens at n3's address: another reason
        await discovery.round(discovery.plan().targets)
    reasons = [e["reason"] for e in logs if e["log_level"] == "warning"]
    assert reasons == ["discovery node n3@127.0.0.13 did not answer the join request", "nothing at 127.0.0.13"]


async def test_run_until_settled_then_idle_and_cancelled_with_the_node() -> None:
    node = FakeNode(up={N1.name})
    discovery = node.discovery(N1, N3)
    with capture_logs() as logs:
        task = asyncio.get_running_loop().create_task(discovery.run())
        for _ in range(2000):
            if any(e["event"] == "cluster discovery: nothing to do" for e in logs):
                break
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert node.joins == [str(N1)]
    idle = [e for e in logs if e["event"] == "cluster discovery: nothing to do"]
    assert [e["why"] for e in idle] == ["in a cluster with n1@127.0.0.11"]
    assert task.done()


async def test_nothing_after_a_leave() -> None:
    node = FakeNode(up={N1.name})
    node.left = True
    discovery = node.discovery(N1)
    assert discovery.plan().targets == ()
    task = asyncio.get_running_loop().create_task(discovery.run())
    for _ in range(20):
        await asyncio.sleep(0.002)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert node.joins == [] and node.probes == []


async def test_a_bug_in_a_round_does_not_end_discovery() -> None:
    node = FakeNode(up={N1.name})
    calls: list[int] = []

    async def broken(host: str, port: int) -> str | None:
        calls.append(port)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return None

    discovery = Discovery((N1,), node.situation, node.join, shortest=0.001, longest=0.002, reachable=broken)
    with capture_logs() as logs:
        task = asyncio.get_running_loop().create_task(discovery.run())
        for _ in range(2000):
            if node.joins:
                break
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert node.joins == [str(N1)]
    assert any(e["event"] == "cluster discovery round failed" for e in logs)


async def test_probe_real_sockets() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port: Any = server.sockets[0].getsockname()[1]
    try:
        assert await probe("127.0.0.1", port) is None
    finally:
        server.close()
        await server.wait_closed()
    with socket.socket() as s:  # a port that nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
        reason = await probe("127.0.0.1", closed)
    assert reason is not None and f"127.0.0.1:{closed}" in reason


async def test_a_member_that_vanished_is_not_tried_before_its_departed_record_arrives() -> None:
    """n1 (the anchor) is removed: its membership record goes; the node does not chase it back."""
    node = FakeNode(up={N1.name, N3.name})
    discovery = node.discovery(N1, N3)
    node.members = {ME, N1.name, N3.name}
    assert discovery.plan().targets == ()
    node.members = {ME, N3.name}  # the delete of n1's record came first
    assert discovery.plan().targets == ()
    assert discovery.plan().idle == "this node is the anchor (lowest name) and in a cluster"
