"""A replica's state: its parts, built empty or restored from its rows, and every question one can ask it.

A :class:`ReplicaState` holds, one module each (see ``docs/replication.md`` for the full design):

* per key, a dotted causal container stored *stripped* of what the node clock's base already says
  (:mod:`~vmqpy.metadata.objects`);
* a node clock: every dot this replica has seen, for all keys at once (:mod:`~vmqpy.metadata.replica_clock`);
* a dot -> key index: the dots of every live version plus the dots that were superseded or deleted, until
  every peer holds them (those are the only "tombstones"; :mod:`~vmqpy.metadata.dot_index`);
* the members, and a watermark of what each is known to hold, which decides what the index may forget
  (:mod:`~vmqpy.metadata.membership`);
* what each peer reported it holds (:mod:`~vmqpy.metadata.peer_reports`), the exchanges it runs
  (:mod:`~vmqpy.metadata.scheduler`) and the write-backs it owes (:mod:`~vmqpy.metadata.writeback`).

Besides building it (empty, or from rows with :meth:`ReplicaState.restore`, which also finds the write-backs
it owes), its public methods only read: values, contexts, what a leave waits for, the next timer deadline,
stats and a dump.  Everything that changes the state is in :class:`~vmqpy.metadata.replica.Replica`, its
subclass.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Self

from dvv.dots import Dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark
from vmqpy.metadata.dot_index import DotIndex
from vmqpy.metadata.errors import InvalidKeyError
from vmqpy.metadata.fields import Key, check_key
from vmqpy.metadata.hlc import HybridClock, Stamp
from vmqpy.metadata.membership import Membership
from vmqpy.metadata.objects import NO_CONTEXT, FullKey, ObjectTable, StoredObject
from vmqpy.metadata.peer_reports import PeerReports
from vmqpy.metadata.replica_clock import ReplicaClock, add_counters, add_dots
from vmqpy.metadata.resolve import DEFAULT_RESOLVER, Resolver
from vmqpy.metadata.rows import read_rows
from vmqpy.metadata.scheduler import ExchangeScheduler
from vmqpy.metadata.writeback import Writebacks, owner

if TYPE_CHECKING:  # randomness is an input: only the type of the generator is named here
    import random

__all__ = ["COUNTERS", "ReplicaState"]

COUNTERS = (
    "puts", "deletes", "writebacks", "pushes_sent", "pushes_received", "objects_applied", "exchanges_started",
    "exchanges_completed", "exchanges_failed", "requests_served", "requests_rejected", "objects_served",
    "objects_received", "objects_repaired", "gap_dots", "gc_runs", "gc_dots_pruned", "gc_keys_deleted",
    "stale_replies", "views_differ", "implausible_refused", "pushes_refused", "pushes_acknowledged",
)


class ReplicaState:
    """The state of one node's replica, and its read-only API (see the module docstring)."""

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
        acknowledged: Iterable[str] = (),
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
        self._batch = batch_size
        self._reply_bytes = reply_bytes  # an anti-entropy reply stops adding keys at about this many bytes
        self._gc_interval = sync_interval if gc_interval is None else gc_interval
        self._clock = ReplicaClock(node_id)
        self._objects = ObjectTable()
        self._index = DotIndex()
        self._membership = Membership(node_id)
        self._reports = PeerReports()
        self._scheduler = ExchangeScheduler(
            interval=sync_interval, timeout=exchange_timeout, max_running=max_exchanges, rng=rng
        )
        delay = sync_interval / 2 if writeback_delay is None else writeback_delay
        self._writebacks = Writebacks(enabled=writeback, delay=delay)
        self._now = 0.0  # the last `now` passed in: timers and deadlines (a monotonic clock in the driver)
        self._wall = 0.0  # the last `wall` passed in (default: `now`): HLC stamps and log times only
        self._next_gc: float | None = None
        self._pruning = False  # GC left dots it may forget (a slice per call, Replica.PRUNE_SLICE): due at once
        self._stats: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        # the prefixes whose pushes are answered with a PushAck once applied (the broker's subscriptions:
        # docs/cluster.md, "A SUBACK the cluster honours")
        self._acknowledged = frozenset(acknowledged)

    @classmethod
    def restore(cls, node_id: str, rows: Mapping[str, list[tuple[bytes, bytes]]], **kwargs: Any) -> Self:
        """Rebuild a replica from the rows its :class:`Persist` outputs wrote (``Storage.load`` per table).

        The node clock is the saved checkpoint plus every dot found in the objects and the index rows
        (so it never lags what the rows hold).  The next own counter is above the saved reservation,
        so a restarted node never reuses a counter it may have handed out before a crash; the own
        counters below it that no row holds are fetched from every member first, then declared unused.
        Raises :class:`DecodeError` for rows that are not ours.
        """
        r = cls(node_id, **kwargs)
        saved = read_rows(rows)
        if saved.watermark is not None:
            r._membership.restore(saved.watermark)
        r._objects.adopt(saved.objects, saved.odd)  # tables built while decoding: a million keys at a large restart
        r._index.adopt(saved.dots)
        clock = add_counters(saved.clock, saved.dots)  # before the pending dots join the index's dicts
        seen: list[Dot] = []
        for dot, fk in saved.pending:
            if r._index.restore_pending(dot, fk):
                seen.append(dot)
        r._clock.restore(add_dots(clock, seen), saved.reserved, r._membership.peers)
        r._find_writebacks()
        return r

    def _find_writebacks(self) -> None:
        """Queue a write-back for every key with siblings this node owns (after a restore or a
        membership change: ownership may have moved here)."""
        if not self._writebacks.enabled:
            return
        for fk in self._objects.with_siblings():
            obj = self._objects.get(*fk)
            if obj is not None and len(obj) > 1 and self._owns(obj.dots()):
                self._writebacks.want(fk, self._now)

    def _owns(self, dots: Iterable[Dot]) -> bool:
        """This node writes back a key with these sibling dots (:func:`~vmqpy.metadata.writeback.owner`)."""
        return owner(dots, self._membership.members) == self.node_id

    @property
    def peers(self) -> list[str]:
        """Current cluster members other than this node, sorted."""
        return list(self._membership.peers)

    def usable_peers(self) -> list[str]:
        """The members other than this node that it can reach now (its pushes go to them), sorted."""
        return self._membership.usable()

    # -- reads ------------------------------------------------------------------------------------------
    def _resolve(self, prefix: str, obj: StoredObject | None) -> Any:
        if obj is None:
            return None
        values = obj.values()
        if not values:
            return None
        if len(values) == 1:
            return values[0]
        return self._resolvers.get(prefix, DEFAULT_RESOLVER)(values)

    def get(self, prefix: str, key: Key) -> Any | None:
        """The resolved value (None when absent or deleted)."""
        return self._resolve(prefix, self._objects.get(prefix, check_key(prefix, key)))

    def siblings(self, prefix: str, key: Key) -> list[Any]:
        """Every live value of the key (concurrent writes), in dot order."""
        obj = self._objects.get(prefix, check_key(prefix, key))
        return [] if obj is None else obj.values()

    def context(self, prefix: str, key: Key) -> VersionVector:
        """The key's full causal context (stored context filled with the node clock's base)."""
        obj = self._objects.get(prefix, check_key(prefix, key))
        return (NO_CONTEXT if obj is None else obj.ctx).merge(self._clock.base_vv())

    def fold(self, prefix: str) -> Iterator[tuple[Key, Any]]:
        """``(key, resolved value)`` for every live key of ``prefix`` (in storage order)."""
        for key, obj in self._objects.items(prefix):
            versions = obj.versions
            if len(versions) == 1:  # no siblings: the value itself (what _resolve gives), read at every restart
                yield key, versions[0][1]
            elif versions:
                yield key, self._resolve(prefix, obj)

    def hlc_now(self, wall: float) -> Stamp:
        """A fresh HLC stamp (to put inside a value, for :func:`~vmqpy.metadata.resolve.latest_stamp`)."""
        return self.hlc.now(wall)

    def witness(self, stamp: Any) -> None:
        """Every later :meth:`hlc_now` is greater than ``stamp`` (a :class:`Stamp` or its list; else ignored)."""
        parsed = Stamp.parse(stamp)
        if parsed is not None:
            self.hlc.witness(parsed)

    # -- leave ------------------------------------------------------------------------------------------
    def covered_by(self, peer: str) -> bool:
        """``peer``'s messages showed it holds every dot this replica holds (its SyncRequests carry its whole
        clock, its replies their base).  A member about to leave waits for this of a remaining member, so no
        write only it holds leaves with it: that member must pull from it, then ask once more (the last
        request's clock is the one that shows the last batch arrived)."""
        return self._reports.covers(peer, self._clock.current())

    def known_to(self, peer: str, prefix: str, key: Key) -> bool:
        """Every live version of the key is among the dots ``peer``'s messages said it holds (False when the key
        is absent or ``peer`` never said): ``peer`` had this value of the key when it last reported."""
        obj = self._objects.get(prefix, check_key(prefix, key))
        return obj is not None and bool(obj.versions) and self._reports.has_all(peer, obj.dots())

    def holds_all_of(self, peer: str) -> bool:
        """This replica holds every dot ``peer``'s messages said it holds (the other side of ``covered_by``: a
        remaining member that removes a live one waits for this, after a report newer than the command)."""
        return self._reports.within(peer, self._clock.current())

    def reports_from(self, peer: str) -> int:
        """How many messages of ``peer`` reported its clock so far (a caller waits for the next one)."""
        return self._reports.count(peer)

    def unaccounted_dots(self, gone: str) -> int:
        """How many dots of ``gone`` (a member removed while down) no remaining member is known to hold: the
        counters its own messages said it had issued, minus what this replica and the reports of every other
        member hold.  A lower bound of what is lost with it (it may have issued more since it last spoke);
        counters it skipped after a restart are counted too."""
        return self._reports.unaccounted(gone, self._clock.current(), self._membership.peers)

    # -- introspection ----------------------------------------------------------------------------------
    @property
    def node_clock(self) -> NodeClock:
        """The node clock (immutable)."""
        return self._clock.current()

    @property
    def watermark(self) -> Watermark:
        """The watermark (immutable)."""
        return self._membership.watermark

    def next_deadline(self) -> float | None:
        """When :meth:`~vmqpy.metadata.replica.Replica.on_timer` must run next (None: nothing scheduled).  It is
        due at once (the last ``now``) while a reply or GC's re-strips are applied a slice per call: a driver
        calls it on the next turn of its event loop."""
        times = self._scheduler.deadlines(self._now, bool(self._membership.usable()))
        writeback_at = self._writebacks.deadline(self._now)
        if writeback_at is not None:
            times.append(writeback_at)
        if self._index.has_pending() or self._objects.has_contexts():
            times.append(self._now if self._next_gc is None else self._next_gc)
            if self._pruning or self._objects.strippable(self._clock.base):
                times.append(self._now)  # GC's next slice of forgotten dots or re-strips
        return min(times) if times else None

    def busy(self) -> bool:
        """An exchange is running or queued, or a write-back is pending."""
        return self._scheduler.busy() or bool(self._writebacks)

    def applying(self) -> bool:
        """An anti-entropy reply is being applied, a slice per call of ``on_timer`` (then due at once)."""
        return bool(self._scheduler.applying())

    def index(self) -> dict[str, dict[int, FullKey]]:
        """A copy of the dot -> key index (live and not-yet-collected dots)."""
        return self._index.copy()

    def stats(self) -> dict[str, int]:
        """Counters and sizes (keys, indexed dots, pending GC, exchanges, ...)."""
        sizes = self._objects.sizes()
        out = dict(self._stats)
        out["keys"] = sizes["keys"]  # object rows, deletes included
        out["tombstone_rows"] = sizes["tombstone_rows"]
        out["live_keys"] = sizes["keys"] - sizes["tombstone_rows"]
        out["siblings"] = sizes["siblings"]
        out["indexed_dots"] = self._index.indexed()
        out["gc_pending_dots"] = self._index.pending()
        out["contexts_at_rest"] = sizes["contexts_at_rest"]
        out["peers"] = len(self._membership.peers)
        out["reachable"] = len(self._membership.usable())
        out["exchange_active"] = len(self._scheduler.running)
        out["writebacks_pending"] = len(self._writebacks)
        out["own_holes"] = 0 if self._clock.holes is None else len(self._clock.holes)
        return out

    def dump(self) -> dict[str, Any]:
        """Everything, for convergence checks: ``data`` maps prefix -> key -> {"values": [[node, counter,
        value], ...], "context": stored (stripped) context, "filled": full context}; plus the node clock
        (node -> [base, bitmap]), the index and the watermark rows."""
        index, pending = self._index.dump()
        wm = self._membership.watermark
        return {
            "node": self.node_id,
            "clock": {n: [b, m] for n, (b, m) in self._clock.current().items()},
            "base": dict(self._clock.base),
            "data": self._objects.dump(self._clock.base_vv),
            "index": index,
            "gc_pending": pending,
            "watermark": {"active": wm.active_rows(), "retired": wm.retired_rows()},
        }
