"""One node's replica of the metadata store: a sans-I/O state machine (server-wide clocks).

:class:`Replica` is :class:`~vmqpy.metadata.state.ReplicaState` (the data, node clock, dot index, members,
watermark, and the reads) plus every way that state changes: local writes and merges
(:mod:`~vmqpy.metadata.replica_writes`), applying what peers send (pushes, exchange replies, a slice of a reply
per call), answering exchange requests, the exchanges it starts (:mod:`~vmqpy.metadata.scheduler`), membership
and reachability changes, write-backs (:mod:`~vmqpy.metadata.writeback`) and garbage collection (design:
``docs/replication.md``).  Each such call returns :mod:`~vmqpy.metadata.outputs` for the driver;
time (``now``, seconds) and randomness (the seeded ``rng``) are inputs, so the same inputs give the same outputs.

Driver contract: apply ``Persist`` outputs (:mod:`~vmqpy.metadata.rows`) in the order given, and make them
durable before a later ``SyncRequest``/``SyncReply`` leaves the node (those carry the node clock, and peers
garbage-collect on what the clock claims).  After every call, re-read :meth:`Replica.next_deadline`.  While an
anti-entropy reply or GC's re-strips are done a slice per call, it is the last ``now``: call :meth:`Replica.on_timer`
on the next turn of the event loop (so that heartbeats, reads and clients run between the slices).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from dvv.causal_container import CausalContainer
from dvv.node_clock import NodeClock
from vmqpy.metadata import messages
from vmqpy.metadata.errors import InvalidKeyError
from vmqpy.metadata.exchange import Exchange, plan_reply
from vmqpy.metadata.messages import (
    Key,
    Push,
    PushAck,
    StoreMessage,
    SyncObject,
    SyncReject,
    SyncReply,
    SyncRequest,
    check_key,
)
from vmqpy.metadata.objects import EMPTY
from vmqpy.metadata.outputs import Acked, Changed, Logged, Output, Persist, SendTo
from vmqpy.metadata.replica_clock import clock_of_base
from vmqpy.metadata.replica_writes import ReplicaWrites
from vmqpy.metadata.rows import (
    META_CLOCK,
    META_RESERVED,
    META_WATERMARK,
    T_DOTS,
    T_META,
    T_OBJ,
    TABLES,
    InvalidValueError,
    clock_row,
    pack_value,
    pending_dot_row,
    watermark_row,
)

__all__ = [
    "META_CLOCK",
    "META_RESERVED",
    "META_WATERMARK",
    "T_DOTS",
    "T_META",
    "T_OBJ",
    "Acked",
    "Changed",
    "InvalidValueError",
    "Key",
    "Logged",
    "Output",
    "Persist",
    "Replica",
    "SendTo",
]


class Replica(ReplicaWrites):
    """One node's replica (see the module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = TABLES
    # The two rules that keep a deleted key dead under uneven membership changes and crashes
    # (docs/replication.md sections 4 and 7).  Both are switchable only so that the model checker and the
    # simulation can show what the old rules did (tests/sim/legacy.py); production never turns them off.
    GC_NEEDS_AGREED_VIEWS: ClassVar[bool] = True  # watermark cells only from peers that share our view
    CHECKPOINT_GAPS_AT_ONCE: ClassVar[bool] = True  # gap dots are checkpointed before anything relies on them
    # A dot more than this many counters beyond what we know of its node is implausible (it would cost
    # MAX_AHEAD / 8 bytes of bitmap): the message carrying it is refused (docs/replication.md section 3).
    MAX_AHEAD: ClassVar[int] = 1 << 20
    # The most one call does of an anti-entropy reply (units: an object counts 1 + its versions + its extra dots)
    # and of GC's re-strips (objects): a call is one turn of the driver's event loop, and the rest waits for the next
    # turn (next_deadline() is then due at once).  About 3-6 ms each on an idle core (docs/performance.md).
    APPLY_SLICE: ClassVar[int] = 128
    RESTRIP_SLICE: ClassVar[int] = 256
    # pending dots GC forgets per call: 20,000 at once stalled a node 0.29 s, and slices of 1,024 took 6-9 ms each
    # under load (about 7 us a dot), each one a wait for every client of the node
    PRUNE_SLICE: ClassVar[int] = 128

    # -- membership -------------------------------------------------------------------------------------
    def set_peers(self, peers: Iterable[str]) -> list[Output]:
        """The cluster members other than this node: new ones are added to the watermark (at 0: nothing
        they lack is collected until they caught up), removed ones are retired (their column is dropped,
        so GC proceeds without them; their row stays while their dots live in the data)."""
        out: list[Output] = []
        change = self._membership.change(peers, reset_watermark=self.GC_NEEDS_AGREED_VIEWS)
        if change is None:
            return out
        self._scheduler.keep_members(self._membership.members)
        checkpoint = self._clock.keep_asking(self._membership.peers)
        if checkpoint is not None:
            out.append(clock_row(checkpoint))
        for peer in change.removed:
            ex = self._scheduler.running.get(peer)
            if ex is not None:
                self._teardown(ex, "peer_removed", self._now, out)
        self._scheduler.enqueue_new(change.usable_before, self._membership.usable())
        self._find_writebacks()
        self._persist_watermark(out)
        if change.removed:
            self._gc(self._now, out)
        self._maybe_start(self._now, out)
        return out

    def set_reachable(self, peers: Iterable[str]) -> None:
        """The peers this node can reach now.  A member that becomes reachable is synced with at once
        (at the next :meth:`on_timer`, which :meth:`next_deadline` makes due); an exchange whose peer
        became unreachable is torn down there too."""
        usable_before = self._membership.reach(peers)
        self._scheduler.abort_unreachable(self._membership.reachable)
        self._scheduler.enqueue_new(usable_before, self._membership.usable())

    # -- receive path -----------------------------------------------------------------------------------
    def receive(self, sender: str, message: StoreMessage, now: float, wall: float | None = None) -> list[Output]:
        """Handle a message from ``sender``."""
        self._clock_in(now, wall)
        out: list[Output] = []
        if isinstance(message, Push):
            self._stats["pushes_received"] += 1
            self._on_push(sender, message, out)
        elif isinstance(message, SyncRequest):
            self._serve(sender, message, out)
        elif isinstance(message, SyncReply):
            ex = self._scheduler.running.get(sender)
            if ex is None or not ex.matches(sender, message.xid):
                self._stats["stale_replies"] += 1
            else:
                self._on_reply(ex, message, now, out)
        elif isinstance(message, SyncReject):
            ex = self._scheduler.running.get(sender)
            if ex is not None and ex.matches(sender, message.xid):
                self._teardown(ex, f"rejected:{message.reason}", now, out)
        elif isinstance(message, PushAck):
            if sender in self._membership.members and sender != self.node_id:
                out.append(Acked(sender, message.counters))
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
        if sender not in self._membership.members or sender == self.node_id or push.dot[0] != sender:
            self._stats["pushes_refused"] += 1
            return
        if not self._clock.plausible([(push.dot[0], push.dot[1], push.dot[1])], self.MAX_AHEAD):
            self._stats["implausible_refused"] += 1
            return
        self._apply(push.prefix, key, push.container(), (push.dot,), "broadcast", out)
        if push.prefix in self._acknowledged:
            # applied (or held already): the change callbacks saw it before this leaves (the driver batches
            # the acknowledgements of one turn per peer)
            out.append(SendTo(sender, PushAck((push.dot[1],))))
            self._stats["pushes_acknowledged"] += 1

    # -- anti-entropy: responder ------------------------------------------------------------------------
    def _serve(self, sender: str, request: SyncRequest, out: list[Output]) -> None:
        """Responder side (stateless): the objects for the dots ``sender`` misses, at most a batch."""
        if sender not in self._membership.members or sender == self.node_id:
            self._stats["requests_rejected"] += 1
            out.append(SendTo(sender, SyncReject(request.xid, "not_a_member")))
            return
        theirs, mine = request.clock.entry(sender), self._clock.current().entry(sender)
        if theirs[0] + theirs[1].bit_length() < mine[0] + mine[1].bit_length():
            # The requester lost writes it coordinated (a wiped store under an old id): its next
            # counters would name writes we already hold.  It must come back under a new node id.
            self._stats["requests_rejected"] += 1
            out.append(SendTo(sender, SyncReject(request.xid, "reused_node_id")))
            return
        self._stats["requests_served"] += 1
        self._learn_clock(sender, request.clock, request.view)
        if request.watermark is not None and not self.GC_NEEDS_AGREED_VIEWS:
            self._membership.adopt(request.watermark)
        plan = plan_reply(self._clock.current(), self._index.by_node, request.clock, min(request.limit, self._batch),
                          self._served_size, self._reply_bytes)
        objects = []
        for (prefix, key), asked in plan.keys.items():
            stored = self._objects.get(prefix, key)
            obj = EMPTY if stored is None else stored
            values = set(obj.dots())
            extra = tuple(d for d in asked if d not in values)
            objects.append(SyncObject(prefix, key, obj.container(), extra))
        self._stats["objects_served"] += len(objects)
        gc_wm = self._membership.unsent(sender) if plan.done and not self.GC_NEEDS_AGREED_VIEWS else None
        reply = SyncReply(request.xid, plan.done, plan.missing, self._clock.base_vv(), tuple(objects), plan.gaps,
                          gc_wm, self._membership.view)
        out.append(SendTo(sender, reply))

    def _served_size(self, prefix_key: tuple[str, Key]) -> int:
        """About how many bytes the object of a key takes in an anti-entropy reply (values, dots, context)."""
        prefix, key = prefix_key
        obj = self._objects.get(prefix, key)
        if obj is None:
            return 64
        return len(pack_value([prefix, key, obj.values()])) + 48 * (len(obj.versions) + len(obj.ctx))

    def _learn_clock(self, peer: str, clock: NodeClock, view: bytes | None) -> None:
        """Record in the watermark what ``peer`` holds, as its message said.  With GC_NEEDS_AGREED_VIEWS, only
        from a message sent under the same membership view as ours (section 4 of docs/replication.md: a peer
        that knew a member we do not know may have served it versions we are about to collect the deletes of)."""
        self._reports.record(peer, clock)
        if self.GC_NEEDS_AGREED_VIEWS and view != self._membership.view:
            self._stats["views_differ"] += 1
            return
        self._membership.learn(peer, clock)

    # -- anti-entropy: requester ------------------------------------------------------------------------
    def exchange_now(self, peer: str | None, now: float, wall: float | None = None) -> list[Output]:
        """Start an exchange with ``peer`` (None: a random reachable member) right away, or as soon as a
        running one ends (at most ``max_exchanges`` run at once, one per peer).  Unknown or unreachable
        peers are ignored."""
        self._clock_in(now, wall)
        out: list[Output] = []
        if peer is None:
            usable = self._membership.usable()
            if not usable:
                return out
            peer = self._rng.choice(usable)
        if not self._membership.reachable_member(peer):
            return out
        self._scheduler.urge(peer)
        self._maybe_start(now, out)
        return out

    def _maybe_start(self, now: float, out: list[Output]) -> None:
        """Start the queued exchanges the scheduler lets run now, each with its first request."""
        for ex in self._scheduler.start_queued(now, self._membership.reachable_member):
            self._stats["exchanges_started"] += 1
            self._send_request(ex, now, out)

    def _send_request(self, ex: Exchange, now: float, out: list[Output]) -> None:
        request = SyncRequest(ex.xid, self._batch, self._clock.current(), None, self._membership.view)
        ex.sent(len(messages.encode(request)), now)
        out.append(SendTo(ex.peer, request))

    def _on_reply(self, ex: Exchange, reply: SyncReply, now: float, out: list[Output]) -> None:
        if not self._clock.plausible(reply.runs(), self.MAX_AHEAD):
            self._stats["implausible_refused"] += 1
            self._teardown(ex, "rejected:implausible_dots", now, out)
            return
        gap_count = sum(len(c) for c in reply.gaps.values())
        if gap_count:
            # Gaps first: they are the contiguous runs below the objects' dots.  Checkpointed at once: later
            # writes strip contexts with this clock and later requests announce it, and peers collect on it.
            self._clock.see_runs(reply.gaps)
            self._stats["gap_dots"] += gap_count
            if self.CHECKPOINT_GAPS_AT_ONCE:
                out.append(clock_row(self._clock.current()))
        ex.applying(reply, now)
        self._apply_slice(ex, self.APPLY_SLICE, now, out)

    def _apply_slice(self, ex: Exchange, budget: int, now: float, out: list[Output]) -> int:
        """Apply the next objects of the reply ``ex`` is applying, up to ``budget`` units of work (an object
        counts one plus its versions and extra dots; at least one object), then, once the reply is applied in
        full, end its step (:meth:`_end_reply`).  Returns the work done."""
        reply = ex.reply
        if reply is None:  # pragma: no cover - only APPLYING exchanges are passed
            raise RuntimeError(f"exchange {ex.xid} applies no reply")
        objects, i, work, repaired = reply.objects, ex.applied, 0, 0
        while i < len(objects) and (work < budget or not work):
            obj = objects[i]
            i += 1
            work += 1 + len(obj.container) + len(obj.extra)
            try:
                key = check_key(obj.prefix, obj.key)
            except InvalidKeyError:
                continue
            remote = CausalContainer(obj.container.items(), obj.container.context().merge(reply.base))
            if self._apply(obj.prefix, key, remote, (*obj.container.dots(), *obj.extra), "exchange", out):
                repaired += 1
        ex.progress(i, repaired, now)
        if i == len(objects):
            self._end_reply(ex, reply, now, out)
        return work

    def _continue_replies(self, now: float, out: list[Output]) -> bool:
        """Apply the next slice of the replies being applied (one budget per call, shared in exchange order).
        Returns whether an exchange completed (it ran GC)."""
        budget, completed = self.APPLY_SLICE, False
        for ex in sorted(self._scheduler.applying(), key=lambda e: e.xid):
            if budget <= 0:
                break
            budget -= self._apply_slice(ex, budget, now, out)
            completed = completed or ex.result == "ok"
        return completed

    def _end_reply(self, ex: Exchange, reply: SyncReply, now: float, out: list[Output]) -> None:
        """The reply is applied in full: account for it, then ask for the next batch or complete the exchange."""
        repaired = ex.reply_repaired
        self._stats["objects_received"] += len(reply.objects)
        self._stats["objects_repaired"] += repaired
        ex.received(
            size=reply.size, missing=reply.missing, objects=len(reply.objects), repaired=repaired,
            gaps=sum(len(c) for c in reply.gaps.values()),
        )
        self._learn_clock(ex.peer, clock_of_base(reply.base), reply.view)
        if not reply.done:
            self._send_request(ex, now, out)
            return
        if reply.watermark is not None and not self.GC_NEEDS_AGREED_VIEWS:
            self._membership.adopt(reply.watermark)
        if ex.gaps and not self.CHECKPOINT_GAPS_AT_ONCE:
            out.append(clock_row(self._clock.current()))
        self._teardown(ex, "ok", now, out)
        self._scheduler.pulled(ex.peer, self._membership.usable(), found_something=bool(ex.repaired or ex.gaps))
        checkpoint = self._clock.asked(ex.peer)
        if checkpoint is not None:
            out.append(clock_row(checkpoint))
        self._gc(now, out)

    def _teardown(self, ex: Exchange, result: str, now: float, out: list[Output]) -> None:
        """The one way an exchange ends (success, timeout, reject, peer unreachable or removed): it is
        dropped and logged; nothing else of it remains."""
        if not self._scheduler.end(ex):
            return
        fields = ex.teardown(result, now)
        fields["hlc"] = self.hlc.now(self._wall).to_list()
        self._stats["exchanges_completed" if result == "ok" else "exchanges_failed"] += 1
        out.append(Logged("md_exchange", fields))

    # -- time -------------------------------------------------------------------------------------------
    def on_timer(self, now: float, wall: float | None = None) -> list[Output]:
        """Tear down a stuck exchange, apply the next slice of the replies being applied, write back owned
        siblings, start the periodic exchange with a random reachable member (every ``sync_interval`` with
        jitter), run GC (and the next slice of its re-strips while some are left)."""
        self._clock_in(now, wall)
        out: list[Output] = []
        for ex, reason in self._scheduler.stuck(now):
            self._teardown(ex, reason, now, out)
        collected = self._continue_replies(now, out)  # an exchange that completes runs GC: one GC per call
        if self._writebacks.due(now):
            self._do_writebacks(out)
        self._scheduler.tick(now, self._membership.usable(), self._clock.asking)
        if collected:
            pass
        elif self._next_gc is None or now >= self._next_gc:
            self._next_gc = now + self._gc_interval
            self._gc(now, out)
        elif self._pruning or self._objects.strippable(self._clock.base):
            self._gc(now, out)  # the next slice of forgotten dots or re-strips
        self._maybe_start(now, out)
        return out

    def _do_writebacks(self, out: list[Output]) -> None:
        for prefix, key in self._writebacks.take():
            obj = self._objects.get(prefix, key)
            if obj is None or len(obj) < 2 or not self._owns(obj.dots()):
                continue
            winner = self._resolve(prefix, obj)
            self._local_write(prefix, key, winner, pack_value(winner), out, writeback=True)
            self._stats["writebacks"] += 1

    # -- GC ---------------------------------------------------------------------------------------------
    def _gc(self, now: float, out: list[Output]) -> None:
        """Forget the non-live dots every member holds (at most ``PRUNE_SLICE`` per call); re-strip contexts the
        node clock now covers (at most ``RESTRIP_SLICE`` objects per call); :meth:`next_deadline` is due at once
        while either has more left. Drop the rows of deletes that every member has seen."""
        self._stats["gc_runs"] += 1
        self._membership.prepare_gc(self._index.pending_nodes(), self._clock.current())
        floor = self._membership.watermark.min
        pruned = self._index.prune(floor, self.PRUNE_SLICE)
        self._pruning = self._index.prunable(floor)
        keys_deleted = 0
        if pruned:
            out.append(clock_row(self._clock.current()))
            for dot, fk, last in pruned:
                out.append(pending_dot_row(dot, None))
                if last and self._objects.get(*fk) is None:
                    keys_deleted += 1
        for fk, stripped in self._objects.restripped(self._clock.base, self.RESTRIP_SLICE):
            self._store(fk, stripped, out)
            if stripped.is_empty() and not self._index.awaits(fk):
                keys_deleted += 1
        if pruned:
            self._persist_watermark(out)  # restoring an older watermark is safe: it only delays GC
        if pruned or keys_deleted:
            self._stats["gc_dots_pruned"] += len(pruned)
            self._stats["gc_keys_deleted"] += keys_deleted
            hlc = self.hlc.now(self._wall).to_list()
            out.append(Logged("md_gc", {"dots_pruned": len(pruned), "keys_deleted": keys_deleted, "hlc": hlc}))

    def _persist_watermark(self, out: list[Output]) -> None:
        watermark = self._membership.unsaved()
        if watermark is not None:
            out.append(watermark_row(watermark))
