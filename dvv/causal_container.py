"""Dotted causal containers (the per-key object of a server-wide-clock store, as in ``swc_kv.erl``).

A :class:`CausalContainer` holds the live versions of one key as a map *dot -> value* plus a causal
*context* (a :class:`~dvv.version_vector.VersionVector`) of everything the versions were written
over.  :meth:`~CausalContainer.sync` keeps a version iff both sides hold it or the other side's
context does not cover its dot, and merges the contexts.  :meth:`~CausalContainer.discard` drops what a
client context covers (before a write), :meth:`~CausalContainer.add` stores a new version under a dot
that the node clock's ``event`` issued.  A delete is a container with no values whose context still
covers what it deleted (:meth:`~CausalContainer.delete` also records the delete's own dot, so anti-
entropy can carry it).  To save space, a node stores containers *stripped* of the context entries its
node clock base already covers (:meth:`~CausalContainer.strip`) and *fills* them back before any use
(:meth:`~CausalContainer.fill`): only filled containers may be synced.  A stripped container with no
values and an empty context (:meth:`~CausalContainer.is_empty`) can be dropped from storage.
Immutable; values are opaque and compared with ``==`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from dvv.dots import Dot, check_dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector

__all__ = ["CausalContainer"]


class CausalContainer:
    """Immutable map dot -> value (sorted by dot) plus a version-vector context."""

    __slots__ = ("_ctx", "_dots")

    _dots: tuple[tuple[Dot, Any], ...]
    _ctx: VersionVector

    def __init__(
        self,
        dots: Mapping[Dot, Any] | Iterable[tuple[Dot, Any]] = (),
        context: Mapping[str, int] = VersionVector(),
    ) -> None:
        items = dots.items() if isinstance(dots, Mapping) else dots
        clean: dict[Dot, Any] = {}
        for dot, value in items:
            clean[check_dot(dot)] = value
        self._dots = tuple(sorted(clean.items(), key=lambda kv: kv[0]))
        self._ctx = context if isinstance(context, VersionVector) else VersionVector(context)

    @classmethod
    def _make(cls, dots: tuple[tuple[Dot, Any], ...], ctx: VersionVector) -> CausalContainer:
        obj = cls.__new__(cls)
        obj._dots = dots
        obj._ctx = ctx
        return obj

    # -- queries ----------------------------------------------------------------------------------
    def values(self) -> list[Any]:
        """The live values, in dot order."""
        return [v for _, v in self._dots]

    def dots(self) -> tuple[Dot, ...]:
        """The dots of the live values, sorted."""
        return tuple(d for d, _ in self._dots)

    def items(self) -> tuple[tuple[Dot, Any], ...]:
        """``(dot, value)`` pairs, sorted by dot."""
        return self._dots

    def context(self) -> VersionVector:
        """The causal context."""
        return self._ctx

    def is_empty(self) -> bool:
        """No values and an empty context: nothing to keep (e.g. a fully stripped delete)."""
        return not self._dots and not self._ctx

    def is_deleted(self) -> bool:
        """No values, but a context (a delete that must still be remembered)."""
        return not self._dots and bool(self._ctx)

    def __len__(self) -> int:
        return len(self._dots)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    # -- operations -------------------------------------------------------------------------------
    def add(self, dot: Dot, value: Any) -> CausalContainer:
        """Store ``value`` under ``dot`` (from ``NodeClock.event``) and cover ``dot`` in the context."""
        dot = check_dot(dot)
        merged = dict(self._dots)
        merged[dot] = value
        return CausalContainer._make(tuple(sorted(merged.items(), key=lambda kv: kv[0])), self._ctx.add(dot))

    def sync(self, other: CausalContainer) -> CausalContainer:
        """Merge two *filled* containers, dropping versions the other side has seen and discarded."""
        c1, c2 = self._ctx, other._ctx
        mine = dict(self._dots)
        theirs = dict(other._dots)
        out: dict[Dot, Any] = {}
        for dot, value in self._dots:
            if dot in theirs or dot[1] > c2.counter(dot[0]):
                out[dot] = value
        for dot, value in other._dots:
            if dot not in mine and dot[1] > c1.counter(dot[0]):
                out[dot] = value
        return CausalContainer._make(tuple(sorted(out.items(), key=lambda kv: kv[0])), c1.merge(c2))

    def discard(self, context: Mapping[str, int]) -> CausalContainer:
        """Drop the versions ``context`` covers and merge ``context`` into the container's context."""
        ctx = context if isinstance(context, VersionVector) else VersionVector(context)
        kept = tuple((d, v) for d, v in self._dots if d[1] > ctx.counter(d[0]))
        return CausalContainer._make(kept, self._ctx.merge(ctx))

    def delete(self, context: Mapping[str, int], dot: Dot) -> CausalContainer:
        """A delete coordinated under ``dot``: discard what ``context`` covers and cover ``dot`` too."""
        deleted = self.discard(context)
        return CausalContainer._make(deleted._dots, deleted._ctx.add(check_dot(dot)))

    def strip(self, node_clock: NodeClock) -> CausalContainer:
        """Drop the context entries that the node clock's base already covers (for storage)."""
        base = node_clock.base()
        ctx = self._ctx.filter_ids(lambda node, counter: counter > base.counter(node))
        return CausalContainer._make(self._dots, ctx)

    def fill(self, node_clock: NodeClock, ids: Iterable[str] | None = None) -> CausalContainer:
        """Put back the context a :meth:`strip` removed: merge the node clock's base (only ``ids``)."""
        base = node_clock.base()
        if ids is not None:
            keep = set(ids)
            base = base.filter_ids(lambda node, _counter: node in keep)
        return CausalContainer._make(self._dots, self._ctx.merge(base))

    # -- dunder -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CausalContainer):
            return NotImplemented
        return self._ctx == other._ctx and self._dots == other._dots

    def __hash__(self) -> int:
        return hash((self.dots(), self._ctx))

    def __repr__(self) -> str:
        dots = ", ".join(f"{d!r}: {v!r}" for d, v in self._dots)
        return f"CausalContainer({{{dots}}}, context={self._ctx.to_dict()!r})"
