"""Compact dotted version vector sets (DVVSet).

A :class:`Clock` keeps the concurrent values (siblings) of *one* key together with their causal
history, as in Almeida et al., "Scalable and Accurate Causality Tracking for Eventually Consistent
Stores" (DAIS 2014) and its reference implementation ``dvvset.erl``.  Each entry
``(id, counter, values)`` says "this clock has seen node ``id``'s events 1..``counter``" and holds the
values of the *latest* ``len(values)`` of those events, newest first: the i-th value (0-based) has dot
``(id, counter - i)``.  ``anonymous`` holds values that have no dot yet (a client's write before a
server gave it one, or the result of :func:`reconcile`).  :func:`sync` keeps a dotted value iff it is
in both clocks or its dot is not covered by the other clock's counter for that id, and keeps the
anonymous values of both sides unless one side's history is strictly less than the other's.  A
server stores a client's write with :func:`update_with` (the client's clock comes from
:func:`new_with_context` with the context it read, obtained by :func:`join`).  Values are opaque and
need not be hashable; they are compared with ``==`` only.

Typical flow on a coordinator node ``"a"``::

    ctx = join(stored)                                   # sent to the client with values(stored)
    stored = update_with(new_with_context(ctx, "v2"), stored, "a")
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from dvv.dots import check_counter, check_node
from dvv.errors import InvalidClockError
from dvv.version_vector import VersionVector

__all__ = [
    "Clock",
    "DVVSet",
    "Entry",
    "equal",
    "ids",
    "join",
    "last",
    "less",
    "lww",
    "map_values",
    "new",
    "new_list",
    "new_with_context",
    "reconcile",
    "size",
    "sync",
    "update",
    "update_with",
    "values",
]


class Entry(NamedTuple):
    """One node's part of a clock: events 1..``counter`` seen, values of the newest ones (newest first)."""

    id: str
    counter: int
    values: tuple[Any, ...]


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Clock:
    """Immutable DVVSet: ``entries`` sorted by id (counter >= max(1, len(values))) plus anonymous values."""

    entries: tuple[Entry, ...] = ()
    anonymous: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        entries: list[Entry] = []
        for raw in self.entries:
            if not isinstance(raw, tuple | list) or len(raw) != 3:
                raise InvalidClockError(f"an entry is (id, counter, values), got {raw!r}")
            node = check_node(raw[0])
            counter = check_counter(raw[1], minimum=1)
            if not isinstance(raw[2], tuple | list):
                raise InvalidClockError(f"entry values must be a tuple or list, got {raw[2]!r}")
            vals = tuple(raw[2])
            if len(vals) > counter:
                raise InvalidClockError(f"entry {node!r} has {len(vals)} values but counter {counter}")
            if entries and node <= entries[-1].id:
                raise InvalidClockError("entries must be sorted by id without duplicates")
            entries.append(Entry(node, counter, vals))
        if not isinstance(self.anonymous, tuple | list):
            raise InvalidClockError(f"anonymous values must be a tuple or list, got {self.anonymous!r}")
        object.__setattr__(self, "entries", tuple(entries))
        object.__setattr__(self, "anonymous", tuple(self.anonymous))

    @classmethod
    def _make(cls, entries: tuple[Entry, ...], anonymous: tuple[Any, ...]) -> Clock:
        """Internal constructor for already valid parts (no checks)."""
        clock = object.__new__(cls)
        object.__setattr__(clock, "entries", entries)
        object.__setattr__(clock, "anonymous", anonymous)
        return clock

    def __eq__(self, other: object) -> bool:
        """Entries must match exactly; anonymous values are compared as a multiset (order-free)."""
        if not isinstance(other, Clock):
            return NotImplemented
        return self.entries == other.entries and _same_multiset(self.anonymous, other.anonymous)

    def __hash__(self) -> int:
        return hash((tuple((e.id, e.counter, len(e.values)) for e in self.entries), len(self.anonymous)))

    def __repr__(self) -> str:
        ents = ", ".join(f"({e.id!r}, {e.counter}, {list(e.values)!r})" for e in self.entries)
        return f"Clock(entries=[{ents}], anonymous={list(self.anonymous)!r})"


DVVSet = Clock  # alias: the clock *is* the dotted version vector set

_EMPTY = Clock._make((), ())


