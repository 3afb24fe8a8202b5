"""One node's replica of the metadata store: a sans-I/O state machine (server-wide clocks).

:class:`Replica` is :class:`~vmqpy.metadata.state.ReplicaState` (the data, node clock, dot index, members,
watermark, and the reads) plus every way that state changes: local writes, applying what peers send (pushes,
exchange replies), answering exchange requests, the exchanges it starts (:mod:`~vmqpy.metadata.scheduler`),
membership and reachability changes, write-backs (:mod:`~vmqpy.metadata.writeback`) and garbage collection
(design: ``docs/replication.md``).  Each such call returns :mod:`~vmqpy.metadata.outputs` for the driver;
time (``now``, seconds) and randomness (the seeded ``rng``) are inputs, so the same inputs give the same outputs.

Driver contract: apply ``Persist`` outputs (:mod:`~vmqpy.metadata.rows`) in the order given, and make them
durable before a later ``SyncRequest``/``SyncReply`` leaves the node (those carry the node clock, and peers
garbage-collect on what the clock claims).  After every call, re-read :meth:`Replica.next_deadline`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import msgpack

from dvv.causal_container import CausalContainer
from dvv.dots import Dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from vmqpy.metadata import messages
from vmqpy.metadata.errors import InvalidKeyError
from vmqpy.metadata.exchange import Exchange, plan_reply
from vmqpy.metadata.messages import (
    Key,
    Push,
    StoreMessage,
    SyncObject,
    SyncReject,
    SyncReply,
    SyncRequest,
    check_key,
)
from vmqpy.metadata.objects import EMPTY, NO_CONTEXT, FullKey, StoredObject
from vmqpy.metadata.outputs import Changed, Logged, Output, Persist, Send
from vmqpy.metadata.replica_clock import clock_of_base
from vmqpy.metadata.resolve import stamp_list
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
    object_row,
    pack_container,
    pack_full_key,
    pack_single,
    pack_value,
    pending_dot_row,
    reservation_row,
    watermark_row,
)
from vmqpy.metadata.state import ReplicaState

__all__ = [
    "META_CLOCK",
    "META_RESERVED",
    "META_WATERMARK",
    "T_DOTS",
    "T_META",
    "T_OBJ",
    "Changed",
    "InvalidValueError",
    "Key",
    "Logged",
    "Output",
    "Persist",
    "Replica",
    "Send",
]


class Replica(ReplicaState):
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

    # -- local writes -----------------------------------------------------------------------------------
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
        packed = pack_value(value)
        value = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, value, packed, out, writeback=False)
        self._stats["puts"] += 1
        return out

    def delete(self, prefix: str, key: Key, now: float, wall: float | None = None) -> list[Output]:
        """Delete the key: removes every version this node has seen (a concurrent write elsewhere survives)."""
        key = check_key(prefix, key)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, None, None, out, writeback=False)
        self._stats["deletes"] += 1
        return out

    # -- write path -------------------------------------------------------------------------------------
    def _local_write(
        self, prefix: str, key: Key, value: Any, packed: bytes | None, out: list[Output], *, writeback: bool
    ) -> None:
        """fill -> discard (this node's whole context) -> new dot -> add -> strip -> store -> index -> push.

        Discarding with the local object's filled context drops every version this node holds, so
        the new object is just ``{dot: value}`` (nothing for a delete) with context filled + {dot}."""
        fk = (prefix, key)
        node = self.node_id
        stored = self._objects.get(prefix, key)
        old = self._resolve(prefix, stored)
        context = dict(self._clock.base)  # the filled context the write supersedes
        if stored is not None and stored.ctx:
            for n, c in stored.ctx.items():
                if c > context.get(n, 0):
                    context[n] = c
        counter, reserved = self._clock.issue()
        dot = (node, counter)
        if reserved is not None:
            out.append(reservation_row(reserved))
        base_d = self._clock.base
        if stored is None or not stored.ctx:
            rest_ctx = NO_CONTEXT if base_d.get(node, 0) >= counter else VersionVector({node: counter})
        else:
            rest_ctx = stored.ctx.add(dot).filter_ids(lambda n, c: c > base_d.get(n, 0))
        at_rest = StoredObject(() if value is None else ((dot, value),), rest_ctx)
        fkb = pack_full_key(prefix, key)
        # index: the versions this write supersedes (and a delete's own dot) wait for GC
        if stored is not None:
            for old_dot in stored.dots():
                self._supersede(old_dot, fk, fkb, out)
        self._index.add(dot, fk)
        if value is None:
            self._supersede(dot, fk, fkb, out)
        self._store(fk, at_rest, out, fkb, None if at_rest.is_empty() else pack_single(node, counter, packed, rest_ctx))
        if value != old:
            out.append(Changed(prefix, key, old, value))
        stamp = stamp_list(value)
        if stamp is not None:
            self.hlc.witness_parts(stamp[0], stamp[1])
        else:
            stamp = self.hlc.now(self._wall).to_list()
        fields: dict[str, Any] = {"prefix": prefix, "key": key, "dot": [node, counter],
                                  "op": "delete" if value is None else "put", "value": packed, "context": context,
                                  "hlc": stamp}
        if writeback:
            fields["writeback"] = True
        out.append(Logged("md_write", fields))
        self._writebacks.drop(fk)
        reachable = self._membership.reachable
        if reachable:
            push = Push(prefix, key, dot, value, context)
            for peer in self._membership.peers:
                if peer in reachable:
                    out.append(Send(peer, push))
                    self._stats["pushes_sent"] += 1

    def _supersede(self, dot: Dot, fk: FullKey, fkb: bytes | None, out: list[Output]) -> None:
        """``dot`` (indexed under ``fk``) is no longer live: keep it indexed until every peer holds it."""
        self._index.supersede(dot, fk)
        out.append(pending_dot_row(dot, fkb if fkb is not None else pack_full_key(*fk)))

    def _store(
        self, fk: FullKey, at_rest: StoredObject, out: list[Output], fkb: bytes | None = None, row: bytes | None = None
    ) -> None:
        """Keep ``at_rest`` (stripped) as the key's object and persist it; an empty one is dropped."""
        if self._objects.keep(fk, at_rest):
            value = None if at_rest.is_empty() else row or pack_container(at_rest)
            out.append(object_row(fkb or pack_full_key(*fk), value))

    # -- receive path -----------------------------------------------------------------------------------
    def _apply(
        self, prefix: str, key: Key, remote: CausalContainer, dots: Iterable[Dot], via: str, out: list[Output]
    ) -> bool:
        """Merge a *filled* remote container; ``dots`` are the dots it brings (its versions' dots plus
        the write's or the requested ones).  Returns True when the key's versions changed."""
        fk = (prefix, key)
        stored = self._objects.get(prefix, key)
        fresh = self._clock.unseen(dots)
        local = EMPTY if stored is None else stored
        local_filled = CausalContainer(local.versions, local.ctx.merge(self._clock.base_vv()))
        synced = local_filled.sync(remote)
        if fresh:
            self._clock.see(fresh)
        before = set(local.dots())
        after = synced.dots()
        after_set = set(after)
        changed = before != after_set
        at_rest = StoredObject.of(synced.strip(self._clock.current()))
        if not fresh and at_rest == local:
            return False
        # index: versions that lost their place wait for GC; new versions are live; other new dots wait
        for d in local.dots():
            if d not in after_set:
                self._supersede(d, fk, None, out)
        for d in fresh:
            self._index.add(d, fk)
            if d not in after_set:
                self._supersede(d, fk, None, out)
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
            fields = {"origin": newest[0], "prefix": prefix, "key": key, "dot": [newest[0], newest[1]], "via": via,
                      "siblings": len(after), "hlc": self.hlc.now(self._wall).to_list()}
            out.append(Logged("md_apply", fields))
            self._stats["objects_applied"] += 1
        if len(after) > 1 and self._writebacks.enabled and self._owns(after):
            self._writebacks.want(fk, self._now)
        elif len(after) <= 1:
            self._writebacks.drop(fk)
        return changed

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

    # -- anti-entropy: responder ------------------------------------------------------------------------
    def _serve(self, sender: str, request: SyncRequest, out: list[Output]) -> None:
        """Responder side (stateless): the objects for the dots ``sender`` misses, at most a batch."""
        if sender not in self._membership.members or sender == self.node_id:
            self._stats["requests_rejected"] += 1
            out.append(Send(sender, SyncReject(request.xid, "not_a_member")))
            return
        theirs, mine = request.clock.entry(sender), self._clock.current().entry(sender)
        if theirs[0] + theirs[1].bit_length() < mine[0] + mine[1].bit_length():
            # The requester lost writes it coordinated (a wiped store under an old id): its next
            # counters would name writes we already hold.  It must come back under a new node id.
            self._stats["requests_rejected"] += 1
            out.append(Send(sender, SyncReject(request.xid, "reused_node_id")))
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
        out.append(Send(sender, reply))

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
        out.append(Send(ex.peer, request))

    def _on_reply(self, ex: Exchange, reply: SyncReply, now: float, out: list[Output]) -> None:
        repaired = 0
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
        for obj in reply.objects:
            try:
                key = check_key(obj.prefix, obj.key)
            except InvalidKeyError:
                continue
            remote = CausalContainer(obj.container.items(), obj.container.context().merge(reply.base))
            if self._apply(obj.prefix, key, remote, (*obj.container.dots(), *obj.extra), "exchange", out):
                repaired += 1
        self._stats["objects_received"] += len(reply.objects)
        self._stats["objects_repaired"] += repaired
        ex.received(
            size=reply.size, missing=reply.missing, objects=len(reply.objects), repaired=repaired, gaps=gap_count
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
        """Tear down a stuck exchange, write back owned siblings, start the periodic exchange with a
        random reachable member (every ``sync_interval`` with jitter), run GC."""
        self._clock_in(now, wall)
        out: list[Output] = []
        for ex, reason in self._scheduler.stuck(now):
            self._teardown(ex, reason, now, out)
        if self._writebacks.due(now):
            self._do_writebacks(out)
        self._scheduler.tick(now, self._membership.usable(), self._clock.asking)
        if self._next_gc is None or now >= self._next_gc:
            self._next_gc = now + self._gc_interval
            self._gc(now, out)
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
        """Forget the non-live dots every member holds; re-strip contexts the node clock now covers;
        drop the rows of deletes that every member has seen."""
        self._stats["gc_runs"] += 1
        self._membership.prepare_gc(self._index.pending_nodes(), self._clock.current())
        pruned = self._index.prune(self._membership.watermark.min)
        keys_deleted = 0
        if pruned:
            out.append(clock_row(self._clock.current()))
            for dot, fk, last in pruned:
                out.append(pending_dot_row(dot, None))
                if last and self._objects.get(*fk) is None:
                    keys_deleted += 1
        for fk, stripped in self._objects.restripped(self._clock.base):
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
