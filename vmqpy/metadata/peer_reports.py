"""What each peer's messages said it holds: its whole node clock in a SyncRequest, its base in a SyncReply,
whatever membership view it sent them under.

A leave waits on these reports (docs/replication.md, "Leaving"): a leaving member waits until a remaining
one is known to hold everything it holds (:meth:`PeerReports.covers`), a remaining member that removes a
live one waits for the converse (:meth:`PeerReports.within`), and a member removed while down leaves with
the dots nobody is known to hold (:meth:`PeerReports.unaccounted`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from dvv.dots import Dot
from dvv.node_clock import NodeClock

__all__ = ["PeerReports"]


class PeerReports:
    """Per peer: every dot its messages said it holds, and how many messages said so."""

    __slots__ = ("_clocks", "_counts")

    def __init__(self) -> None:
        self._clocks: dict[str, NodeClock] = {}
        self._counts: Counter[str] = Counter()

    def record(self, peer: str, clock: NodeClock) -> None:
        """A message of ``peer`` said it holds ``clock``."""
        known = self._clocks.get(peer)
        self._clocks[peer] = clock if known is None else known.merge(clock)
        self._counts[peer] += 1

    def count(self, peer: str) -> int:
        """How many messages of ``peer`` reported its clock so far."""
        return self._counts[peer]

    def covers(self, peer: str, clock: NodeClock) -> bool:
        """``peer`` reported every dot of ``clock``."""
        reported = self._clocks.get(peer)
        return reported is not None and not clock.missing_dots(reported)

    def within(self, peer: str, clock: NodeClock) -> bool:
        """``clock`` holds every dot ``peer`` reported (False when it never reported)."""
        reported = self._clocks.get(peer)
        return reported is not None and not reported.missing_dots(clock)

    def has_all(self, peer: str, dots: Iterable[Dot]) -> bool:
        """``peer`` reported every one of ``dots`` (False when it never reported)."""
        reported = self._clocks.get(peer)
        return reported is not None and all(reported.contains(dot) for dot in dots)

    def unaccounted(self, gone: str, clock: NodeClock, peers: Iterable[str]) -> int:
        """How many dots of ``gone`` neither ``clock`` nor the reports of ``peers`` (other than ``gone``) hold,
        among those its own reports and ``clock`` say it issued."""
        claimed = NodeClock()
        for source in (self._clocks.get(gone), clock):
            if source is not None:
                claimed = claimed.merge(source.restrict([gone]))
        held = clock.restrict([gone])
        for peer in peers:
            reported = self._clocks.get(peer)
            if peer != gone and reported is not None:
                held = held.merge(reported.restrict([gone]))
        return sum(len(c) for c in claimed.missing_dots(held).values())
