"""Dot-key maps: which key each recent dot was written to (``swc_dotkeymap.erl``).

Anti-entropy in a server-wide-clock store compares node clocks (:meth:`NodeClock.missing_dots`) and
must then find the keys those missing dots belong to: a :class:`DotKeyMap` maps each dot to its key.
:meth:`DotKeyMap.keys_for` answers that lookup (dots it does not know are obsolete: their keys were
overwritten and the newer version is found through its own dot).  The map only needs a dot until
*every* peer holds it, which a :class:`~dvv.watermark.Watermark` tells; :meth:`DotKeyMap.prune` then
forgets those dots and returns the keys that lost a dot, so the store can re-strip those objects and
drop the ones left empty (fully propagated deletes).  Keys must be hashable.  Immutable; each update
copies the outer index and the one node's sub-map it touches, so prefer :meth:`DotKeyMap.add_many`
for bulk loads.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import NamedTuple

from dvv.causal_container import CausalContainer
from dvv.dots import Counters, Dot, check_dot
from dvv.errors import InvalidClockError
from dvv.watermark import Watermark

__all__ = ["DotKeyMap", "PruneResult"]


class PruneResult(NamedTuple):
    """What :meth:`DotKeyMap.prune` returns: ``keys, remaining = dkm.prune(wm)``.

    ``keys``: the distinct keys that had at least one dot pruned, ordered by their first pruned dot
    (node id, then counter).  ``remaining``: the new map without the pruned dots.
    """

    keys: tuple[Hashable, ...]
    remaining: DotKeyMap


def _check_key(key: object) -> Hashable:
    try:
        hash(key)
    except TypeError as exc:
        raise InvalidClockError(f"keys must be hashable, got {type(key).__name__}") from exc
    return key


class DotKeyMap:
    """Immutable map dot -> key, indexed by node id then counter."""

    __slots__ = ("_m",)

    _m: dict[str, dict[int, Hashable]]

    def __init__(self, items: Mapping[Dot, Hashable] | Iterable[tuple[Dot, Hashable]] = ()) -> None:
        self._m = {}
        self._m = self.add_many(items)._m

    @classmethod
    def _make(cls, m: dict[str, dict[int, Hashable]]) -> DotKeyMap:
        obj = cls.__new__(cls)
        obj._m = {n: sub for n, sub in sorted(m.items()) if sub}
        return obj

    # -- queries ----------------------------------------------------------------------------------
    def get(self, dot: Dot) -> Hashable | None:
        """The key of ``dot``, or None."""
        return self._m.get(dot[0], {}).get(dot[1])

    def __contains__(self, dot: object) -> bool:
        if not isinstance(dot, tuple) or len(dot) != 2:
            return False
        return dot[1] in self._m.get(dot[0], {})

    def __len__(self) -> int:
        return sum(len(sub) for sub in self._m.values())

    def is_empty(self) -> bool:
        """True when the map holds no dot."""
        return not self._m

    def size(self, node: str) -> int:
        """Number of dots of ``node``."""
        return len(self._m.get(node, {}))

    def nodes(self) -> tuple[str, ...]:
        """Node ids with at least one dot, sorted."""
        return tuple(self._m)

    def items(self) -> Iterator[tuple[Dot, Hashable]]:
        """``((node, counter), key)`` pairs sorted by dot."""
        for node, sub in self._m.items():
            for counter in sorted(sub):
                yield (node, counter), sub[counter]

    def to_dict(self) -> dict[Dot, Hashable]:
        """A plain ``dict`` dot -> key."""
        return dict(self.items())

    def keys_for(self, missing_dots: Mapping[str, Iterable[int]]) -> dict[Hashable, tuple[Dot, ...]]:
        """The keys of the given dots (e.g. ``NodeClock.missing_dots``), each with the dots found for it.

        The result is ordered by each key's first dot; dots the map does not hold are skipped.
        """
        found: list[tuple[Dot, Hashable]] = []
        for node, counters in missing_dots.items():
            sub = self._m.get(node)
            if not sub:
                continue
            wanted: Counters | range | set[int]
            wanted = counters if isinstance(counters, Counters | range) else set(counters)
            if len(wanted) > len(sub):
                found.extend(((node, c), k) for c, k in sub.items() if c in wanted)
            else:
                found.extend(((node, c), sub[c]) for c in wanted if c in sub)
        found.sort(key=lambda dk: dk[0])
        out: dict[Hashable, list[Dot]] = {}
        for dot, key in found:
            out.setdefault(key, []).append(dot)
        return {k: tuple(v) for k, v in out.items()}

    # -- updates ----------------------------------------------------------------------------------
    def add(self, dot: Dot, key: Hashable) -> DotKeyMap:
        """Map ``dot`` to ``key`` (replacing a previous key of that dot)."""
        node, counter = check_dot(dot)
        _check_key(key)
        m = dict(self._m)
        sub = dict(m.get(node, {}))
        sub[counter] = key
        m[node] = sub
        return DotKeyMap._make(m)

    def add_many(self, items: Mapping[Dot, Hashable] | Iterable[tuple[Dot, Hashable]]) -> DotKeyMap:
        """Add many ``(dot, key)`` pairs with one copy."""
        pairs = items.items() if isinstance(items, Mapping) else items
        m = dict(self._m)
        copied: set[str] = set()
        for dot, key in pairs:
            node, counter = check_dot(dot)
            _check_key(key)
            if node not in copied:
                m[node] = dict(m.get(node, {}))
                copied.add(node)
            m[node][counter] = key
        return DotKeyMap._make(m)

    def add_container(self, key: Hashable, container: CausalContainer) -> DotKeyMap:
        """Map every dot of ``container``'s values to ``key``."""
        return self.add_many((dot, key) for dot in container.dots())

    def remove(self, dot: Dot) -> DotKeyMap:
        """Forget ``dot`` (no-op when absent)."""
        node, counter = dot
        sub = self._m.get(node)
        if sub is None or counter not in sub:
            return self
        m = dict(self._m)
        m[node] = {c: k for c, k in sub.items() if c != counter}
        return DotKeyMap._make(m)

    def prune(self, watermark: Watermark) -> PruneResult:
        """Forget the dots every peer holds (counter <= ``watermark.min(node)``).

        Returns ``PruneResult(keys, remaining)``: the distinct keys that lost a dot (ordered by their
        first pruned dot) and the new map.
        """
        m: dict[str, dict[int, Hashable]] = {}
        pruned: list[tuple[Dot, Hashable]] = []
        for node, sub in self._m.items():
            floor = watermark.min(node)
            if floor <= 0:
                m[node] = sub
                continue
            keep: dict[int, Hashable] = {}
            for counter, key in sub.items():
                if counter <= floor:
                    pruned.append(((node, counter), key))
                else:
                    keep[counter] = key
            m[node] = keep if len(keep) != len(sub) else sub
        if not pruned:
            return PruneResult((), self)
        pruned.sort(key=lambda dk: dk[0])
        keys = tuple(dict.fromkeys(k for _, k in pruned))
        return PruneResult(keys, DotKeyMap._make(m))

    # -- dunder -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DotKeyMap):
            return NotImplemented
        return self._m == other._m

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"DotKeyMap({self.to_dict()!r})"
