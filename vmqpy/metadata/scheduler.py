"""When a replica pulls from whom: the queue of peers to exchange with, the periodic round, the running
exchanges.

A replica pulls from one random reachable member every ``sync_interval`` (with jitter, between 0.75x and
1.25x); a member that becomes reachable, an explicit "exchange now" and, after an exchange that repaired
something, every other reachable member not pulled from in this round are queued to start at once.  At
most ``max_running`` exchanges run at a time, one per peer: a peer that does not answer does not hold the
others up.  The exchanges themselves are :class:`~vmqpy.metadata.exchange.Exchange` state machines; the
replica ends each one (:meth:`ExchangeScheduler.end`) through its single teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from vmqpy.metadata.exchange import Exchange, ExchangeState

if TYPE_CHECKING:  # randomness is an input: only the type of the generator is named here
    import random

__all__ = ["ExchangeScheduler"]


class ExchangeScheduler:
    """The queue, the round and the running exchanges of one replica (this node pulling)."""

    __slots__ = ("_interval", "_rng", "_timeout", "_xid", "max_running", "next_sync", "queue", "round", "running")

    def __init__(self, *, interval: float, timeout: float, max_running: int, rng: random.Random) -> None:
        self._interval = interval
        self._timeout = timeout
        self._rng = rng
        self.max_running = max_running
        self.running: dict[str, Exchange] = {}  # one per peer
        self.queue: list[str] = []  # peers to exchange with as soon as possible
        self.round: set[str] = set()  # peers pulled from since the last periodic tick
        self.next_sync: float | None = None
        self._xid = 0

    def busy(self) -> bool:
        """An exchange is running or queued."""
        return bool(self.running) or bool(self.queue)

    def deadlines(self, now: float, can_sync: bool) -> list[float]:
        """When the scheduler needs a timer: an exchange step's deadline (now for an aborted one and for one
        applying a reply), now when a queued exchange can start, the next periodic exchange when ``can_sync`` (a
        member is reachable)."""
        times = [
            now if ex.abort or ex.state is ExchangeState.APPLYING else ex.deadline for ex in self.running.values()
        ]
        if len(self.running) < self.max_running and any(p not in self.running for p in self.queue):
            times.append(now)
        if can_sync:
            times.append(now if self.next_sync is None else self.next_sync)
        return times

    def applying(self) -> list[Exchange]:
        """The running exchanges applying a reply (a slice at each call of the replica's timer)."""
        return [ex for ex in self.running.values() if ex.state is ExchangeState.APPLYING]

    def stuck(self, now: float) -> list[tuple[Exchange, str]]:
        """The running exchanges to tear down, with the reason: aborted, or past their step's deadline."""
        return [
            (ex, "timeout" if ex.abort is None else ex.abort)
            for ex in self.running.values()
            if ex.abort is not None or ex.expired(now)
        ]

    def abort_unreachable(self, reachable: Collection[str]) -> None:
        """Running exchanges with a peer not in ``reachable`` end at the next timer."""
        for peer, ex in self.running.items():
            if peer not in reachable:
                ex.abort = "peer_unreachable"

    def keep_members(self, members: Collection[str]) -> None:
        """Forget queued peers that are no longer members."""
        self.queue = [p for p in self.queue if p in members]

    def enqueue_new(self, before: list[str], usable: list[str]) -> None:
        """Queue every member that is usable now but was not in ``before``."""
        was = set(before)
        for p in usable:
            if p not in was and p not in self.queue:
                self.queue.append(p)

    def urge(self, peer: str) -> None:
        """Pull from ``peer`` first."""
        if peer not in self.queue:
            self.queue.insert(0, peer)

    def tick(self, now: float, usable: list[str], catch_up: Collection[str]) -> None:
        """The periodic exchange: every ``sync_interval`` (with jitter) start a new round and queue a random
        idle member, or every member in ``catch_up`` (a restarted node catching up, one after the other)."""
        if not usable:
            self.next_sync = None
            return
        if self.next_sync is None:
            self.next_sync = now + self._jitter()
        elif now >= self.next_sync:
            self.next_sync = now + self._jitter()
            self.round = set()
            if catch_up:
                for peer in usable:
                    if peer in catch_up and peer not in self.queue:
                        self.queue.append(peer)
            elif len(self.running) < self.max_running and not self.queue:
                idle = [p for p in usable if p not in self.running]
                if idle:
                    self.queue.append(self._rng.choice(idle))

    def _jitter(self) -> float:
        return self._interval * (0.75 + 0.5 * self._rng.random())

    def start_queued(self, now: float, can_pull: Callable[[str], bool]) -> list[Exchange]:
        """Start queued exchanges, at most ``max_running`` at a time and one per peer, with the peers
        ``can_pull`` accepts (the others leave the queue).  Returns the started exchanges, in order."""
        started: list[Exchange] = []
        i = 0
        while i < len(self.queue) and len(self.running) < self.max_running:
            peer = self.queue[i]
            if peer in self.running:
                i += 1  # already pulling from it: wait for that exchange to end
                continue
            del self.queue[i]
            if can_pull(peer):
                self._xid += 1
                ex = self.running[peer] = Exchange(peer, self._xid, now, self._timeout)
                started.append(ex)
        return started

    def end(self, ex: Exchange) -> bool:
        """Drop ``ex``; False when it is not running (ended already)."""
        if self.running.get(ex.peer) is not ex:
            return False
        del self.running[ex.peer]
        return True

    def pulled(self, peer: str, usable: list[str], *, found_something: bool) -> None:
        """An exchange with ``peer`` completed.  When it brought something, the other members may have more
        (a heal nobody reported, lost pushes): queue every usable member not pulled from in this round."""
        self.round.add(peer)
        if found_something:
            for p in usable:
                if p not in self.round and p not in self.queue and p not in self.running:
                    self.queue.append(p)
