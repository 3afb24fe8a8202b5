"""Which replica writes are settled, for the acknowledgement barrier (pure).

A write is one journal operation of a persistent session (a message stored, deleted, ...) sent to the
session's replica nodes (its targets). The barrier that gates an MQTT acknowledgement lets it leave once every
write issued before it is *settled*:

- every target that is reachable acknowledged it (it is on that node's disk), and
- when unreachable targets hold the acknowledgement (`strict`, the consistency modes), at least
  min(write_quorum, 1 + targets) copies exist (this node's counts as one).

A target that leaves the cluster is taken out of the write's targets (it will never answer). Once the barrier
passed a write it stays passed (a barrier never waits for it again); a passed write missing a copy is
under-replicated until its last target acknowledges it (the transport sends it again after a heal).
Writes are numbered from 1 in the order they are issued.

The replication log's under-replication windows (audit.py) are sampled once a second, and a window can be
shorter: `on_edge` is called where the count leaves zero and where it comes back to it, so the node samples at
those moments too, and `peak` keeps the highest count between two samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["WriteLedger"]


@dataclass(slots=True)
class _Write:
    targets: set[str]
    quorum: int  # copies wanted, this node's included
    acked: set[str] = field(default_factory=set)

    def settled(self, reachable: Callable[[str], bool], strict: bool) -> bool:
        if any(t not in self.acked and reachable(t) for t in self.targets):
            return False
        return not strict or 1 + len(self.acked) >= min(self.quorum, 1 + len(self.targets))

    def complete(self) -> bool:
        return self.acked >= self.targets


class WriteLedger:
    """The writes not yet acknowledged by all their targets, and how far the barrier passed."""

    def __init__(self) -> None:
        self._writes: dict[int, _Write] = {}  # in issue order
        self.last = 0  # the number of the last write issued
        self.passed = 0  # every write up to here is settled (or was, when the barrier passed it)
        self.under_replicated = 0  # passed writes still missing a copy
        self.peak = 0  # the highest under_replicated since the last take_peak()
        self.on_edge: Callable[[], None] | None = None  # under_replicated left zero or came back to it

    def issue(self, targets: list[str], quorum: int) -> int:
        """A write to `targets` that wants `quorum` copies (this node's included): its number."""
        self.last += 1
        self._writes[self.last] = _Write(set(targets), quorum)
        return self.last

    def acked(self, write: int, node: str) -> None:
        """`node` holds `write` on its disk."""
        entry = self._writes.get(write)
        if entry is not None and node in entry.targets:
            entry.acked.add(node)
            self._forget_if_complete(write, entry)

    def failed(self, write: int, node: str) -> None:
        """`node` left the cluster: it is no longer a target of `write`."""
        entry = self._writes.get(write)
        if entry is not None:
            entry.targets.discard(node)
            entry.acked.discard(node)
            self._forget_if_complete(write, entry)

    def _forget_if_complete(self, write: int, entry: _Write) -> None:
        if entry.complete():
            del self._writes[write]
            if write <= self.passed:
                self.under_replicated -= 1
                if self.under_replicated == 0 and self.on_edge is not None:
                    self.on_edge()

    def advance(self, reachable: Callable[[str], bool], strict: bool) -> int:
        """Pass every write from the first unpassed one that is settled now, in order; the new `passed`."""
        writes = self._writes
        before = self.under_replicated
        while self.passed < self.last:
            write = self.passed + 1
            entry = writes.get(write)
            if entry is not None:
                if not entry.settled(reachable, strict):
                    break
                self.under_replicated += 1  # not complete, or it would be gone
            self.passed = write
        if self.under_replicated > before:
            self.peak = max(self.peak, self.under_replicated)
            if before == 0 and self.on_edge is not None:
                self.on_edge()
        return self.passed

    def take_peak(self) -> int:
        """The highest `under_replicated` since the last call (or since the ledger was made); the count
        from now on."""
        peak, self.peak = max(self.peak, self.under_replicated), self.under_replicated
        return peak

    def pending(self) -> int:
        """Writes some target has not acknowledged yet."""
        return len(self._writes)
