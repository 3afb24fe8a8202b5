"""One node's replica of the metadata store: a sans-I/O state machine (server-wide clocks).

Data per node (see ``docs/replication.md`` for the full design):

* per key, a dotted causal container (:class:`dvv.CausalContainer`): the live versions ``dot -> value``
  and a context, stored *stripped* of what the node clock's base already says;
* a node clock (:class:`dvv.NodeClock`): every dot this replica has seen, for all keys at once;
* a dot -> key index (a plain mutable ``dict`` per origin node, kept here instead of the immutable
  :class:`dvv.DotKeyMap` so a write costs O(1)): the dots of every live version (never collected, so a
  new replica can always be served) plus the dots that were superseded or deleted, until every peer
  holds them (those are the only "tombstones");
* a watermark (:class:`dvv.Watermark`): what each peer is known to hold, which decides what the index
  may forget.

Every method that changes something returns a list of outputs for the driver: :class:`Send` (a
message to one peer), :class:`Changed` (a key's resolved value changed), :class:`Persist` (a storage
write; apply them in order) and :class:`Logged` (a replication-log event).  Time is always passed in
(``now``, seconds) and randomness comes from the seeded ``rng``: given the same inputs, the replica
produces the same outputs.

Driver contract: apply ``Persist`` outputs in the order given, and make them durable before a later
``SyncRequest``/``SyncReply`` leaves the node (those carry the node clock, and peers garbage-collect
on what the clock claims).  After every call, re-read :meth:`Replica.next_deadline`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import msgpack

import dvv
from dvv.causal_container import CausalContainer
from dvv.dots import Counters, Dot
from dvv.node_clock import NodeClock, normalise
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark
from vmqpy.metadata import messages
from vmqpy.metadata.errors import DecodeError, InvalidKeyError, MetadataError
from vmqpy.metadata.exchange import Exchange, plan_reply
from vmqpy.metadata.hlc import HybridClock, Stamp
from vmqpy.metadata.messages import (
    Key,
    Message,
    Push,
    SyncObject,
    SyncReject,
    SyncReply,
    SyncRequest,
    check_key,
    pack_container,
    pack_dot,
    pack_full_key,
    pack_single,
    view_digest,
)
from vmqpy.metadata.resolve import DEFAULT_RESOLVER, Resolver, stamp_list

if TYPE_CHECKING:  # randomness is an input: only the type of the generator is named here
    import random

__all__ = [
    "META_CLOCK",
    "META_RESERVED",
    "META_WATERMARK",
    "T_DOTS",
    "T_META",
    "T_OBJ",
    "Changed",
    "Key",
    "Logged",
    "Output",
    "Persist",
    "Replica",
    "Send",
]

FullKey = tuple[str, Key]

T_OBJ = "md_obj"  # pack_full_key(prefix, key) -> pack_container(stripped container)
T_DOTS = "md_dots"  # pack_dot(dot) -> pack_full_key(prefix, key): superseded/deleted dots awaiting GC
T_META = "md_meta"  # META_* -> dvv.to_bytes(NodeClock | Watermark) or msgpack int
META_CLOCK = b"clock"
META_WATERMARK = b"watermark"
META_RESERVED = b"reserved"

RESERVE_BLOCK = 1000  # own counters are reserved in blocks, so a restart never reuses one

_NO_CTX = VersionVector()


class _Obj:
    """A key's object at rest: its versions (sorted by dot) and its *stripped* context.

    The store keeps this light record rather than a :class:`CausalContainer` so the write path does not
    pay for building (and validating) one per write; merges go through ``CausalContainer.sync``."""

    __slots__ = ("ctx", "versions")

    def __init__(self, versions: tuple[tuple[Dot, Any], ...], ctx: VersionVector) -> None:
        self.versions = versions
        self.ctx = ctx

    @classmethod
    def of(cls, container: CausalContainer) -> _Obj:
        return cls(container.items(), container.context())

    def dots(self) -> tuple[Dot, ...]:
        return tuple(d for d, _ in self.versions)

    def values(self) -> list[Any]:
        return [v for _, v in self.versions]

    def items(self) -> tuple[tuple[Dot, Any], ...]:
        return self.versions

    def context(self) -> VersionVector:
        return self.ctx

    def container(self) -> CausalContainer:
        return CausalContainer(self.versions, self.ctx)

    def is_empty(self) -> bool:
        return not self.versions and not self.ctx

    def __len__(self) -> int:
        return len(self.versions)

    def __bool__(self) -> bool:  # a tombstone (no version) is still an object
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Obj):
            return NotImplemented
        return self.versions == other.versions and self.ctx == other.ctx

    __hash__ = None  # type: ignore[assignment]


_EMPTY = _Obj((), _NO_CTX)


# -- outputs ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class Send:
    """Send ``message`` to ``peer``."""

    peer: str
    message: Message


@dataclass(slots=True)
class Changed:
    """The resolved value of ``prefix``/``key`` changed (None = absent), by a local or a remote write."""

    prefix: str
    key: Key
    old: Any
    new: Any


@dataclass(slots=True)
class Persist:
    """A storage write in ``table`` (all start with ``md_``); ``value`` None deletes the row."""

    table: str
    key: bytes
    value: bytes | None


@dataclass(slots=True)
class Logged:
    """A replication-log event: ``md_write``, ``md_apply``, ``md_exchange`` or ``md_gc``."""

    event: str
    fields: dict[str, Any]


Output = Send | Changed | Persist | Logged


def _pack_value(value: Any) -> bytes:
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True, default=_encode_extra)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidValueError(f"values must be msgpack-serialisable: {exc}") from exc
    return packed


def _encode_extra(obj: Any) -> Any:
    if isinstance(obj, Stamp):
        return obj.to_list()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


class InvalidValueError(MetadataError, TypeError):
    """A value cannot be stored (it is not msgpack-serialisable)."""


def _add_runs(clock: NodeClock, runs_by_node: Mapping[str, Counters]) -> NodeClock:
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


def _clock_of_base(base: Mapping[str, int]) -> NodeClock:
    return NodeClock({n: (c, 0) for n, c in base.items()})


class Replica:
    """One node's replica (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = (T_OBJ, T_DOTS, T_META)
    # The two rules that keep a deleted key dead under uneven membership changes and crashes
    # (docs/replication.md sections 4 and 7).  Both are switchable only so that the model checker and the
    # simulation can show what the old rules did (tests/sim/legacy.py); production never turns them off.
    GC_NEEDS_AGREED_VIEWS: ClassVar[bool] = True  # watermark cells only from peers that share our view
    CHECKPOINT_GAPS_AT_ONCE: ClassVar[bool] = True  # gap dots are checkpointed before anything relies on them
    # A dot more than this many counters beyond what we know of its node is implausible (it would cost
    # MAX_AHEAD / 8 bytes of bitmap): the message carrying it is refused (docs/replication.md section 3).
    MAX_AHEAD: ClassVar[int] = 1 << 20

    def __init__(
        self,
        node_id: str,
        *,
        resolvers: Mapping[str, Resolver] | None = None,
        rng: random.Random,
        sync_interval: float = 1.0,
        exchange_timeout: float = 5.0,
        batch_size: int = 500,
        reply_bytes: int = 8 << 20,
        gc_interval: float | None = None,
        writeback: bool = True,
        writeback_delay: float | None = None,
        max_exchanges: int = 2,
    ) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise InvalidKeyError(f"node_id must be a non-empty str, got {node_id!r}")
        if batch_size < 1 or sync_interval <= 0 or exchange_timeout <= 0 or max_exchanges < 1 or reply_bytes < 1:
            raise ValueError(
                "batch_size, reply_bytes, sync_interval, exchange_timeout and max_exchanges must be positive"
            )
        self.node_id = node_id
        self.hlc = HybridClock(node_id)
        self._resolvers: dict[str, Resolver] = dict(resolvers or {})
        self._rng = rng
        self._interval = sync_interval
        self._timeout = exchange_timeout
        self._batch = batch_size
        self._reply_bytes = reply_bytes  # an anti-entropy reply stops adding keys at about this many bytes
        self._gc_interval = sync_interval if gc_interval is None else gc_interval
        self._writeback_enabled = writeback
        self._writeback_delay = sync_interval / 2 if writeback_delay is None else writeback_delay
        # causal state.  The node clock's own entry may lag behind the own counters issued by the write
        # path (``_own``): :meth:`_nc` folds them in before the clock is read.  ``_base_d`` is always
        # current (a plain dict: the write path updates it in place).
        self._own_holes: Counters | None = None  # after a restore: own counters no row holds
        self._holes_wait: set[str] = set()  # members to exchange with before the holes count as unused
        self._clock = NodeClock()
        self._own = 0  # highest own counter issued
        self._own_mat = 0  # highest own counter in self._clock
        self._own_fast = True  # own entry contiguous: a write only bumps _own and _base_d
        self._base_d: dict[str, int] = {}
        self._base_vv_cache: VersionVector | None = VersionVector()
        self._wm = Watermark.new([node_id])
        self._data: dict[str, dict[Key, _Obj]] = {}
        self._index: dict[str, dict[int, FullKey]] = {}
        self._cand: dict[str, list[int]] = {}  # per node: heap of indexed counters that are not live
        self._cand_count: dict[FullKey, int] = {}
        self._ctx_keys: dict[FullKey, None] = {}  # keys stored with a non-empty (stripped) context
        self._sib_keys: dict[FullKey, None] = {}  # keys with concurrent versions (siblings)
        self._dead: dict[FullKey, None] = {}  # keys stored with no version (a delete not yet stripped away)
        self._reserved = 0
        # membership
        self._peers: list[str] = []
        self._members: frozenset[str] = frozenset((node_id,))
        self._view = view_digest(self._members)  # sent with every exchange message
        self._reachable: frozenset[str] = frozenset()
        self._usable_cache: list[str] | None = None
        # timers and exchanges
        self._now = 0.0  # the last `now` passed in: timers and deadlines (a monotonic clock in the driver)
        self._wall = 0.0  # the last `wall` passed in (default: `now`): HLC stamps and log times only
        self._next_sync: float | None = None
        self._next_gc: float | None = None
        self._max_exchanges = max_exchanges
        self._exchanges: dict[str, Exchange] = {}  # running exchanges (this node pulling), one per peer
        self._queue: list[str] = []  # peers to exchange with as soon as possible
        self._round: set[str] = set()  # peers pulled from since the last periodic tick
        self._xid = 0
        self._writeback: dict[FullKey, None] = {}
        self._writeback_at: float | None = None  # when the pending write-backs run (siblings settle first)
        self._persisted_wm: Watermark | None = None
        self._wm_sent: dict[str, Watermark] = {}  # the watermark last sent to each peer
        self._reported: dict[str, NodeClock] = {}  # per peer: every dot its messages said it holds (any view)
        self._reports: Counter[str] = Counter()  # per peer: how many of its messages reported its clock
        self._stats: dict[str, int] = dict.fromkeys(
            (
                "puts",
                "deletes",
                "writebacks",
                "pushes_sent",
                "pushes_received",
                "objects_applied",
                "exchanges_started",
                "exchanges_completed",
                "exchanges_failed",
                "requests_served",
                "requests_rejected",
                "objects_served",
                "objects_received",
                "objects_repaired",
                "gap_dots",
                "gc_runs",
                "gc_dots_pruned",
                "gc_keys_deleted",
                "stale_replies",
                "views_differ",
                "implausible_refused",
                "pushes_refused",
            ),
            0,
        )

    # ================================================================================ restore
    @classmethod
    def restore(cls, node_id: str, rows: Mapping[str, list[tuple[bytes, bytes]]], **kwargs: Any) -> Replica:
        """Rebuild a replica from the rows its :class:`Persist` outputs wrote (``Storage.load`` per table).

        The node clock is the saved checkpoint plus every dot found in the objects and the index rows
        (so it never lags what the rows hold).  The next own counter is above the saved reservation,
        so a restarted node never reuses a counter it may have handed out before a crash; the own
        counters below it that no row holds are fetched from every member first, then declared unused.
        Raises :class:`DecodeError` for rows that are not ours.
        """
        r = cls(node_id, **kwargs)
        meta = dict(rows.get(T_META, []))
        clock = NodeClock()
        if META_CLOCK in meta:
            clock = _decode_dvv(meta[META_CLOCK], NodeClock)
        if META_WATERMARK in meta:
            r._wm = _decode_dvv(meta[META_WATERMARK], Watermark)
            r._persisted_wm = r._wm
            r._peers = sorted(p for p in r._wm.peers() if p != node_id)
            r._members = frozenset((node_id, *r._peers))
            r._view = view_digest(r._members)
        if META_RESERVED in meta:
            try:
                reserved = msgpack.unpackb(meta[META_RESERVED])
            except Exception as exc:
                raise DecodeError(f"bad reservation row: {exc}") from exc
            if not isinstance(reserved, int) or isinstance(reserved, bool) or reserved < 0:
                raise DecodeError("bad reservation row")
            r._reserved = reserved
        seen: list[Dot] = []
        for raw_key, raw_obj in rows.get(T_OBJ, []):
            prefix, key = messages.unpack_full_key(raw_key)
            obj = _Obj.of(messages.unpack_container(raw_obj))
            if obj.is_empty():
                continue
            fk = (prefix, key)
            r._data.setdefault(prefix, {})[key] = obj
            for dot in obj.dots():
                r._index.setdefault(dot[0], {})[dot[1]] = fk
                seen.append(dot)
            if obj.ctx:
                r._ctx_keys[fk] = None
            if len(obj) > 1:
                r._sib_keys[fk] = None
            elif not len(obj):
                r._dead[fk] = None
        for raw_dot, raw_key in rows.get(T_DOTS, []):
            dot = messages.unpack_dot(raw_dot)
            fk = messages.unpack_full_key(raw_key)
            sub = r._index.setdefault(dot[0], {})
            if dot[1] in sub:  # live in an object row (a crash between two rows): the object wins
                continue
            sub[dot[1]] = fk
            heapq.heappush(r._cand.setdefault(dot[0], []), dot[1])
            r._cand_count[fk] = r._cand_count.get(fk, 0) + 1
            seen.append(dot)
        clock = clock.add_all(seen)
        own_base, own_bitmap = clock.entry(node_id)
        own_max = own_base + own_bitmap.bit_length()
        # Own counters below the reservation that no row holds may have been handed out and lost in a
        # crash (a peer may hold them): fetch them from every member before declaring them unused.
        top = max(own_max, r._reserved - 1)
        if top > own_base:
            holes = NodeClock({node_id: (top, 0)}).missing_dots(clock).get(node_id)
            if holes:
                r._own_holes = holes
                r._holes_wait = set(r._peers)
        if r._reserved > own_max:
            clock = clock.add((node_id, r._reserved))  # never used: the next own counter is above it
        r._set_clock(clock)
        if r._own_holes is not None and not r._holes_wait:
            r._fill_own_holes([])
        r._find_writebacks()
        return r

    def _find_writebacks(self) -> None:
        """Queue a write-back for every key with siblings this node owns (after a restore or a
        membership change: ownership may have moved here)."""
        if not self._writeback_enabled:
            return
        for fk in self._sib_keys:
            obj = self._stored(*fk)
            if obj is not None and len(obj) > 1 and self._owns(obj.dots()) and fk not in self._writeback:
                self._writeback[fk] = None
                if self._writeback_at is None:
                    self._writeback_at = self._now + self._writeback_delay

    # ================================================================================ membership
    def set_peers(self, peers: Iterable[str]) -> list[Output]:
        """The cluster members other than this node: new ones are added to the watermark (at 0: nothing
        they lack is collected until they caught up), removed ones are retired (their column is dropped,
        so GC proceeds without them; their row stays while their dots live in the data)."""
        new = sorted({p for p in peers if p != self.node_id})
        for p in new:
            if not isinstance(p, str):
                raise InvalidKeyError(f"peer ids are str, got {p!r}")
        old = set(self._peers)
        added = [p for p in new if p not in old]
        removed = [p for p in self._peers if p not in set(new)]
        out: list[Output] = []
        if not added and not removed:
            return out
        usable_before = self._usable()
        wm = self._wm
        members = [self.node_id, *new]
        for p in removed:
            wm = wm.retire_peer(p)
        for p in added:
            if p in wm.retired():
                wm = wm.remove_peer(p)
            wm = wm.add_peer(p, members)
        if self.GC_NEEDS_AGREED_VIEWS:
            wm = wm.reset()  # what peers reported under the old view no longer counts (section 4)
        self._wm = wm
        self._peers = new
        self._members = frozenset(members)
        self._view = view_digest(self._members)
        self._usable_cache = None
        self._queue = [p for p in self._queue if p in self._members]
        if self._own_holes is not None:
            self._holes_wait &= set(new)
            if not self._holes_wait:
                self._fill_own_holes(out)
        for peer in removed:
            if peer in self._exchanges:
                self._teardown(self._exchanges[peer], "peer_removed", self._now, out)
        self._queue_newly_usable(usable_before)
        self._find_writebacks()
        self._persist_watermark(out)
        if removed:
            self._gc(self._now, out)
        self._maybe_start(self._now, out)
        return out

    def set_reachable(self, peers: Iterable[str]) -> None:
        """The peers this node can reach now.  A member that becomes reachable is synced with at once
        (at the next :meth:`on_timer`, which :meth:`next_deadline` makes due); an exchange whose peer
        became unreachable is torn down there too."""
        usable_before = self._usable()
        self._reachable = frozenset(p for p in peers if p != self.node_id)
        self._usable_cache = None
        for peer, ex in self._exchanges.items():
            if peer not in self._reachable:
                ex.abort = "peer_unreachable"
        self._queue_newly_usable(usable_before)

    def _usable(self) -> list[str]:
        """Members this node can reach now, sorted (cached: membership and reachability change rarely)."""
        if self._usable_cache is None:
            self._usable_cache = [p for p in self._peers if p in self._reachable]
        return self._usable_cache

    def _queue_newly_usable(self, before: list[str]) -> None:
        was = set(before)
        for p in self._usable():
            if p not in was and p not in self._queue:
                self._queue.append(p)

    @property
    def peers(self) -> list[str]:
        """Current cluster members other than this node, sorted."""
        return list(self._peers)

    # ================================================================================ local API
    def _resolver(self, prefix: str) -> Resolver:
        return self._resolvers.get(prefix, DEFAULT_RESOLVER)

    def _resolve(self, prefix: str, obj: _Obj | None) -> Any:
        if obj is None:
            return None
        values = obj.values()
        if not values:
            return None
        if len(values) == 1:
            return values[0]
        return self._resolver(prefix)(values)

    def _served_size(self, prefix_key: tuple[str, Key]) -> int:
        """About how many bytes the object of a key takes in an anti-entropy reply (values, dots, context)."""
        prefix, key = prefix_key
        obj = self._stored(prefix, key)
        if obj is None:
            return 64
        return len(_pack_value([prefix, key, obj.values()])) + 48 * (len(obj.versions) + len(obj.ctx))

    def _stored(self, prefix: str, key: Key) -> _Obj | None:
        objs = self._data.get(prefix)
        return None if objs is None else objs.get(key)

    def get(self, prefix: str, key: Key) -> Any | None:
        """The resolved value (None when absent or deleted)."""
        return self._resolve(prefix, self._stored(prefix, check_key(prefix, key)))

    def siblings(self, prefix: str, key: Key) -> list[Any]:
        """Every live value of the key (concurrent writes), in dot order."""
        obj = self._stored(prefix, check_key(prefix, key))
        return [] if obj is None else obj.values()

    def context(self, prefix: str, key: Key) -> VersionVector:
        """The key's full causal context (stored context filled with the node clock's base)."""
        obj = self._stored(prefix, check_key(prefix, key))
        return (_NO_CTX if obj is None else obj.ctx).merge(self._base_vv())

    def fold(self, prefix: str) -> Iterator[tuple[Key, Any]]:
        """``(key, resolved value)`` for every live key of ``prefix`` (in storage order)."""
        objs = self._data.get(prefix, {})
        for key, obj in list(objs.items()):
            if len(obj):
                yield key, self._resolve(prefix, obj)

    def hlc_now(self, wall: float) -> Stamp:
        """A fresh HLC stamp (to put inside a value, for :func:`~vmqpy.metadata.resolve.latest_stamp`)."""
        return self.hlc.now(wall)

    def witness(self, stamp: Any) -> None:
        """Every later :meth:`hlc_now` is greater than ``stamp`` (a :class:`Stamp` or its list; else ignored)."""
        parsed = Stamp.parse(stamp)
        if parsed is not None:
            self.hlc.witness(parsed)

    def _clock_in(self, now: float, wall: float | None) -> None:
        """Take the time of a call: ``now`` for timers, ``wall`` (default ``now``) for HLC stamps."""
        self._now = now
        self._wall = now if wall is None else wall

    def put(self, prefix: str, key: Key, value: Any, now: float, wall: float | None = None) -> list[Output]:
        """Write ``value`` (msgpack-serialisable; stored as it comes back from msgpack: tuples become
        lists, stamps become ``[wall_ms, logical, node]``) over everything this node has seen of the key."""
        key = check_key(prefix, key)
        if value is None:
            raise InvalidValueError("None is not a value (use delete)")
        packed = _pack_value(value)
        value = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, value, packed, now, out, writeback=False)
        self._stats["puts"] += 1
        return out

    def delete(self, prefix: str, key: Key, now: float, wall: float | None = None) -> list[Output]:
        """Delete the key: removes every version this node has seen (a concurrent write elsewhere survives)."""
        key = check_key(prefix, key)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, None, None, now, out, writeback=False)
        self._stats["deletes"] += 1
        return out

    # ================================================================================ write path
    def _set_clock(self, clock: NodeClock) -> None:
        """Replace the (materialised) node clock; recompute the base and the own-counter shortcut."""
        self._clock = clock
        self._base_d = clock.base().to_dict()
        self._base_vv_cache = None
        base, bitmap = clock.entry(self.node_id)
        self._own = self._own_mat = base + bitmap.bit_length()
        self._own_fast = bitmap == 0 and self._own_holes is None

    def _nc(self) -> NodeClock:
        """The node clock, with every own counter the write path issued."""
        if self._own > self._own_mat:
            runs = {self.node_id: Counters(range(self._own_mat + 1, self._own + 1))}
            self._clock = _add_runs(self._clock, runs)
            self._own_mat = self._own
        return self._clock

    def _base_vv(self) -> VersionVector:
        """The node clock's base as a version vector (cached)."""
        if self._base_vv_cache is None:
            self._base_vv_cache = VersionVector(self._base_d)
        return self._base_vv_cache

    def _local_write(
        self,
        prefix: str,
        key: Key,
        value: Any,
        packed: bytes | None,
        now: float,
        out: list[Output],
        *,
        writeback: bool,
    ) -> None:
        """fill -> discard (this node's whole context) -> new dot -> add -> strip -> store -> index -> push.

        Discarding with the local object's filled context drops every version this node holds, so
        the new object is just ``{dot: value}`` (nothing for a delete) with context filled + {dot}."""
        fk = (prefix, key)
        node = self.node_id
        stored = self._stored(prefix, key)
        old = self._resolve(prefix, stored)
        context = dict(self._base_d)  # the filled context the write supersedes
        if stored is not None and stored.ctx:
            for n, c in stored.ctx.items():
                if c > context.get(n, 0):
                    context[n] = c
        if self._own_fast:
            counter = self._own + 1
            self._own = counter
            self._base_d[node] = counter
            self._base_vv_cache = None
        else:
            counter, clock = self._nc().event(node)
            self._set_clock(clock)
        dot = (node, counter)
        if counter >= self._reserved:
            self._reserved = counter + RESERVE_BLOCK  # counters below it may be used, never itself
            out.append(Persist(T_META, META_RESERVED, msgpack.packb(self._reserved)))
        base_d = self._base_d
        if stored is None or not stored.ctx:
            rest_ctx = _NO_CTX if base_d.get(node, 0) >= counter else VersionVector({node: counter})
        else:
            rest_ctx = stored.ctx.add(dot).filter_ids(lambda n, c: c > base_d.get(n, 0))
        at_rest = _Obj(() if value is None else ((dot, value),), rest_ctx)
        fkb = pack_full_key(prefix, key)
        # index: the versions this write supersedes (and a delete's own dot) wait for GC
        if stored is not None:
            for old_dot in stored.dots():
                self._make_candidate(old_dot, fk, fkb, out)
        self._index.setdefault(node, {})[counter] = fk
        if value is None:
            self._make_candidate(dot, fk, fkb, out)
        self._store(fk, at_rest, out, fkb, None if at_rest.is_empty() else pack_single(node, counter, packed, rest_ctx))
        if value != old:
            out.append(Changed(prefix, key, old, value))
        stamp = stamp_list(value)
        if stamp is not None:
            self.hlc.witness_parts(stamp[0], stamp[1])
        else:
            stamp = self.hlc.now(self._wall).to_list()
        fields: dict[str, Any] = {
            "prefix": prefix,
            "key": key,
            "dot": [node, counter],
            "op": "delete" if value is None else "put",
            "value": packed,
            "context": context,
            "hlc": stamp,
        }
        if writeback:
            fields["writeback"] = True
        out.append(Logged("md_write", fields))
        if self._writeback:
            self._writeback.pop(fk, None)
        reachable = self._reachable
        if reachable:
            push = Push(prefix, key, dot, value, context)
            for peer in self._peers:
                if peer in reachable:
                    out.append(Send(peer, push))
                    self._stats["pushes_sent"] += 1

    def _make_candidate(self, dot: Dot, fk: FullKey, fkb: bytes | None, out: list[Output]) -> None:
        """``dot`` (indexed under ``fk``) is no longer live: keep it indexed until every peer holds it."""
        heapq.heappush(self._cand.setdefault(dot[0], []), dot[1])
        self._cand_count[fk] = self._cand_count.get(fk, 0) + 1
        out.append(Persist(T_DOTS, pack_dot(dot), fkb if fkb is not None else pack_full_key(*fk)))

    def _store(
        self, fk: FullKey, at_rest: _Obj, out: list[Output], fkb: bytes | None = None, row: bytes | None = None
    ) -> None:
        """Keep ``at_rest`` (stripped) as the key's object and persist it; an empty one is dropped."""
        prefix, key = fk
        if at_rest.is_empty():
            objs = self._data.get(prefix)
            if objs is not None and objs.pop(key, None) is not None:
                out.append(Persist(T_OBJ, fkb or pack_full_key(prefix, key), None))
                if not objs:
                    del self._data[prefix]
            self._ctx_keys.pop(fk, None)
            self._sib_keys.pop(fk, None)
            self._dead.pop(fk, None)
            return
        objs = self._data.get(prefix)
        if objs is None:
            objs = self._data[prefix] = {}
        objs[key] = at_rest
        out.append(Persist(T_OBJ, fkb or pack_full_key(prefix, key), row or pack_container(at_rest)))
        if at_rest.ctx:
            self._ctx_keys[fk] = None
        else:
            self._ctx_keys.pop(fk, None)
        n_versions = len(at_rest.versions)
        if n_versions > 1:
            self._sib_keys[fk] = None
        elif self._sib_keys:
            self._sib_keys.pop(fk, None)
        if n_versions == 0:
            self._dead[fk] = None
        elif self._dead:
            self._dead.pop(fk, None)

    # ================================================================================ receive path
    def _apply(
        self,
        prefix: str,
        key: Key,
        remote: CausalContainer,
        dots: Iterable[Dot],
        via: str,
        out: list[Output],
    ) -> bool:
        """Merge a *filled* remote container; ``dots`` are the dots it brings (its versions' dots plus
        the write's or the requested ones).  Returns True when the key's versions changed."""
        fk = (prefix, key)
        stored = self._stored(prefix, key)
        clock = self._nc()
        fresh = sorted({d for d in dots if d not in clock})
        local = _EMPTY if stored is None else stored
        local_filled = CausalContainer(local.versions, local.ctx.merge(self._base_vv()))
        synced = local_filled.sync(remote)
        if fresh:
            self._set_clock(clock.add_all(fresh))
        before = set(local.dots())
        after = synced.dots()
        after_set = set(after)
        changed = before != after_set
        at_rest = _Obj.of(synced.strip(self._clock))
        if not fresh and at_rest == local:
            return False
        # index: versions that lost their place wait for GC; new versions are live; other new dots wait
        for d in local.dots():
            if d not in after_set:
                self._make_candidate(d, fk, None, out)
        for d in fresh:
            self._index.setdefault(d[0], {})[d[1]] = fk
            if d not in after_set:
                self._make_candidate(d, fk, None, out)
        if at_rest != local:
            self._store(fk, at_rest, out)
        if changed:
            old = self._resolve(prefix, stored)
            new = self._resolve(prefix, at_rest if len(at_rest) else None)
            if old != new:
                out.append(Changed(prefix, key, old, new))
            for value in synced.values():
                stamp = stamp_list(value)
                if stamp is not None:
                    self.hlc.witness_parts(stamp[0], stamp[1])
            newest = max(fresh) if fresh else max(after_set ^ before)
            out.append(
                Logged(
                    "md_apply",
                    {
                        "origin": newest[0],
                        "prefix": prefix,
                        "key": key,
                        "dot": [newest[0], newest[1]],
                        "via": via,
                        "siblings": len(after),
                        "hlc": self.hlc.now(self._wall).to_list(),
                    },
                )
            )
            self._stats["objects_applied"] += 1
        if len(after) > 1 and self._writeback_enabled and self._owns(after):
            self._writeback[fk] = None
            if self._writeback_at is None:
                self._writeback_at = self._now + self._writeback_delay
        elif len(after) <= 1:
            self._writeback.pop(fk, None)
        return changed

    def _owns(self, dots: Iterable[Dot]) -> bool:
        """Write-back rule: the member owning the smallest sibling dot writes the winner back (if no
        sibling dot belongs to a current member, the smallest member id does)."""
        members = self._members
        owned = [d for d in dots if d[0] in members]
        owner = min(owned)[0] if owned else min(members)
        return owner == self.node_id

    def receive(self, sender: str, message: Message, now: float, wall: float | None = None) -> list[Output]:
        """Handle a message from ``sender``."""
        self._clock_in(now, wall)
        out: list[Output] = []
        if isinstance(message, Push):
            self._stats["pushes_received"] += 1
            self._on_push(sender, message, out)
        elif isinstance(message, SyncRequest):
            self._serve(sender, message, out)
        elif isinstance(message, SyncReply):
            ex = self._exchanges.get(sender)
            if ex is None or not ex.matches(sender, message.xid):
                self._stats["stale_replies"] += 1
            else:
                self._on_reply(ex, message, now, out)
        elif isinstance(message, SyncReject):
            ex = self._exchanges.get(sender)
            if ex is not None and ex.matches(sender, message.xid):
                self._teardown(ex, f"rejected:{message.reason}", now, out)
        else:  # pragma: no cover - the type says it cannot happen
            raise TypeError(f"not a metadata message: {type(message).__name__}")
        self._maybe_start(now, out)
        return out

    def _on_push(self, sender: str, push: Push, out: list[Output]) -> None:
        """A write broadcast by its coordinator: applied when it comes from a member, names a dot of that member
        and is plausible; anything else is refused and counted (anti-entropy brings what a refusal left out)."""
        try:
            key = check_key(push.prefix, push.key)
        except InvalidKeyError:
            self._stats["pushes_refused"] += 1
            return
        if sender not in self._members or sender == self.node_id or push.dot[0] != sender:
            self._stats["pushes_refused"] += 1
            return
        if not self._plausible([(push.dot[0], push.dot[1], push.dot[1])]):
            self._stats["implausible_refused"] += 1
            return
        self._apply(push.prefix, key, push.container(), (push.dot,), "broadcast", out)

    def _plausible(self, runs: Iterable[tuple[str, int, int]]) -> bool:
        """Would adding these counter runs ``(node, first, last)``, in order, keep the node clock small?  Each
        node's bitmap (the counters seen beyond its contiguous base) must stay within MAX_AHEAD bits, and one
        message may grow the bitmaps by at most MAX_AHEAD bits in all: a frame naming a counter of 2**40 would
        otherwise make this node allocate 2**40 bits.  Legitimate catch-up comes gaps first and in order, so it
        extends bases rather than bitmaps."""
        clock = self._nc()
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
            if top - base > self.MAX_AHEAD:
                return False
            entry[0], entry[1], entry[3] = base, top, max(entry[3], top - base)
        return sum(e[3] - e[2] for e in scratch.values()) <= self.MAX_AHEAD

    def _reply_runs(self, reply: SyncReply) -> Iterator[tuple[str, int, int]]:
        """The counters a reply adds, in the order :meth:`_on_reply` adds them (gaps, then objects' dots)."""
        for node, counters in reply.gaps.items():
            for run in counters.runs:
                yield node, run.start, run.stop - 1
        for obj in reply.objects:
            for node, counter in (*obj.container.dots(), *obj.extra):
                yield node, counter, counter

    # ================================================================================ anti-entropy
    def _serve(self, sender: str, request: SyncRequest, out: list[Output]) -> None:
        """Responder side (stateless): the objects for the dots ``sender`` misses, at most a batch."""
        if sender not in self._members or sender == self.node_id:
            self._stats["requests_rejected"] += 1
            out.append(Send(sender, SyncReject(request.xid, "not_a_member")))
            return
        theirs, mine = request.clock.entry(sender), self._nc().entry(sender)
        if theirs[0] + theirs[1].bit_length() < mine[0] + mine[1].bit_length():
            # The requester lost writes it coordinated (a wiped store under an old id): its next
            # counters would name writes we already hold.  It must come back under a new node id.
            self._stats["requests_rejected"] += 1
            out.append(Send(sender, SyncReject(request.xid, "reused_node_id")))
            return
        self._stats["requests_served"] += 1
        self._learn_clock(sender, request.clock, request.view)
        if request.watermark is not None and not self.GC_NEEDS_AGREED_VIEWS:
            self._wm = self._wm.left_join(request.watermark)
        plan = plan_reply(self._nc(), self._index, request.clock, min(request.limit, self._batch),
                          self._served_size, self._reply_bytes)
        objects = []
        for (prefix, key), asked in plan.keys.items():
            stored = self._stored(prefix, key)
            obj = _EMPTY if stored is None else stored
            values = set(obj.dots())
            extra = tuple(d for d in asked if d not in values)
            objects.append(SyncObject(prefix, key, obj.container(), extra))
        self._stats["objects_served"] += len(objects)
        reply = SyncReply(
            request.xid,
            plan.done,
            plan.missing,
            self._base_vv(),
            tuple(objects),
            plan.gaps,
            self._watermark_for(sender) if plan.done and not self.GC_NEEDS_AGREED_VIEWS else None,
            self._view,
        )
        out.append(Send(sender, reply))

    def exchange_now(self, peer: str | None, now: float, wall: float | None = None) -> list[Output]:
        """Start an exchange with ``peer`` (None: a random reachable member) right away, or as soon as a
        running one ends (at most ``max_exchanges`` run at once, one per peer).  Unknown or unreachable
        peers are ignored."""
        self._clock_in(now, wall)
        out: list[Output] = []
        if peer is None:
            usable = self._usable()
            if not usable:
                return out
            peer = self._rng.choice(usable)
        if peer not in self._members or peer not in self._reachable or peer == self.node_id:
            return out
        if peer not in self._queue:
            self._queue.insert(0, peer)
        self._maybe_start(now, out)
        return out

    def _maybe_start(self, now: float, out: list[Output]) -> None:
        """Start queued exchanges, at most ``max_exchanges`` at a time and one per peer (a peer that
        does not answer does not hold the others up)."""
        i = 0
        while i < len(self._queue) and len(self._exchanges) < self._max_exchanges:
            peer = self._queue[i]
            if peer in self._exchanges:
                i += 1  # already pulling from it: wait for that exchange to end
                continue
            del self._queue[i]
            if peer in self._members and peer in self._reachable:
                self._start(peer, now, out)

    def _start(self, peer: str, now: float, out: list[Output]) -> None:
        self._xid += 1
        ex = Exchange(peer, self._xid, now, self._timeout)
        self._exchanges[peer] = ex
        self._stats["exchanges_started"] += 1
        self._send_request(ex, now, out)

    def _watermark_for(self, peer: str) -> Watermark | None:
        """Our watermark if it changed since we last sent it to ``peer`` (it only speeds GC up: each
        exchange already tells both sides the other's clock)."""
        if self._wm_sent.get(peer) == self._wm:
            return None
        self._wm_sent[peer] = self._wm
        return self._wm

    def _learn_clock(self, peer: str, clock: NodeClock, view: bytes | None) -> None:
        """Record in the watermark what ``peer`` holds, as its message said.  With GC_NEEDS_AGREED_VIEWS, only
        from a message sent under the same membership view as ours (section 4 of docs/replication.md: a peer
        that knew a member we do not know may have served it versions we are about to collect the deletes of)."""
        known = self._reported.get(peer)
        self._reported[peer] = clock if known is None else known.merge(clock)
        self._reports[peer] += 1
        if self.GC_NEEDS_AGREED_VIEWS and view != self._view:
            self._stats["views_differ"] += 1
            return
        self._wm = self._wm.update_peer(peer, clock)

    def _send_request(self, ex: Exchange, now: float, out: list[Output]) -> None:
        request = SyncRequest(ex.xid, self._batch, self._nc(), None, self._view)
        ex.sent(len(messages.encode(request)), now)
        out.append(Send(ex.peer, request))

    def _on_reply(self, ex: Exchange, reply: SyncReply, now: float, out: list[Output]) -> None:
        repaired = 0
        base = reply.base
        if not self._plausible(self._reply_runs(reply)):
            self._stats["implausible_refused"] += 1
            self._teardown(ex, "rejected:implausible_dots", now, out)
            return
        gap_count = sum(len(c) for c in reply.gaps.values())
        if gap_count:
            # Gaps first: they are the contiguous runs below the objects' dots.  Checkpointed at once: later
            # writes strip contexts with this clock and later requests announce it, and peers collect on it.
            self._set_clock(_add_runs(self._nc(), reply.gaps))
            self._stats["gap_dots"] += gap_count
            if self.CHECKPOINT_GAPS_AT_ONCE:
                out.append(Persist(T_META, META_CLOCK, dvv.to_bytes(self._nc())))
        for obj in reply.objects:
            try:
                key = check_key(obj.prefix, obj.key)
            except InvalidKeyError:
                continue
            remote = CausalContainer(obj.container.items(), obj.container.context().merge(base))
            if self._apply(obj.prefix, key, remote, (*obj.container.dots(), *obj.extra), "exchange", out):
                repaired += 1
        self._stats["objects_received"] += len(reply.objects)
        self._stats["objects_repaired"] += repaired
        ex.received(
            size=reply.size, missing=reply.missing, objects=len(reply.objects), repaired=repaired, gaps=gap_count
        )
        self._learn_clock(ex.peer, _clock_of_base(base), reply.view)
        if not reply.done:
            self._send_request(ex, now, out)
            return
        if reply.watermark is not None and not self.GC_NEEDS_AGREED_VIEWS:
            self._wm = self._wm.left_join(reply.watermark)
        if ex.gaps and not self.CHECKPOINT_GAPS_AT_ONCE:
            out.append(Persist(T_META, META_CLOCK, dvv.to_bytes(self._nc())))
        self._teardown(ex, "ok", now, out)
        self._round.add(ex.peer)
        if ex.repaired or ex.gaps:
            # This peer had something for us: the others may too (a heal nobody reported, lost pushes).
            # Pull from every other reachable member once in this round, right away.
            for peer in self._usable():
                if peer not in self._round and peer not in self._queue and peer not in self._exchanges:
                    self._queue.append(peer)
        if self._own_holes is not None:
            self._holes_wait.discard(ex.peer)
            if not self._holes_wait:
                self._fill_own_holes(out)
        self._gc(now, out)

    def _fill_own_holes(self, out: list[Output]) -> None:
        """Every member was asked for them: own counters still missing were never used (or nobody has
        them): mark them as seen so this node's entry becomes contiguous again (GC needs that)."""
        holes = self._own_holes
        self._own_holes = None
        self._holes_wait = set()
        if holes is not None:
            self._set_clock(_add_runs(self._nc(), {self.node_id: holes}))
            out.append(Persist(T_META, META_CLOCK, dvv.to_bytes(self._clock)))

    def _teardown(self, ex: Exchange, result: str, now: float, out: list[Output]) -> None:
        """The one way an exchange ends (success, timeout, reject, peer unreachable or removed): it is
        dropped and logged; nothing else of it remains."""
        if self._exchanges.get(ex.peer) is not ex:
            return
        fields = ex.teardown(result, now)
        fields["hlc"] = self.hlc.now(self._wall).to_list()
        del self._exchanges[ex.peer]
        self._stats["exchanges_completed" if result == "ok" else "exchanges_failed"] += 1
        out.append(Logged("md_exchange", fields))

    # ================================================================================ time
    def next_deadline(self) -> float | None:
        """When :meth:`on_timer` must run next (None: nothing scheduled)."""
        times: list[float] = []
        for ex in self._exchanges.values():
            times.append(self._now if ex.abort else ex.deadline)
        if len(self._exchanges) < self._max_exchanges and any(p not in self._exchanges for p in self._queue):
            times.append(self._now)
        if self._writeback:
            times.append(self._now if self._writeback_at is None else self._writeback_at)
        if self._usable():
            times.append(self._now if self._next_sync is None else self._next_sync)
        if self._cand or self._ctx_keys:
            times.append(self._now if self._next_gc is None else self._next_gc)
        return min(times) if times else None

    def _jitter(self) -> float:
        return self._interval * (0.75 + 0.5 * self._rng.random())

    def on_timer(self, now: float, wall: float | None = None) -> list[Output]:
        """Tear down a stuck exchange, write back owned siblings, start the periodic exchange with a
        random reachable member (every ``sync_interval`` with jitter), run GC."""
        self._clock_in(now, wall)
        out: list[Output] = []
        for ex in list(self._exchanges.values()):
            if ex.abort is not None:
                self._teardown(ex, ex.abort, now, out)
            elif ex.expired(now):
                self._teardown(ex, "timeout", now, out)
        if self._writeback and (self._writeback_at is None or now >= self._writeback_at):
            self._do_writebacks(now, out)
        usable = self._usable()
        if usable:
            if self._next_sync is None:
                self._next_sync = now + self._jitter()
            elif now >= self._next_sync:
                self._next_sync = now + self._jitter()
                self._round = set()
                if self._holes_wait:  # restarted: catch up with every member, one after the other
                    for peer in usable:
                        if peer in self._holes_wait and peer not in self._queue:
                            self._queue.append(peer)
                elif len(self._exchanges) < self._max_exchanges and not self._queue:
                    idle = [p for p in usable if p not in self._exchanges]
                    if idle:
                        self._queue.append(self._rng.choice(idle))
        else:
            self._next_sync = None
        if self._next_gc is None or now >= self._next_gc:
            self._next_gc = now + self._gc_interval
            self._gc(now, out)
        self._maybe_start(now, out)
        return out

    def _do_writebacks(self, now: float, out: list[Output]) -> None:
        pending, self._writeback = self._writeback, {}
        self._writeback_at = None
        for prefix, key in pending:
            obj = self._stored(prefix, key)
            if obj is None or len(obj) < 2 or not self._owns(obj.dots()):
                continue
            winner = self._resolve(prefix, obj)
            self._local_write(prefix, key, winner, _pack_value(winner), now, out, writeback=True)
            self._stats["writebacks"] += 1

    # ================================================================================ GC
    def _ensure_rows(self) -> None:
        """Give every node with indexed dots a watermark row (unknown nodes: a retired row)."""
        known = set(self._wm.peers()) | set(self._wm.retired())
        unknown = [n for n in self._cand if n not in known]
        if unknown:
            cols = dict.fromkeys(self._wm.peers(), 0)
            retired = self._wm.retired_rows()
            for n in unknown:
                retired[n] = dict(cols)
            self._wm = Watermark(self._wm.active_rows(), retired)

    def _gc(self, now: float, out: list[Output]) -> None:
        """Forget the non-live dots every member holds; re-strip contexts the node clock now covers;
        drop the rows of deletes that every member has seen."""
        self._stats["gc_runs"] += 1
        self._ensure_rows()
        self._wm = self._wm.update_peer(self.node_id, self._nc())
        pruned: list[tuple[Dot, FullKey]] = []
        for node in sorted(self._cand):
            heap = self._cand[node]
            floor = self._wm.min(node)
            sub = self._index.get(node, {})
            while heap and heap[0] <= floor:
                counter = heapq.heappop(heap)
                fk = sub.pop(counter, None)
                if fk is not None:
                    pruned.append(((node, counter), fk))
            if not heap:
                del self._cand[node]
            if not sub:
                self._index.pop(node, None)
        keys_deleted = 0
        if pruned:
            out.append(Persist(T_META, META_CLOCK, dvv.to_bytes(self._nc())))
            for dot, fk in pruned:
                out.append(Persist(T_DOTS, pack_dot(dot), None))
                left = self._cand_count.get(fk, 0) - 1
                if left > 0:
                    self._cand_count[fk] = left
                else:
                    self._cand_count.pop(fk, None)
                    if self._stored(*fk) is None:
                        keys_deleted += 1
        base_d = self._base_d
        for fk in list(self._ctx_keys):
            obj = self._stored(*fk)
            if obj is None:
                self._ctx_keys.pop(fk, None)
                continue
            stripped = _Obj(obj.versions, obj.ctx.filter_ids(lambda n, c: c > base_d.get(n, 0)))
            if stripped != obj:
                self._store(fk, stripped, out)
                if stripped.is_empty() and fk not in self._cand_count:
                    keys_deleted += 1
        if pruned:
            self._persist_watermark(out)  # restoring an older watermark is safe: it only delays GC
        if pruned or keys_deleted:
            self._stats["gc_dots_pruned"] += len(pruned)
            self._stats["gc_keys_deleted"] += keys_deleted
            out.append(
                Logged(
                    "md_gc",
                    {
                        "dots_pruned": len(pruned),
                        "keys_deleted": keys_deleted,
                        "hlc": self.hlc.now(self._wall).to_list(),
                    },
                )
            )

    def _persist_watermark(self, out: list[Output]) -> None:
        if self._wm != self._persisted_wm:
            self._persisted_wm = self._wm
            out.append(Persist(T_META, META_WATERMARK, dvv.to_bytes(self._wm)))

    # ================================================================================ leave
    def covered_by(self, peer: str) -> bool:
        """``peer``'s messages showed it holds every dot this replica holds (its SyncRequests carry its whole
        clock, its replies their base).  A member about to leave waits for this of a remaining member, so no
        write only it holds leaves with it: that member must pull from it, then ask once more (the last
        request's clock is the one that shows the last batch arrived)."""
        reported = self._reported.get(peer)
        return reported is not None and not self._nc().missing_dots(reported)

    def known_to(self, peer: str, prefix: str, key: Key) -> bool:
        """Every live version of the key is among the dots ``peer``'s messages said it holds (False when the key
        is absent or ``peer`` never said): ``peer`` had this value of the key when it last reported."""
        reported = self._reported.get(peer)
        obj = self._stored(prefix, check_key(prefix, key))
        if reported is None or obj is None or not obj.versions:
            return False
        return all(reported.contains(dot) for dot in obj.dots())

    def holds_all_of(self, peer: str) -> bool:
        """This replica holds every dot ``peer``'s messages said it holds (the other side of ``covered_by``: a
        remaining member that removes a live one waits for this, after a report newer than the command)."""
        reported = self._reported.get(peer)
        return reported is not None and not reported.missing_dots(self._nc())

    def reports_from(self, peer: str) -> int:
        """How many messages of ``peer`` reported its clock so far (a caller waits for the next one)."""
        return self._reports[peer]

    def unaccounted_dots(self, gone: str) -> int:
        """How many dots of ``gone`` (a member removed while down) no remaining member is known to hold: the
        counters its own messages said it had issued, minus what this replica and the reports of every other
        member hold.  A lower bound of what is lost with it (it may have issued more since it last spoke);
        counters it skipped after a restart are counted too."""
        claimed = NodeClock()
        for source in (self._reported.get(gone), self._nc()):
            if source is not None:
                claimed = claimed.merge(source.restrict([gone]))
        held = self._nc().restrict([gone])
        for peer in self._peers:
            reported = self._reported.get(peer)
            if peer != gone and reported is not None:
                held = held.merge(reported.restrict([gone]))
        return sum(len(c) for c in claimed.missing_dots(held).values())

    # ================================================================================ introspection
    @property
    def node_clock(self) -> NodeClock:
        """The node clock (immutable)."""
        return self._nc()

    @property
    def watermark(self) -> Watermark:
        """The watermark (immutable)."""
        return self._wm

    def busy(self) -> bool:
        """An exchange is running or queued, or a write-back is pending."""
        return bool(self._exchanges) or bool(self._queue) or bool(self._writeback)

    def index(self) -> dict[str, dict[int, FullKey]]:
        """A copy of the dot -> key index (live and not-yet-collected dots)."""
        return {n: dict(sub) for n, sub in self._index.items() if sub}

    def stats(self) -> dict[str, int]:
        """Counters and sizes (keys, indexed dots, pending GC, exchanges, ...)."""
        out = dict(self._stats)
        out["keys"] = sum(len(objs) for objs in self._data.values())  # object rows, deletes included
        out["tombstone_rows"] = len(self._dead)
        out["live_keys"] = out["keys"] - len(self._dead)
        out["siblings"] = len(self._sib_keys)
        out["indexed_dots"] = sum(len(sub) for sub in self._index.values())
        out["gc_pending_dots"] = sum(len(h) for h in self._cand.values())
        out["contexts_at_rest"] = len(self._ctx_keys)
        out["peers"] = len(self._peers)
        out["reachable"] = len(self._usable())
        out["exchange_active"] = len(self._exchanges)
        out["writebacks_pending"] = len(self._writeback)
        out["own_holes"] = 0 if self._own_holes is None else len(self._own_holes)
        return out

    def dump(self) -> dict[str, Any]:
        """Everything, for convergence checks: ``data`` maps prefix -> key -> {"values": [[node, counter,
        value], ...], "context": stored (stripped) context, "filled": full context}; plus the node clock
        (node -> [base, bitmap]), the index and the watermark rows."""
        data: dict[str, dict[Key, dict[str, Any]]] = {}
        for prefix in sorted(self._data):
            objs = self._data[prefix]
            data[prefix] = {
                key: {
                    "values": [[n, c, v] for (n, c), v in obj.items()],
                    "context": obj.ctx.to_dict(),
                    "filled": obj.ctx.merge(self._base_vv()).to_dict(),
                }
                for key, obj in objs.items()
            }
        return {
            "node": self.node_id,
            "clock": {n: [b, m] for n, (b, m) in self._nc().items()},
            "base": dict(self._base_d),
            "data": data,
            "index": {n: sorted(sub) for n, sub in sorted(self._index.items()) if sub},
            "gc_pending": {n: sorted(h) for n, h in sorted(self._cand.items()) if h},
            "watermark": {"active": self._wm.active_rows(), "retired": self._wm.retired_rows()},
        }


def _decode_dvv(data: bytes, kind: type) -> Any:
    try:
        value = dvv.from_bytes(data)
    except dvv.DecodeError as exc:
        raise DecodeError(f"bad {kind.__name__} row: {exc}") from exc
    if not isinstance(value, kind):
        raise DecodeError(f"expected a {kind.__name__} row, got {type(value).__name__}")
    return value
