"""The driver of `cluster.discovery` (docs/cluster.md, "Joining at start-up"): a task owned by the node that joins
the cluster of a listed peer once the node has started, by the rules of `discovery_plan`, and tries again, with a
growing wait, until the plan says there is nothing to do. It keeps looking while the node runs (a plan can change:
a lost data directory, an operator's join), and stops with the node.

Before a join it checks that something listens on the peer's cluster port: a join of a peer that is down would
take the node out of service for the join's whole timeout (a joining node takes no client), again and again.
Each failure is logged with its reason: a warning the first time for a peer, when the reason changes and then
once every `longest` seconds; a debug line otherwise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable

import structlog

from vmqpy.cluster.discovery_plan import DiscoveryPlan, Peer, Situation, Warned, plan, retry_delay, warn_now
from vmqpy.cluster.errors import CommandRefused

log = structlog.get_logger("vmqpy.discovery")

PROBE_TIMEOUT = 2.0  # seconds a TCP connect to a peer's cluster port may take


async def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when something accepts a TCP connection at (host, port); else why not."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g}s"
    except OSError as exc:
        return f"nothing listens at {host}:{port} ({exc.strerror or exc})"
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass  # the peer reset a connection that said nothing: it is up, which is all we asked
    return None


class Discovery:
    """Joins the cluster of a listed peer (the module doc). `situation()` reads the node's state; `join(peer)`
    is the join of `vmq-admin cluster join` (raises CommandRefused with the reason); `reachable(host, port)`
    is `probe`. `shortest`, `longest`: the waits between rounds (cluster.discovery_interval,
    cluster.discovery_max_interval)."""

    def __init__(
        self,
        peers: tuple[Peer, ...],
        situation: Callable[[], Situation],
        join: Callable[[str], Awaitable[str]],
        *,
        shortest: float,
        longest: float,
        reachable: Callable[[str, int], Awaitable[str | None]] = probe,
        random: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peers = peers
        self.situation = situation
        self.join = join
        self.shortest = shortest
        self.longest = max(longest, shortest)
        self.reachable = reachable
        self.random = random
        self.clock = clock
        self.warned: dict[str, Warned] = {}
        self.attempts = 0  # joins tried (or peers found down) since the start
        self.joined: str | None = None  # the last peer joined by discovery
        self.seen: set[str] = set()  # every member seen since the start (or since the node left)

    def plan(self) -> DiscoveryPlan:
        """The plan for the node's situation now. A member seen earlier that is no longer one was removed (only
        a leave deletes a membership record) even before its departed record arrives: it is not tried."""
        situation = self.situation()
        if situation.left:
            self.seen.clear()
        self.seen |= situation.members
        gone = self.seen - situation.members - {situation.me}
        if gone:
            situation = dataclasses.replace(situation, departed=situation.departed | gone)
        return plan(situation, self.peers)

    async def run(self) -> None:
        """Until cancelled (the node stops)."""
        log.info("cluster discovery", peers=[str(p) for p in self.peers])
        rounds = 0
        idle = None
        while True:
            current = self.plan()
            if not current.targets:
                if current.idle != idle:
                    log.info("cluster discovery: nothing to do", why=current.idle)
                    idle = current.idle
                rounds = 0
                await asyncio.sleep(self.shortest)
                continue
            idle = None
            try:
                joined = await self.round(current.targets)
            except Exception:  # a bug must not end discovery for the rest of the node's life
                log.exception("cluster discovery round failed")
                joined = False
            rounds = 0 if joined else rounds + 1
            await asyncio.sleep(self.shortest if joined else
                                retry_delay(rounds, self.shortest, self.longest, self.random))

    async def round(self, targets: tuple[Peer, ...]) -> bool:
        """Try `targets` in turn until one join succeeds (True); peers the plan no longer wants are skipped (an
        earlier join of this round may have settled the node)."""
        for peer in targets:
            if peer not in self.plan().targets:
                continue
            self.attempts += 1
            reason = await self.reachable(peer.host, peer.port)
            if reason is None:
                if peer not in self.plan().targets:
                    continue
                try:
                    answer = await self.join(str(peer))
                except CommandRefused as exc:
                    reason = str(exc)
                else:
                    self.joined = str(peer)
                    self.warned.pop(peer.name, None)
                    log.info("cluster discovery: joined", peer=str(peer), answer=answer.splitlines()[0])
                    return True
            self._failed(peer, reason)
        return False

    def _failed(self, peer: Peer, reason: str) -> None:
        now = self.clock()
        if warn_now(self.warned.get(peer.name), reason, now, self.longest):
            self.warned[peer.name] = Warned(reason, now)
            log.warning("cluster discovery: cannot join yet, trying again", peer=str(peer), reason=reason,
                        next_warning_in=self.longest)
        else:
            log.debug("cluster discovery: cannot join yet", peer=str(peer), reason=reason)