def _same_multiset(a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    rest = list(b)
    for item in a:
        for i, other in enumerate(rest):
            if item == other:
                del rest[i]
                break
        else:
            return False
    return True


def _union(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    """The multiset union (each value as many times as the side that holds it most often: commutative,
    associative and idempotent, as sync must be): ``a``'s values, then ``b``'s beyond them (by equality, not
    hashing)."""
    out = list(a)
    unmatched = list(a)
    for item in b:
        if item in unmatched:
            unmatched.remove(item)
        else:
            out.append(item)
    return tuple(out)


def _check_clock(clock: object) -> Clock:
    if not isinstance(clock, Clock):
        raise InvalidClockError(f"expected a dvvset.Clock, got {type(clock).__name__}")
    return clock


# -- construction -------------------------------------------------------------------------------
def new(value: Any) -> Clock:
    """A clock with no causal history and ``value`` as its only (anonymous) value."""
    return Clock._make((), (value,))


def new_with_context(context: Mapping[str, int], value: Any) -> Clock:
    """A client clock: the causal history ``context`` (normally from :func:`join`) and one new value."""
    vv = context if isinstance(context, VersionVector) else VersionVector(context)
    return Clock._make(tuple(Entry(node, n, ()) for node, n in vv.items()), (value,))


def new_list(vals: Iterable[Any], context: Mapping[str, int] | None = None) -> Clock:
    """Like :func:`new_with_context` (or :func:`new` without a context) but with several values."""
    vv = VersionVector() if context is None else VersionVector(context)
    return Clock._make(tuple(Entry(node, n, ()) for node, n in vv.items()), tuple(vals))


# -- synchronisation ----------------------------------------------------------------------------
def sync(clocks: Iterable[Clock]) -> Clock:
    """Merge clocks, discarding causally obsolete values; ``sync([])`` is the empty clock."""
    result: Clock | None = None
    for clock in clocks:
        _check_clock(clock)
        result = clock if result is None else _sync2(result, clock)
    return _EMPTY if result is None else result


def _sync2(a: Clock, b: Clock) -> Clock:
    if less(a, b):
        anonymous = b.anonymous
    elif less(b, a):
        anonymous = a.anonymous
    else:
        anonymous = _union(a.anonymous, b.anonymous)
    return Clock._make(_sync_entries(a.entries, b.entries), anonymous)


def _sync_entries(e1: tuple[Entry, ...], e2: tuple[Entry, ...]) -> tuple[Entry, ...]:
    if not e1:
        return e2
    if not e2:
        return e1
    out: list[Entry] = []
    i = j = 0
    while i < len(e1) and j < len(e2):
        x, y = e1[i], e2[j]
        if x.id < y.id:
            out.append(x)
            i += 1
        elif x.id > y.id:
            out.append(y)
            j += 1
        else:
            out.append(_merge_entry(x, y))
            i += 1
            j += 1
    out.extend(e1[i:])
    out.extend(e2[j:])
    return tuple(out)


def _merge_entry(x: Entry, y: Entry) -> Entry:
    """Same id: keep the larger counter; a value survives unless the other side covers it and lacks it."""
    if x.counter < y.counter:
        x, y = y, x
    # x.counter >= y.counter: y's values are all covered by x's counter, so they only survive when
    # x holds them too; x's values survive iff their dot is above y's oldest retained dot range.
    if x.counter - len(x.values) >= y.counter - len(y.values):
        return x
    return Entry(x.id, x.counter, x.values[: x.counter - y.counter + len(y.values)])


def less(a: Clock, b: Clock) -> bool:
    """True iff ``a``'s causal history is strictly contained in ``b``'s (values are ignored)."""
    return _greater(b.entries, a.entries)


def _greater(e1: tuple[Entry, ...], e2: tuple[Entry, ...]) -> bool:
    """``e1`` covers ``e2`` and strictly more (counters are always >= 1)."""
    strict = False
    i = j = 0
    n1, n2 = len(e1), len(e2)
    while True:
        if j == n2:
            return strict or i < n1
        if i == n1:
            return False
        x, y = e1[i], e2[j]
        if x.id == y.id:
            if x.counter < y.counter:
                return False
            if x.counter > y.counter:
                strict = True
            i += 1
            j += 1
        elif x.id < y.id:
            strict = True
            i += 1
        else:
            return False


def equal(a: Clock, b: Clock) -> bool:
    """Same causal history and same number of values per entry (values and anonymous ignored)."""
    return len(a.entries) == len(b.entries) and all(
        x.id == y.id and x.counter == y.counter and len(x.values) == len(y.values)
        for x, y in zip(a.entries, b.entries, strict=True)
    )


def join(clock: Clock) -> VersionVector:
    """The causal history of ``clock`` as a version vector (the context handed to clients)."""
    return VersionVector._trusted({e.id: e.counter for e in _check_clock(clock).entries})


# -- writes -------------------------------------------------------------------------------------
def _single_value(clock: Clock, fn: str) -> Any:
    if len(_check_clock(clock).anonymous) != 1:
        raise InvalidClockError(
            f"{fn} needs a client clock with exactly one anonymous value (from new/new_with_context),"
            f" got {len(clock.anonymous)}"
        )
    return clock.anonymous[0]


def _event(entries: tuple[Entry, ...], node: str, value: Any) -> tuple[Entry, ...]:
    check_node(node)
    pos = bisect.bisect_left([e.id for e in entries], node)
    if pos < len(entries) and entries[pos].id == node:
        old = entries[pos]
        return (*entries[:pos], Entry(node, old.counter + 1, (value, *old.values)), *entries[pos + 1 :])
    return (*entries[:pos], Entry(node, 1, (value,)), *entries[pos:])


def update(clock: Clock, node: str) -> Clock:
    """Give the client clock's single anonymous value a new dot on ``node`` (no server state merged)."""
    value = _single_value(clock, "update")
    return Clock._make(_event(clock.entries, node, value), ())


def update_with(client_clock: Clock, server_clock: Clock, node: str) -> Clock:
    """Store a client write on ``node``: sync the client's history with the server clock, then give the
    client's value a new dot on ``node``.  Server values the client had seen are discarded; concurrent
    ones (and surviving anonymous values) stay as siblings."""
    value = _single_value(client_clock, "update_with")
    synced = _sync2(Clock._make(client_clock.entries, ()), _check_clock(server_clock))
    return Clock._make(_event(synced.entries, node, value), synced.anonymous)


# -- queries ------------------------------------------------------------------------------------
def values(clock: Clock) -> list[Any]:
    """All values: anonymous ones first, then each entry's values (entries by id, newest first)."""
    out = list(_check_clock(clock).anonymous)
    for e in clock.entries:
        out.extend(e.values)
    return out


def size(clock: Clock) -> int:
    """Number of values, anonymous included."""
    return len(_check_clock(clock).anonymous) + sum(len(e.values) for e in clock.entries)


def ids(clock: Clock) -> list[str]:
    """Node ids of the entries, sorted."""
    return [e.id for e in _check_clock(clock).entries]


def map_values(fn: Callable[[Any], Any], clock: Clock) -> Clock:
    """The same clock with ``fn`` applied to every value."""
    return Clock._make(
        tuple(Entry(e.id, e.counter, tuple(fn(v) for v in e.values)) for e in _check_clock(clock).entries),
        tuple(fn(v) for v in clock.anonymous),
    )


# -- reconciliation -----------------------------------------------------------------------------
def _winner(clock: Clock, key: Callable[[Any], Any]) -> tuple[Any, int, int]:
    """(value, entry index or -1 for anonymous, index in its tuple); ties go to the first in values()."""
    best: tuple[Any, int, int] | None = None
    best_key: Any = None
    for idx, v in enumerate(_check_clock(clock).anonymous):
        k = key(v)
        if best is None or best_key < k:
            best, best_key = (v, -1, idx), k
    for ei, e in enumerate(clock.entries):
        for vi, v in enumerate(e.values):
            k = key(v)
            if best is None or best_key < k:
                best, best_key = (v, ei, vi), k
    if best is None:
        raise InvalidClockError("the clock holds no value")
    return best


def last(clock: Clock, key: Callable[[Any], Any]) -> Any:
    """The value with the greatest ``key(value)`` (first in :func:`values` order on ties)."""
    return _winner(clock, key)[0]


def lww(clock: Clock, key: Callable[[Any], Any]) -> Clock:
    """Last-writer-wins: keep only the value with the greatest ``key(value)``, same causal history.

    When the winner is the newest value of its entry it keeps its original dot (the result is a server
    clock).  A winner that is anonymous, or an older sibling whose dot the compact form cannot keep
    alone, becomes the single anonymous value, as with :func:`reconcile`; store it with :func:`update`.
    """
    value, ei, vi = _winner(clock, key)
    if ei >= 0 and vi == 0:
        entries = tuple(Entry(e.id, e.counter, (value,) if i == ei else ()) for i, e in enumerate(clock.entries))
        return Clock._make(entries, ())
    return new_with_context(join(clock), value)


def reconcile(clock: Clock, fn: Callable[[list[Any]], Any]) -> Clock:
    """One anonymous value ``fn(values(clock))`` over the same causal history (the clock is not
    advanced: store the result with :func:`update` / :func:`update_with` to give it a dot)."""
    return new_with_context(join(clock), fn(values(clock)))
