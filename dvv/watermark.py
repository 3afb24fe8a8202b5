"""Watermarks: what each peer is known to hold of each node's dots (as in ``swc_watermark.erl``).

A :class:`Watermark` is a matrix of counters: the cell ``(node, peer)`` says "``peer`` is known to
hold every dot of ``node`` up to this counter" (the base of ``peer``'s node clock for ``node``).  Row
``node`` therefore lists every peer that must still receive ``node``'s dots, and :meth:`Watermark.min`
is the counter below which *every* peer holds all of ``node``'s dots: the dot-key map may forget those
dots, since no anti-entropy will ask for them again.  Cells only grow (maximum).  Rows of peers that
left the cluster are kept apart as *retired*: their dots still live in the data and still need
tracking, but the retired peer no longer holds or needs anything, so its column is removed from every
row.  An unknown row (or one without columns) has min 0: nothing can be pruned.  Immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dvv.dots import check_counter, check_node
from dvv.errors import InvalidClockError
from dvv.node_clock import NodeClock

__all__ = ["Watermark"]

Matrix = dict[str, dict[str, int]]


class Watermark:
    """Immutable counter matrix: active rows (one per cluster peer) and retired rows."""

    __slots__ = ("_active", "_retired")

    _active: Matrix
    _retired: Matrix

    def __init__(
        self,
        active: Mapping[str, Mapping[str, int]] | None = None,
        retired: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self._active = _clean(active or {})
        self._retired = _clean(retired or {})
        both = self._active.keys() & self._retired.keys()
        if both:
            raise InvalidClockError(f"rows cannot be both active and retired: {sorted(both)}")

    @classmethod
    def new(cls, peers: Iterable[str]) -> Watermark:
        """A full matrix for ``peers``: every peer must receive every peer's dots; all cells 0."""
        ps = sorted({check_node(p) for p in peers})
        return cls._make({p: dict.fromkeys(ps, 0) for p in ps}, {})

    @classmethod
    def _make(cls, active: Matrix, retired: Matrix) -> Watermark:
        wm = cls.__new__(cls)
        wm._active = dict(sorted(active.items()))
        wm._retired = dict(sorted(retired.items()))
        return wm

    # -- queries ----------------------------------------------------------------------------------
    def peers(self) -> tuple[str, ...]:
        """Ids of the active rows, sorted."""
        return tuple(self._active)

    def retired(self) -> tuple[str, ...]:
        """Ids of the retired rows, sorted."""
        return tuple(self._retired)

    def _row(self, node: str) -> dict[str, int]:
        row = self._active.get(node)
        if row is None:
            row = self._retired.get(node, {})
        return row

    def get(self, node: str, peer: str) -> int:
        """Cell ``(node, peer)``, 0 when absent."""
        return self._row(node).get(peer, 0)

    def row(self, node: str) -> dict[str, int]:
        """A copy of ``node``'s row (active or retired), empty when unknown."""
        return dict(self._row(node))

    def min(self, node: str) -> int:
        """The counter up to which every peer holds ``node``'s dots (0 if unknown or no columns)."""
        row = self._row(node)
        return min(row.values()) if row else 0

    # -- updates ----------------------------------------------------------------------------------
    def update_cell(self, node: str, peer: str, counter: int) -> Watermark:
        """Raise cell ``(node, peer)`` to ``counter`` (creates an active row/column if needed)."""
        check_node(node)
        check_node(peer)
        check_counter(counter)
        target_retired = node in self._retired
        source = self._retired if target_retired else self._active
        row = dict(source.get(node, {}))
        if peer in row and row[peer] >= counter:
            return self
        row[peer] = max(row.get(peer, 0), counter)
        matrix = dict(source)
        matrix[node] = dict(sorted(row.items()))
        if target_retired:
            return Watermark._make(self._active, matrix)
        return Watermark._make(matrix, self._retired)

    def update_peer(self, peer: str, node_clock: NodeClock) -> Watermark:
        """Record ``peer``'s node clock: in every row with a ``peer`` column, raise the cell to the base
        ``peer`` holds for that row's node."""
        check_node(peer)

        def up(matrix: Matrix) -> Matrix:
            out: Matrix = {}
            for node, row in matrix.items():
                if peer in row:
                    base = node_clock.entry(node)[0]
                    if base > row[peer]:
                        row = {**row, peer: base}
                out[node] = row
            return out

        return Watermark._make(up(self._active), up(self._retired))

    def left_join(self, other: Watermark) -> Watermark:
        """Take ``other``'s knowledge, only for rows and columns ``self`` already has (max per cell)."""

        def lj(mine: Matrix, theirs: Matrix) -> Matrix:
            out: Matrix = {}
            for node, row in mine.items():
                trow = theirs.get(node)
                if trow:
                    row = {p: max(c, trow.get(p, 0)) for p, c in row.items()}
                out[node] = row
            return out

        return Watermark._make(lj(self._active, other._active), lj(self._retired, other._retired))

    def add_peer(self, peer: str, peers: Iterable[str] = ()) -> Watermark:
        """A new cluster member: its row has columns for itself, ``peers`` and every active peer, and
        every existing row gets a ``peer`` column at 0 (it holds nothing yet, so nothing of anyone can
        be pruned until it has caught up)."""
        check_node(peer)
        cols = {peer, *self._active, *(check_node(p) for p in peers)}
        active = {n: _with_col(r, peer) for n, r in self._active.items()}
        retired = {n: _with_col(r, peer) for n, r in self._retired.items()}
        old = active.get(peer, {})
        active[peer] = dict(sorted({c: old.get(c, 0) for c in cols}.items()))
        return Watermark._make(active, retired)

    def retire_peer(self, peer: str) -> Watermark:
        """``peer`` left the cluster: drop its column everywhere; keep its row (its dots are still in the
        data) among the retired rows."""
        active = {n: _without_col(r, peer) for n, r in self._active.items() if n != peer}
        retired = {n: _without_col(r, peer) for n, r in self._retired.items()}
        if peer in self._active:
            retired[peer] = _without_col(self._active[peer], peer)
        return Watermark._make(active, retired)

    def remove_peer(self, peer: str) -> Watermark:
        """Forget ``peer`` entirely: its row (active or retired) and its column everywhere."""
        active = {n: _without_col(r, peer) for n, r in self._active.items() if n != peer}
        retired = {n: _without_col(r, peer) for n, r in self._retired.items() if n != peer}
        return Watermark._make(active, retired)

    def reset(self) -> Watermark:
        """Every cell back to 0 (same rows and columns)."""
        return Watermark._make(
            {n: dict.fromkeys(r, 0) for n, r in self._active.items()},
            {n: dict.fromkeys(r, 0) for n, r in self._retired.items()},
        )

    # -- dunder -----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Watermark):
            return NotImplemented
        return self._active == other._active and self._retired == other._retired

    def __hash__(self) -> int:
        return hash(
            (
                tuple((n, tuple(r.items())) for n, r in self._active.items()),
                tuple((n, tuple(r.items())) for n, r in self._retired.items()),
            )
        )

    def __repr__(self) -> str:
        if self._retired:
            return f"Watermark({self._active!r}, retired={self._retired!r})"
        return f"Watermark({self._active!r})"

    def active_rows(self) -> dict[str, dict[str, int]]:
        """A deep copy of the active rows."""
        return {n: dict(r) for n, r in self._active.items()}

    def retired_rows(self) -> dict[str, dict[str, int]]:
        """A deep copy of the retired rows."""
        return {n: dict(r) for n, r in self._retired.items()}


def _clean(matrix: Mapping[str, Mapping[str, int]]) -> Matrix:
    out: Matrix = {}
    for node, row in matrix.items():
        check_node(node)
        out[node] = dict(sorted((check_node(p), check_counter(c)) for p, c in row.items()))
    return dict(sorted(out.items()))


def _with_col(row: dict[str, int], peer: str) -> dict[str, int]:
    if peer in row:
        return row
    return dict(sorted({**row, peer: 0}.items()))


def _without_col(row: dict[str, int], peer: str) -> dict[str, int]:
    if peer not in row:
        return row
    return {p: c for p, c in row.items() if p != peer}
