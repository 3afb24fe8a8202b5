"""Hybrid logical clocks (Kulkarni, Demirbas et al., "Logical Physical Clocks", OPODIS 2014).

A :class:`Stamp` is ``(wall_ms, logical, node)``: the wall-clock milliseconds of the latest event
this node knows of, a counter that orders events inside the same millisecond (or while the local
wall clock lags behind a stamp received from a faster node), and the node id, which breaks the
remaining ties so the order is total.  Stamps compare as tuples.

:class:`HybridClock` never goes backwards: :meth:`HybridClock.now` is greater than every stamp it
issued or observed before, even if the wall clock jumped back, and after
:meth:`HybridClock.observe` of a remote stamp every later local stamp is greater than it.  So a
write that causally follows another (its node saw the other, directly or through a chain of
messages) carries a greater stamp, even when its node's wall clock is behind.  ``wall`` is always
passed in by the caller (seconds, e.g. ``time.time()``); this module never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HybridClock", "Stamp"]


@dataclass(frozen=True, order=True, slots=True)
class Stamp:
    """A hybrid-logical-clock timestamp; ordered by ``(wall_ms, logical, node)``."""

    wall_ms: int
    logical: int
    node: str

    def to_list(self) -> list[Any]:
        """``[wall_ms, logical, node]`` (for msgpack)."""
        return [self.wall_ms, self.logical, self.node]

    @classmethod
    def from_list(cls, data: Any) -> Stamp:
        """Inverse of :meth:`to_list`; raises ``ValueError`` for anything else."""
        if not isinstance(data, list | tuple) or len(data) != 3:
            raise ValueError(f"a stamp is [wall_ms, logical, node], got {data!r}")
        wall_ms, logical, node = data
        for part in (wall_ms, logical):
            if not isinstance(part, int) or isinstance(part, bool) or part < 0:
                raise ValueError(f"stamp counters are non-negative ints, got {data!r}")
        if not isinstance(node, str):
            raise ValueError(f"a stamp's node is a str, got {data!r}")
        return cls(wall_ms, logical, node)

    @classmethod
    def parse(cls, data: Any) -> Stamp | None:
        """:meth:`from_list`, or None when ``data`` is not a stamp (a Stamp passes through)."""
        if isinstance(data, Stamp):
            return data
        try:
            return cls.from_list(data)
        except ValueError:
            return None


class HybridClock:
    """A node's hybrid logical clock: ``(l, c)`` state, stamps carry the node id."""

    __slots__ = ("_c", "_l", "node")

    def __init__(self, node: str) -> None:
        if not isinstance(node, str):
            raise TypeError(f"node id must be a str, got {node!r}")
        self.node = node
        self._l = 0
        self._c = 0

    @property
    def last(self) -> Stamp:
        """The latest stamp issued or observed (``(0, 0, node)`` before any)."""
        return Stamp(self._l, self._c, self.node)

    def now(self, wall: float) -> Stamp:
        """A stamp for a local event at wall-clock time ``wall`` (seconds)."""
        pt = int(wall * 1000)
        if pt > self._l:
            self._l, self._c = pt, 0
        else:
            self._c += 1
        return Stamp(self._l, self._c, self.node)

    def observe(self, stamp: Stamp, wall: float) -> Stamp:
        """Merge a received ``stamp``; returns the stamp of the receive event (greater than both)."""
        pt = int(wall * 1000)
        lo, co = self._l, self._c
        l_new = max(lo, stamp.wall_ms, pt)
        if l_new == lo and l_new == stamp.wall_ms:
            c_new = max(co, stamp.logical) + 1
        elif l_new == lo:
            c_new = co + 1
        elif l_new == stamp.wall_ms:
            c_new = stamp.logical + 1
        else:
            c_new = 0
        self._l, self._c = l_new, c_new
        return Stamp(l_new, c_new, self.node)

    def witness(self, stamp: Stamp) -> None:
        """Make every later :meth:`now` greater than ``stamp`` without creating an event."""
        self.witness_parts(stamp.wall_ms, stamp.logical)

    def witness_parts(self, wall_ms: int, logical: int) -> None:
        """:meth:`witness` of a stamp given as its two counters."""
        if wall_ms > self._l or (wall_ms == self._l and logical > self._c):
            self._l, self._c = wall_ms, logical

    def __repr__(self) -> str:
        return f"HybridClock({self.node!r}, l={self._l}, c={self._c})"
