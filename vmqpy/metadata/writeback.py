"""Write-backs: a key left with siblings (concurrent versions) is resolved by one member, which writes the
winner back over them, so every replica ends with the one value.

The member that owns the smallest sibling dot writes back (:func:`owner`); it waits ``delay`` first, so
siblings that are still arriving settle before the winner is chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from dvv.dots import Dot
from vmqpy.metadata.objects import FullKey

__all__ = ["Writebacks", "owner"]


def owner(dots: Iterable[Dot], members: Collection[str]) -> str:
    """The member owning the smallest of the sibling ``dots`` (if no sibling dot belongs to a current member,
    the smallest member id)."""
    owned = [d for d in dots if d[0] in members]
    return min(owned)[0] if owned else min(members)


class Writebacks:
    """The keys this node will write back, and when."""

    __slots__ = ("_at", "_pending", "delay", "enabled")

    def __init__(self, *, enabled: bool, delay: float) -> None:
        self.enabled = enabled
        self.delay = delay
        self._pending: dict[FullKey, None] = {}
        self._at: float | None = None  # when the pending write-backs run (siblings settle first)

    def want(self, fk: FullKey, now: float) -> None:
        """Write ``fk`` back (after ``delay``, counted from the first pending one)."""
        self._pending[fk] = None
        if self._at is None:
            self._at = now + self.delay

    def drop(self, fk: FullKey) -> None:
        """``fk`` no longer needs a write-back (it has one version, or this node just wrote it)."""
        if self._pending:
            self._pending.pop(fk, None)

    def deadline(self, now: float) -> float | None:
        """When the pending write-backs are due (None: none pending)."""
        if not self._pending:
            return None
        return now if self._at is None else self._at

    def due(self, now: float) -> bool:
        return bool(self._pending) and (self._at is None or now >= self._at)

    def take(self) -> list[FullKey]:
        """The pending keys, in order; none is pending afterwards."""
        pending, self._pending = self._pending, {}
        self._at = None
        return list(pending)

    def __len__(self) -> int:
        return len(self._pending)
