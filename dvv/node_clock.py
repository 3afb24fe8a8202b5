"""Node clocks: bitmapped version vectors (server-wide clocks).

A :class:`NodeClock` records every dot a node has seen, for all keys at once.  Per node id it keeps a
pair ``(base, bitmap)``: all counters ``1..base`` are present, and bit ``i`` of ``bitmap`` says
counter ``base + 1 + i`` is present too.  The pair is always *normalised*: bit 0 is clear (otherwise
``base`` would advance), so ``(5, 0b11)`` is stored as ``(7, 0)``.  Bitmaps are plain Python ints, so
an entry costs O(gap) bits no matter how many dots it covers.  An id may be present with ``(0, 0)``:
it is then *tracked* (it matters to :meth:`NodeClock.join`) but has no dots yet.  ``merge`` is the set
union of dots over all ids; ``join`` is the same restricted to the ids ``self`` already tracks;
``missing_dots`` lists, per id, the dots of ``self`` that ``other`` lacks, as :class:`~dvv.dots.Counters`
(runs, so a gap of 10,000 contiguous dots costs one ``range``).  Immutable: every operation returns a
new clock (or ``self`` when nothing changes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from dvv.dots import Counters, Dot, bit_runs, check_counter, check_dot, check_node
from dvv.errors import InvalidClockError
from dvv.version_vector import VersionVector

__all__ = ["Entry", "NodeClock", "normalise"]

Entry = tuple[int, int]  # (base, bitmap)


def normalise(base: int, bitmap: int) -> Entry:
    """Move the bitmap's contiguous low ones into the base: ``normalise(5, 0b11) == (7, 0)``."""
    if bitmap & 1:
        ones = (~bitmap & (bitmap + 1)).bit_length() - 1  # number of trailing one bits
        return base + ones, bitmap >> ones
    return base, bitmap


def _union(x: Entry, y: Entry) -> Entry:
    (n1, b1), (n2, b2) = x, y
    if n1 < n2:
        n1, b1, n2, b2 = n2, b2, n1, b1
    return normalise(n1, b1 | (b2 >> (n1 - n2)))


