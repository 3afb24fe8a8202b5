"""Version vectors.

A :class:`VersionVector` maps node ids to counters: ``{"a": 3}`` says "every event of ``a`` up to its
third".  Absent ids count as 0 and zero counters are never stored, so two vectors that describe the
same history are equal.  It is an immutable :class:`~collections.abc.Mapping`; every operation
returns a new vector.  ``merge`` is the pointwise maximum (least upper bound), ``glb`` the pointwise
minimum (greatest lower bound), ``descends`` is ``>=`` pointwise and ``dominates`` is strict
descent (``>=`` and not equal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from dvv.dots import Dot, check_counter, check_dot, check_node

__all__ = ["VersionVector"]


class VersionVector(Mapping[str, int]):
    """Immutable mapping node id -> counter, sorted by id, without zero entries."""

    __slots__ = ("_c", "_hash")

    _c: dict[str, int]
    _hash: int | None

    def __init__(self, counters: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = counters.items() if isinstance(counters, Mapping) else counters
        clean: dict[str, int] = {}
        for node, counter in items:
            check_node(node)
            check_counter(counter)
            if counter:
                clean[node] = max(clean.get(node, 0), counter)
        self._c = dict(sorted(clean.items()))
        self._hash = None

    @classmethod
    def _trusted(cls, counters: dict[str, int]) -> VersionVector:
        """Wrap an already clean dict (ids are str, counters > 0); sorts it."""
        vv = cls.__new__(cls)
        vv._c = dict(sorted(counters.items())) if len(counters) > 1 else counters
        vv._hash = None
        return vv

    # -- Mapping protocol -------------------------------------------------------------------------
    def __getitem__(self, node: str) -> int:
        return self._c[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._c)

    def __len__(self) -> int:
        return len(self._c)

    def __contains__(self, node: object) -> bool:
        return node in self._c

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VersionVector):
            return self._c == other._c
        if isinstance(other, Mapping):
            return self._c == {k: v for k, v in other.items() if v != 0}
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._c.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"VersionVector({self._c!r})"

    # -- queries ----------------------------------------------------------------------------------
    def counter(self, node: str) -> int:
        """Counter of ``node`` (0 when absent)."""
        return self._c.get(node, 0)

    def ids(self) -> tuple[str, ...]:
        """Node ids with a non-zero counter, sorted."""
        return tuple(self._c)

    def to_dict(self) -> dict[str, int]:
        """A fresh ``dict`` copy."""
        return dict(self._c)

    def covers(self, dot: Dot) -> bool:
        """True when ``dot`` is part of the history this vector describes."""
        return dot[1] <= self._c.get(dot[0], 0)

    def descends(self, other: Mapping[str, int]) -> bool:
        """``self >= other`` pointwise: self has seen everything other has."""
        c = self._c
        return all(v <= c.get(k, 0) for k, v in other.items())

    def dominates(self, other: Mapping[str, int]) -> bool:
        """Strict descent: ``self >= other`` and ``self != other``."""
        return self.descends(other) and self != other

    def concurrent(self, other: Mapping[str, int]) -> bool:
        """Neither descends the other."""
        other_vv = other if isinstance(other, VersionVector) else VersionVector(other)
        return not self.descends(other_vv) and not other_vv.descends(self)

    # -- constructors of new vectors --------------------------------------------------------------
    def merge(self, other: Mapping[str, int]) -> VersionVector:
        """Pointwise maximum (least upper bound)."""
        if not isinstance(other, VersionVector):
            other = VersionVector(other)
        if not other._c:
            return self
        if not self._c:
            return other
        out = dict(self._c)
        for k, v in other._c.items():
            if v > out.get(k, 0):
                out[k] = v
        return VersionVector._trusted(out)

    def glb(self, other: Mapping[str, int]) -> VersionVector:
        """Pointwise minimum (greatest lower bound); ids missing on either side drop out."""
        oc = other._c if isinstance(other, VersionVector) else dict(other)
        out = {k: min(v, oc[k]) for k, v in self._c.items() if oc.get(k, 0) > 0}
        return VersionVector._trusted(out)

    def increment(self, node: str) -> VersionVector:
        """A copy with ``node``'s counter increased by one."""
        check_node(node)
        out = dict(self._c)
        out[node] = out.get(node, 0) + 1
        return VersionVector._trusted(out)

    def add(self, dot: Dot) -> VersionVector:
        """A copy whose counter for ``dot``'s node is at least ``dot``'s counter."""
        node, counter = check_dot(dot)
        if counter <= self._c.get(node, 0):
            return self
        out = dict(self._c)
        out[node] = counter
        return VersionVector._trusted(out)

    def filter_ids(self, keep: Callable[[str, int], bool]) -> VersionVector:
        """A copy restricted to the node ids for which ``keep(node, counter)`` is true."""
        return VersionVector._trusted({k: v for k, v in self._c.items() if keep(k, v)})
