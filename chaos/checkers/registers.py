"""Which values a register may hold at a final read, given the writes made to it.

A write's value may be there when no acknowledged write of the same register was invoked after it completed
(it may have been overwritten by a concurrent write, or not: both are allowed). A write whose outcome is unknown
never completes, so nothing supersedes it. Failed writes are not writes. The register's initial value is allowed
when no write was acknowledged at all.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Write:
    invoked: int
    completed: int | None  # None: unknown outcome
    acknowledged: bool
    value: Hashable


def superseded(write: Write, writes: Sequence[Write]) -> bool:
    if write.completed is None:
        return False
    return any(w.acknowledged and w.invoked > write.completed for w in writes)


def allowed(writes: Sequence[Write], initial: Hashable) -> set[Hashable]:
    """The values a final read may return."""
    values: set[Hashable] = {w.value for w in writes if not superseded(w, writes)}
    if not any(w.acknowledged for w in writes):
        values.add(initial)
    return values


def overwriting_writes(value: Hashable, writes: Sequence[Write]) -> list[Write]:
    """The acknowledged writes invoked after every write of `value` completed (what makes `value` stale)."""
    mine = [w for w in writes if w.value == value]
    if not mine or any(w.completed is None for w in mine):
        return []
    latest = max(w.completed for w in mine if w.completed is not None)
    return [w for w in writes if w.acknowledged and w.invoked > latest]
