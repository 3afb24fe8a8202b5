"""The dot -> key index of a replica, and which of its dots garbage collection may forget.

The index names the key of every dot the replica holds a trace of: the dots of live versions (never
forgotten, so a replica that joins later can always be served) and the dots of versions that were
superseded or deleted (*pending* dots), until every member holds them.  It is a plain mutable ``dict`` per
origin node rather than the immutable :class:`dvv.DotKeyMap`, so a write costs O(1).  Pending counters
wait in a heap per node: :meth:`DotIndex.prune` pops those at or below what every member holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from dvv.dots import Dot
from vmqpy.metadata.objects import FullKey

__all__ = ["DotIndex", "Pruned"]

Pruned = tuple[Dot, FullKey, bool]
"""A forgotten pending dot, its key, and whether it was the key's last pending dot."""


class DotIndex:
    """node -> counter -> key, and the pending (not live) dots among them."""

    __slots__ = ("_pending", "_pending_per_key", "by_node")

    def __init__(self) -> None:
        self.by_node: dict[str, dict[int, FullKey]] = {}
        self._pending: dict[str, list[int]] = {}  # per node: heap of indexed counters that are not live
        self._pending_per_key: dict[FullKey, int] = {}

    def adopt(self, by_node: dict[str, dict[int, FullKey]]) -> None:
        """Take ``by_node`` (node -> counter -> key: the dots of the objects read back at a restart) as the index,
        which must be empty."""
        if self.by_node:
            raise ValueError("adopt needs an empty index")
        self.by_node = by_node

    def add(self, dot: Dot, fk: FullKey) -> None:
        """Index ``dot`` under ``fk``."""
        self.by_node.setdefault(dot[0], {})[dot[1]] = fk

    def supersede(self, dot: Dot, fk: FullKey) -> None:
        """``dot`` (indexed under ``fk``) is no longer live: it stays indexed until every member holds it."""
        heapq.heappush(self._pending.setdefault(dot[0], []), dot[1])
        self._pending_per_key[fk] = self._pending_per_key.get(fk, 0) + 1

    def restore_pending(self, dot: Dot, fk: FullKey) -> bool:
        """Index a pending dot read back from its row, unless it is indexed already (live in an object row
        after a crash between the two rows: the object wins).  Returns whether it was indexed."""
        sub = self.by_node.setdefault(dot[0], {})
        if dot[1] in sub:
            return False
        sub[dot[1]] = fk
        self.supersede(dot, fk)
        return True

    def pending_nodes(self) -> list[str]:
        """The nodes with pending dots."""
        return list(self._pending)

    def has_pending(self) -> bool:
        return bool(self._pending)

    def awaits(self, fk: FullKey) -> bool:
        """Some pending dot of ``fk`` is still indexed."""
        return fk in self._pending_per_key

    def prune(self, floor: Callable[[str], int], limit: int | None = None) -> list[Pruned]:
        """Forget the pending dots of each node up to ``floor(node)`` (what every member holds of it), nodes
        sorted, counters ascending; at most ``limit`` counters per call (None: all of them; those left go on the
        next call, :meth:`prunable`)."""
        pruned: list[Pruned] = []
        budget = -1 if limit is None else limit
        for node in sorted(self._pending):
            if budget == 0:
                break
            heap = self._pending[node]
            top = floor(node)
            sub = self.by_node.get(node, {})
            while heap and heap[0] <= top and budget != 0:
                budget -= 1
                counter = heapq.heappop(heap)
                fk = sub.pop(counter, None)
                if fk is not None:
                    left = self._pending_per_key.get(fk, 0) - 1
                    if left > 0:
                        self._pending_per_key[fk] = left
                    else:
                        self._pending_per_key.pop(fk, None)
                    pruned.append(((node, counter), fk, left <= 0))
            if not heap:
                del self._pending[node]
            if not sub:
                self.by_node.pop(node, None)
        return pruned

    def prunable(self, floor: Callable[[str], int]) -> bool:
        """Whether :meth:`prune` with this ``floor`` would forget a dot (one was left by its ``limit``)."""
        return any(heap[0] <= floor(node) for node, heap in self._pending.items() if heap)

    def copy(self) -> dict[str, dict[int, FullKey]]:
        """node -> counter -> key, for every node with indexed dots."""
        return {n: dict(sub) for n, sub in self.by_node.items() if sub}

    def indexed(self) -> int:
        """How many dots are indexed (live and pending)."""
        return sum(len(sub) for sub in self.by_node.values())

    def pending(self) -> int:
        """How many pending counters wait for GC."""
        return sum(len(h) for h in self._pending.values())

    def dump(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """The indexed counters and the pending counters per node, sorted."""
        index = {n: sorted(sub) for n, sub in sorted(self.by_node.items()) if sub}
        pending = {n: sorted(h) for n, h in sorted(self._pending.items()) if h}
        return index, pending