class NodeClock:
    """Immutable bitmapped version vector: node id -> normalised ``(base, bitmap)``, sorted by id."""

    __slots__ = ("_e", "_hash")

    _e: dict[str, Entry]
    _hash: int | None

    def __init__(self, entries: Mapping[str, Entry] | Iterable[tuple[str, Entry]] = ()) -> None:
        items = entries.items() if isinstance(entries, Mapping) else entries
        clean: dict[str, Entry] = {}
        for node, entry in items:
            check_node(node)
            if not isinstance(entry, tuple | list) or len(entry) != 2:
                raise InvalidClockError(f"a node clock entry is (base, bitmap), got {entry!r}")
            pair = normalise(check_counter(entry[0]), check_counter(entry[1]))
            clean[node] = _union(clean[node], pair) if node in clean else pair
        self._e = dict(sorted(clean.items()))
        self._hash = None

    @classmethod
    def _trusted(cls, entries: dict[str, Entry], *, sort: bool = True) -> NodeClock:
        clock = cls.__new__(cls)
        clock._e = dict(sorted(entries.items())) if sort and len(entries) > 1 else entries
        clock._hash = None
        return clock

    @classmethod
    def with_ids(cls, ids: Iterable[str]) -> NodeClock:
        """A clock tracking ``ids`` with no dots."""
        return cls((check_node(i), (0, 0)) for i in ids)

    # -- queries ----------------------------------------------------------------------------------
    def ids(self) -> tuple[str, ...]:
        """Tracked node ids, sorted."""
        return tuple(self._e)

    def entry(self, node: str) -> Entry:
        """``(base, bitmap)`` of ``node`` (``(0, 0)`` when absent)."""
        return self._e.get(node, (0, 0))

    def items(self) -> Iterator[tuple[str, Entry]]:
        """``(node, (base, bitmap))`` pairs, sorted by node."""
        return iter(self._e.items())

    def __len__(self) -> int:
        return len(self._e)

    def contains(self, dot: Dot) -> bool:
        """True when the clock holds ``dot``."""
        node, counter = dot
        base, bitmap = self._e.get(node, (0, 0))
        return counter <= base or bool((bitmap >> (counter - base - 1)) & 1)

    __contains__ = contains

    def base(self) -> VersionVector:
        """The contiguous part as a version vector: node -> base."""
        return VersionVector._trusted({n: b for n, (b, _) in self._e.items() if b})

    def values(self, node: str) -> Counters:
        """Every counter of ``node`` held by this clock."""
        base, bitmap = self._e.get(node, (0, 0))
        return Counters.from_runs([range(1, base + 1), *bit_runs(bitmap, base)])

    def dots(self) -> Iterator[Dot]:
        """Every dot held, node by node (materialises one tuple per dot: for tests and small clocks)."""
        for node in self._e:
            for counter in self.values(node):
                yield (node, counter)

    def missing_dots(self, other: NodeClock, ids: Iterable[str] | None = None) -> dict[str, Counters]:
        """Per node in ``ids`` (default: all of self's), the dots self holds that ``other`` lacks.

        Nodes with nothing missing are left out.  Cost is O(ids + runs), independent of how many
        contiguous dots are missing.
        """
        wanted = self._e.keys() if ids is None else ids
        out: dict[str, Counters] = {}
        for node in wanted:
            mine = self._e.get(node)
            if mine is None:
                continue
            runs = _subtract(mine, other._e.get(node, (0, 0)))
            if runs:
                out[node] = Counters.from_runs(runs)
        return out

    # -- updates ----------------------------------------------------------------------------------
    def add(self, dot: Dot) -> NodeClock:
        """Add one dot; a counter of 0 only starts tracking the node."""
        node = check_node(dot[0])
        counter = check_counter(dot[1])
        old = self._e.get(node)
        base, bitmap = (0, 0) if old is None else old
        if counter <= base:
            if old is not None:
                return self
            new: Entry = (base, bitmap)
        else:
            new = normalise(base, bitmap | (1 << (counter - base - 1)))
            if new == old:
                return self
        entries = dict(self._e)
        entries[node] = new
        return NodeClock._trusted(entries, sort=old is None)

    def add_all(self, dots: Iterable[Dot]) -> NodeClock:
        """Add many dots at once."""
        entries = dict(self._e)
        for dot in dots:
            node, counter = check_dot(dot)
            base, bitmap = entries.get(node, (0, 0))
            if counter > base:
                entries[node] = normalise(base, bitmap | (1 << (counter - base - 1)))
            elif node not in entries:
                entries[node] = (base, bitmap)
        return NodeClock._trusted(entries)

    def event(self, node: str) -> tuple[int, NodeClock]:
        """A fresh counter for ``node`` (one past the highest known) and the clock holding it."""
        base, bitmap = self._e.get(check_node(node), (0, 0))
        counter = base + bitmap.bit_length() + 1
        return counter, self.add((node, counter))

    def merge(self, other: NodeClock) -> NodeClock:
        """Union of the dots of both clocks, over all ids."""
        if not other._e:
            return self
        if not self._e:
            return other
        entries = dict(self._e)
        for node, pair in other._e.items():
            mine = entries.get(node)
            entries[node] = pair if mine is None else _union(mine, pair)
        return NodeClock._trusted(entries)

    def join(self, other: NodeClock) -> NodeClock:
        """Union of dots, only for the ids ``self`` already tracks."""
        entries = dict(self._e)
        for node, mine in self._e.items():
            theirs = other._e.get(node)
            if theirs is not None:
                entries[node] = _union(mine, theirs)
        return NodeClock._trusted(entries, sort=False)

    def restrict(self, ids: Iterable[str]) -> NodeClock:
        """Only the entries of ``ids``."""
        keep = set(ids)
        return NodeClock._trusted({n: e for n, e in self._e.items() if n in keep}, sort=False)

    # -- dunder -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeClock):
            return NotImplemented
        return self._e == other._e

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._e.items()))
        return self._hash

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: ({b}, {bin(m)})" for n, (b, m) in self._e.items())
        return f"NodeClock({{{inner}}})"


def _subtract(mine: Entry, theirs: Entry) -> list[range]:
    """Runs of counters in ``mine`` and not in ``theirs``."""
    n1, b1 = mine
    n2, b2 = theirs
    if n1 <= n2:
        # Only my bitmap can hold dots above their base.
        shift = n2 - n1
        return bit_runs((b1 >> shift) & ~b2, n2)
    width = n1 - n2
    runs: list[range] = []
    # (n2, n1]: all mine; theirs only holds what their bitmap marks in that window.
    low = b2 & ((1 << width) - 1)
    start = n2 + 1
    for held in bit_runs(low, n2):
        if held.start > start:
            runs.append(range(start, held.start))
        start = held.stop
    if start <= n1:
        runs.append(range(start, n1 + 1))
    # Above n1: my bitmap minus their bitmap seen from n1.
    above = bit_runs(b1 & ~(b2 >> width), n1)
    if above and runs and runs[-1].stop == above[0].start:
        runs[-1] = range(runs[-1].start, above[0].stop)
        above = above[1:]
    runs.extend(above)
    return runs
