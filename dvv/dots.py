"""Dots, and sorted sets of dot counters.

A *dot* ``(node_id, counter)`` names one event: the ``counter``-th write coordinated by ``node_id``.
Counters start at 1; a node never reuses a counter, so a dot identifies one version of one value
cluster-wide.

:class:`Counters` is an immutable, sorted set of counters of one node, stored as runs (``range``
objects).  It behaves as a read-only sequence of ``int`` (``len``, iteration, indexing, ``in``) and
compares equal to a ``list``/``tuple``/``range`` with the same elements, but a run of 10,000 contiguous
counters costs one ``range`` instead of 10,000 Python ints.  ``list(c)`` materialises it.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import ClassVar, TypeAlias, overload

from dvv.errors import InvalidClockError

__all__ = ["Counters", "Dot", "NodeId", "bit_runs", "check_counter", "check_dot", "check_node"]

NodeId: TypeAlias = str
Dot: TypeAlias = tuple[str, int]

_ONES = re.compile("1+")


def check_node(node: object) -> str:
    """Return ``node`` if it is a valid node id (a ``str``), else raise :class:`InvalidClockError`."""
    if not isinstance(node, str):
        raise InvalidClockError(f"node id must be a str, not {type(node).__name__}: {node!r}")
    return node


def check_counter(counter: object, *, minimum: int = 0) -> int:
    """Return ``counter`` if it is an ``int`` (not ``bool``) >= ``minimum``, else raise."""
    if not isinstance(counter, int) or isinstance(counter, bool):
        raise InvalidClockError(f"counter must be an int, not {type(counter).__name__}: {counter!r}")
    if counter < minimum:
        raise InvalidClockError(f"counter must be >= {minimum}, got {counter}")
    return counter


def check_dot(dot: object) -> Dot:
    """Return ``dot`` as a ``(node, counter)`` tuple with counter >= 1, else raise."""
    if not isinstance(dot, tuple | list) or len(dot) != 2:
        raise InvalidClockError(f"a dot is a (node_id, counter) pair, got {dot!r}")
    return (check_node(dot[0]), check_counter(dot[1], minimum=1))


def bit_runs(bits: int, offset: int) -> list[range]:
    """Runs of set bits of ``bits`` as counters: bit ``i`` stands for counter ``offset + 1 + i``."""
    if bits == 0:
        return []
    if bits & (bits + 1) == 0:  # all ones: one run, the common case after normalisation gaps close
        return [range(offset + 1, offset + 1 + bits.bit_length())]
    text = format(bits, "b")[::-1]
    start = offset + 1
    return [range(start + m.start(), start + m.end()) for m in _ONES.finditer(text)]


class Counters(Sequence[int]):
    """Immutable sorted set of positive counters stored as non-adjacent, ascending ``range`` runs."""

    __slots__ = ("_len", "_runs", "_starts")
    __hash__: ClassVar[None]  # type: ignore[assignment]

    _runs: tuple[range, ...]
    _starts: list[int]
    _len: int

    def __init__(self, counters: Iterable[int] = ()) -> None:
        if isinstance(counters, Counters):
            runs: tuple[range, ...] = counters._runs
        elif isinstance(counters, range) and counters.step == 1:
            runs = (counters,) if len(counters) else ()
        else:
            runs = tuple(_runs_of_sorted(sorted({check_counter(c, minimum=1) for c in counters})))
        if runs and runs[0].start < 1:
            raise InvalidClockError("counters must be >= 1")
        self._set(runs)

    @classmethod
    def from_runs(cls, runs: Iterable[range]) -> Counters:
        """Build from ascending, non-overlapping ``step == 1`` ranges (adjacent runs are coalesced)."""
        merged: list[range] = []
        for run in runs:
            if run.step != 1:
                raise InvalidClockError(f"runs must have step 1, got {run!r}")
            if not run:
                continue
            if merged and run.start < merged[-1].stop:
                raise InvalidClockError(f"runs must be ascending and disjoint: {merged[-1]!r}, {run!r}")
            if merged and run.start == merged[-1].stop:
                merged[-1] = range(merged[-1].start, run.stop)
            else:
                merged.append(run)
        if merged and merged[0].start < 1:
            raise InvalidClockError("counters must be >= 1")
        obj = cls.__new__(cls)
        obj._set(tuple(merged))
        return obj

    def _set(self, runs: tuple[range, ...]) -> None:
        self._runs = runs
        self._starts = [r.start for r in runs]
        self._len = sum(len(r) for r in runs)

    @property
    def runs(self) -> tuple[range, ...]:
        """The ascending, disjoint, non-adjacent runs."""
        return self._runs

    def to_list(self) -> list[int]:
        """All counters as a list (materialises every int)."""
        out: list[int] = []
        for run in self._runs:
            out.extend(run)
        return out

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(self._runs)

    def __reversed__(self) -> Iterator[int]:
        return itertools.chain.from_iterable(reversed(r) for r in reversed(self._runs))

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect.bisect_right(self._starts, value) - 1
        return i >= 0 and value in self._runs[i]

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self.to_list()[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("Counters index out of range")
        for run in self._runs:
            if index < len(run):
                return run[index]
            index -= len(run)
        raise AssertionError("unreachable")  # pragma: no cover

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Counters):
            return self._runs == other._runs
        if isinstance(other, list | tuple | range):
            return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        if self._len <= 32:
            return f"Counters({self.to_list()!r})"
        parts = [str(r.start) if len(r) == 1 else f"{r.start}..{r.stop - 1}" for r in self._runs]
        return f"Counters<{', '.join(parts)}>"


def _runs_of_sorted(values: Sequence[int]) -> Iterator[range]:
    """Runs of a strictly ascending sequence of ints."""
    it = iter(values)
    try:
        start = prev = next(it)
    except StopIteration:
        return
    for value in it:
        if value != prev + 1:
            yield range(start, prev + 1)
            start = value
        prev = value
    yield range(start, prev + 1)
