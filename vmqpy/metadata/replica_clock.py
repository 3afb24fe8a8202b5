"""A replica's node clock: every dot it has seen, for all keys at once, and the own counters it issues.

The clock is a :class:`dvv.NodeClock`.  Its own entry may lag behind the own counters the write path
issued: they are folded in when the clock is read (:meth:`ReplicaClock.current`), so a write only bumps
two numbers.  The base (the contiguous part of every entry) is kept as a plain dict, always current.

Own counters are *reserved* in blocks of :data:`RESERVE_BLOCK` before use (the reservation is persisted),
so a restarted node never reuses a counter it may have handed out before a crash.  After a restore, the
own counters below the reservation that no row holds are *holes*: every member is asked for them first,
then they are declared unused (the own entry becomes contiguous again, which GC needs).

:meth:`ReplicaClock.plausible` refuses incoming dots so far ahead of what the clock knows of their node
that holding them would cost an unbounded bitmap (docs/replication.md section 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dvv.dots import Counters, Dot
from dvv.node_clock import NodeClock, normalise
from dvv.version_vector import VersionVector

__all__ = ["RESERVE_BLOCK", "ReplicaClock", "add_counters", "add_dots", "add_runs", "clock_of_base"]

RESERVE_BLOCK = 1000  # own counters are reserved in blocks, so a restart never reuses one


def add_dots(clock: NodeClock, dots: Iterable[Dot]) -> NodeClock:
    """``clock`` plus every dot of ``dots`` (valid dots: read from this replica's own rows), each node's bitmap
    built in one pass. Same result as ``clock.add_all(dots)``, which ORs one bit at a time into a bitmap that,
    with gaps below, grows to every counter of the node: quadratic at a restart on a million keys."""
    by_node: dict[str, list[int]] = {}
    for node, counter in dots:
        by_node.setdefault(node, []).append(counter)
    return add_counters(clock, by_node)


def add_counters(clock: NodeClock, by_node: Mapping[str, Iterable[int]]) -> NodeClock:
    """:func:`add_dots` of the dots ``(node, counter)`` for every counter of ``by_node[node]`` (counters from 1)."""
    entries = dict(clock.items())
    for node, counters in by_node.items():
        base, bitmap = entries.get(node, (0, 0))
        offsets = [counter - base - 1 for counter in counters if counter > base]
        if not offsets:
            continue
        bits = bytearray((max(offsets) >> 3) + 1)
        for offset in offsets:
            bits[offset >> 3] |= 1 << (offset & 7)
        entries[node] = normalise(base, bitmap | int.from_bytes(bits, "little"))
    return NodeClock(entries)


def add_runs(clock: NodeClock, runs_by_node: Mapping[str, Counters]) -> NodeClock:
    """``clock`` plus every counter of the given runs (cost per run, not per counter)."""
    entries = dict(clock.items())
    for node, counters in runs_by_node.items():
        base, bitmap = entries.get(node, (0, 0))
        for run in counters.runs:
            lo, hi = run.start, run.stop - 1
            if hi <= base:
                continue
            if lo <= base + 1:
                bitmap >>= hi - base
                base = hi
            else:
                bitmap |= ((1 << (hi - lo + 1)) - 1) << (lo - base - 1)
            base, bitmap = normalise(base, bitmap)
        entries[node] = (base, bitmap)
    return NodeClock(entries)


def clock_of_base(base: Mapping[str, int]) -> NodeClock:
    """The node clock holding exactly the contiguous counters ``base`` names."""
    return NodeClock({n: (c, 0) for n, c in base.items()})


class ReplicaClock:
    """The node clock of replica ``node``, its own counters, reservation and holes."""

    __slots__ = ("_base_vv", "_clock", "_own", "_own_fast", "_own_mat", "asking", "base", "holes", "node", "reserved")

    def __init__(self, node: str) -> None:
        self.node = node
        self.holes: Counters | None = None  # after a restore: own counters no row holds
        self.asking: set[str] = set()  # members to exchange with before the holes count as unused
        self._clock = NodeClock()
        self._own = 0  # highest own counter issued
        self._own_mat = 0  # highest own counter in self._clock
        self._own_fast = True  # own entry contiguous: a write only bumps _own and base
        self.base: dict[str, int] = {}
        self._base_vv: VersionVector | None = VersionVector()
        self.reserved = 0

    def set(self, clock: NodeClock) -> None:
        """Replace the (materialised) node clock; recompute the base and the own-counter shortcut."""
        self._clock = clock
        self.base = clock.base().to_dict()
        self._base_vv = None
        base, bitmap = clock.entry(self.node)
        self._own = self._own_mat = base + bitmap.bit_length()
        self._own_fast = bitmap == 0 and self.holes is None

    def current(self) -> NodeClock:
        """The node clock, with every own counter issued."""
        if self._own > self._own_mat:
            runs = {self.node: Counters(range(self._own_mat + 1, self._own + 1))}
            self._clock = add_runs(self._clock, runs)
            self._own_mat = self._own
        return self._clock

    def base_vv(self) -> VersionVector:
        """The node clock's base as a version vector (cached)."""
        if self._base_vv is None:
            self._base_vv = VersionVector(self.base)
        return self._base_vv

    def issue(self) -> tuple[int, int | None]:
        """The next own counter, and the new reservation to persist before it is used (None: the counter is
        below the current one)."""
        if self._own_fast:
            counter = self._own + 1
            self._own = counter
            self.base[self.node] = counter
            self._base_vv = None
        else:
            counter, clock = self.current().event(self.node)
            self.set(clock)
        if counter < self.reserved:
            return counter, None
        self.reserved = counter + RESERVE_BLOCK  # counters below it may be used, never itself
        return counter, self.reserved

    def unseen(self, dots: Iterable[Dot]) -> list[Dot]:
        """The dots the clock does not hold, sorted (once each)."""
        clock = self.current()
        return sorted({d for d in dots if d not in clock})

    def see(self, dots: Iterable[Dot]) -> None:
        """Add ``dots`` to the clock."""
        self.set(self.current().add_all(dots))

    def see_runs(self, runs_by_node: Mapping[str, Counters]) -> None:
        """Add every counter of the given runs to the clock."""
        self.set(add_runs(self.current(), runs_by_node))

    def plausible(self, runs: Iterable[tuple[str, int, int]], max_ahead: int) -> bool:
        """Would adding these counter runs ``(node, first, last)``, in order, keep the node clock small?  Each
        node's bitmap (the counters seen beyond its contiguous base) must stay within ``max_ahead`` bits, and
        one message may grow the bitmaps by at most ``max_ahead`` bits in all: a frame naming a counter of
        2**40 would otherwise make this node allocate 2**40 bits.  Legitimate catch-up comes gaps first and
        in order, so it extends bases rather than bitmaps."""
        clock = self.current()
        scratch: dict[str, list[int]] = {}  # node -> [base, top, bitmap bits at the start, most bits since]
        for node, first, last in runs:
            entry = scratch.get(node)
            if entry is None:
                base, bitmap = clock.entry(node)
                bits = bitmap.bit_length()
                entry = scratch[node] = [base, base + bits, bits, bits]
            base, top = entry[0], entry[1]
            if first <= base + 1:
                base = max(base, last)
                top = max(top, base)
            else:
                top = max(top, last)
            if top - base > max_ahead:
                return False
            entry[0], entry[1], entry[3] = base, top, max(entry[3], top - base)
        return sum(e[3] - e[2] for e in scratch.values()) <= max_ahead

    # -- restart ---------------------------------------------------------------------------------------
    def restore(self, clock: NodeClock, reserved: int, members: Iterable[str]) -> None:
        """Start from ``clock`` (the checkpoint plus every dot the rows hold) and the saved reservation: the
        next own counter is above it; the own counters below it that ``clock`` lacks are holes to ask
        ``members`` for (none to ask: declared unused at once)."""
        node = self.node
        self.reserved = reserved
        own_base, own_bitmap = clock.entry(node)
        own_max = own_base + own_bitmap.bit_length()
        # Own counters below the reservation that no row holds may have been handed out and lost in a
        # crash (a peer may hold them): fetch them from every member before declaring them unused.
        top = max(own_max, reserved - 1)
        if top > own_base:
            holes = NodeClock({node: (top, 0)}).missing_dots(clock).get(node)
            if holes:
                self.holes = holes
                self.asking = set(members)
        if reserved > own_max:
            clock = clock.add((node, reserved))  # never used: the next own counter is above it
        self.set(clock)
        if self.holes is not None and not self.asking:
            self._fill_holes()

    def asked(self, peer: str) -> NodeClock | None:
        """An exchange with ``peer`` completed.  Returns the clock to checkpoint when that declared the holes
        unused (every member was asked)."""
        if self.holes is None:
            return None
        self.asking.discard(peer)
        return None if self.asking else self._fill_holes()

    def keep_asking(self, members: Iterable[str]) -> NodeClock | None:
        """Membership changed: only ``members`` are still to be asked.  Returns the clock to checkpoint when
        that declared the holes unused."""
        if self.holes is None:
            return None
        self.asking &= set(members)
        return None if self.asking else self._fill_holes()

    def _fill_holes(self) -> NodeClock | None:
        """Every member was asked for them: own counters still missing were never used (or nobody has
        them): mark them as seen so this node's entry becomes contiguous again (GC needs that)."""
        holes = self.holes
        self.holes = None
        self.asking = set()
        if holes is None:
            return None
        self.set(add_runs(self.current(), {self.node: holes}))
        return self._clock
