"""The rebalancer of this node's persistent sessions' queue replicas: the asyncio side of rebalance.py.

Once after the node starts and after every membership change (a member added or removed, or a member's new
incarnation: its disk is empty) it walks the persistent sessions this node owns, `queue.rebalance_rate` per
second and at most MAX_SYNCING at a time, and for each one sends a `sync` (its whole state, taken from the
in-memory session, which is what its journal holds) to the replica nodes that lack a complete copy; once they
all acknowledged it, the nodes that are no longer replica nodes drop theirs (owner.py keeps writing to them
until then). Each session is first looked at without a share of the rate (up to CHEAP_PER_TICK per tick): one
that needs no sync is done there (a drop, its placement), so the sessions a change did not touch leave the
walk at once, and only those that need a sync wait for the rate. A replica node that is unreachable when its
session is looked at gets no sync then: the session keeps every copy it has, waits for that node (`_deferred`)
and is looked at again when it is reachable, so one unreachable member does not hold up the walk for the others.
Sessions not yet looked at, sessions whose sync is not yet acknowledged and sessions waiting for an unreachable
replica node are the under-replicated ones (`stats()`).
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from vmqpy.broker.core.session import Session
from vmqpy.replicas.owner import QueueReplicator
from vmqpy.replicas.rebalance import Walk, plan
from vmqpy.sessions.handover import outgoing_record
from vmqpy.sessions.message import encode_record

__all__ = ["Rebalancer", "snapshot"]

log = structlog.get_logger("vmqpy.replicas")

TICK = 0.05  # seconds between two slices of the walk
MAX_SYNCING = 1000  # sessions whose sync is not yet acknowledged: the walk waits while there are more
CHEAP_PER_TICK = 1000  # sessions a tick looks at before the rate (about 20 ms of CPU; those needing no sync end there)


def snapshot(session: Session, record: bytes | None = None) -> tuple[bytes, list[int], list[tuple[int, bytes]]]:
    """What `session`'s journal holds (vmqpy.broker.core.persistence records): its session record (`record`: as the
    journal stored it, with its will; else the three plain fields), its incoming QoS 2 packet ids, its messages
    (in flight, and queued QoS 1/2) by seq."""
    if record is None:
        record = encode_record([session.protocol_level, session.expiry_interval, session.disconnected_at])
    outs = list(session.inflight.values()) + [out for out in session.queue if out.qos > 0]
    messages = [(out.seq, encode_record(outgoing_record(out))) for out in sorted(outs, key=lambda o: o.seq)]
    return record, sorted(session.awaiting_release), messages


@dataclass(slots=True)
class _Syncing:
    session: Session
    targets: list[str]
    drop: list[str]
    left: set[str]
    failed: set[str] = field(default_factory=set)


class Rebalancer:
    """Moves the copies of this node's persistent sessions when the membership changes (module doc)."""

    def __init__(self, replicator: QueueReplicator, sessions: Mapping[str, Session], journal: object,
                 incarnations: Callable[[], dict[str, int]], rate: float,
                 reachable: Callable[[str], bool] = lambda node: True,
                 lineage_of: Callable[[str], bytes | None] = lambda client_id: None) -> None:
        """`sessions`: the broker's; a session is this node's persistent one when its journal is `journal`.
        `incarnations()`: the members and their incarnations; `reachable(node)`: whether a sync can reach it;
        `lineage_of(client_id)`: the session's lineage as a `lin` operation carries it (a sync includes it)."""
        self._replicator = replicator
        self._lineage_of = lineage_of
        self._reachable = reachable
        self._deferred: dict[str, set[str]] = {}  # client id -> its replica nodes that were unreachable
        self._sessions = sessions
        self._journal = journal
        self._incarnations = incarnations
        self._walk = Walk(rate)  # the sessions that need a sync, at the rate
        self._unsorted = Walk(math.inf)  # the sessions to look at first, before the rate (cheap ones end there)
        self._fresh: set[str] = set()  # client ids whose every replica node gets a sync (this node started)
        self._reborn: set[str] = set()  # members that came back with a new incarnation during this rebalance
        self._known: dict[str, int] = {}
        self._members: tuple[str, ...] = ()
        self._syncing: dict[str, _Syncing] = {}
        self._task: asyncio.Task[None] | None = None
        self.on_edge: Callable[[], None] | None = None  # a walk began or ended (the audit samples then)
        self.counters = {"rebalance_syncs": 0, "rebalance_drops": 0, "rebalance_failed": 0, "rebalances": 0,
                         "rebalance_deferred": 0}

    # ------------------------------------------------------------------------------------------ triggers

    def start(self) -> None:
        """This node started: every session's replica nodes get its whole state."""
        self._known = dict(self._incarnations())
        owned = self._owned()
        self._fresh.update(owned)
        self._begin(owned)

    def on_membership(self) -> None:
        """The members (or one's incarnation) changed: look at every session again."""
        now = dict(self._incarnations())
        if now == self._known:
            return
        self._reborn.update(n for n, inc in now.items() if n in self._known and self._known[n] != inc)
        self._known = now
        self._begin(self._owned())

    def on_reachability(self, peer: str, reachable: bool) -> None:
        """A member is reachable again: look again at the sessions that wait for it."""
        if not reachable:
            return
        waiting = [cid for cid, nodes in self._deferred.items() if peer in nodes]
        if waiting:
            self._unsorted.restart(waiting)
            self._run_walk()
            self._edge()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _owned(self) -> list[str]:
        return [cid for cid, s in self._sessions.items() if s.journal is self._journal and s.persistent]

    def _begin(self, client_ids: list[str]) -> None:
        self.counters["rebalances"] += 1
        self._members = self._replicator.members()
        self._unsorted.restart(client_ids)
        self._run_walk()
        self._edge()

    def _edge(self) -> None:
        if self.on_edge is not None:
            self.on_edge()

    def _run_walk(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    # ------------------------------------------------------------------------------------------ the walk

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for client_id in self._unsorted.take(loop.time(), CHEAP_PER_TICK):
                if not self._try(client_id, False):
                    self._walk.restart([client_id])  # it needs a sync: at the rate
            for client_id in self._walk.take(loop.time(), MAX_SYNCING - len(self._syncing)):
                self._try(client_id, True)
            if not self._unsorted and not self._walk and not self._syncing:
                if self._members == self._replicator.members():
                    self._replicator.settle(self._members)
                    self._reborn.clear()
                    self._edge()
                    return
                self._begin(self._owned())  # the members changed under us without a hook: once more
            await asyncio.sleep(TICK)

    def _try(self, client_id: str, may_sync: bool) -> bool:
        try:
            return self._visit(client_id, may_sync)
        except Exception:  # one session's trouble must not stop the others' rebalancing
            log.exception("queue replica rebalance of a session failed", client_id=client_id)
            return True

    def _visit(self, client_id: str, may_sync: bool) -> bool:
        """Look at one session and do what it needs; False (and nothing done) when that is a sync and
        `may_sync` is not set."""
        fresh = client_id in self._fresh
        session = self._sessions.get(client_id)
        if session is None or session.journal is not self._journal or not session.persistent \
                or session.moving_to is not None or client_id in self._syncing:
            self._fresh.discard(client_id)
            self._deferred.pop(client_id, None)
            return True
        replicator = self._replicator
        targets = replicator.targets(client_id)
        holders = [n for n in replicator.holders(client_id) if n not in self._reborn]
        todo = plan(targets, holders, fresh)
        absent = {n for n in todo.sync if not self._reachable(n)}
        sync = [n for n in todo.sync if n not in absent]
        if sync and not may_sync:
            return False
        self._fresh.discard(client_id)
        self._deferred.pop(client_id, None)
        if absent:  # no sync for them now: every copy stays, and the session waits for them
            self._deferred[client_id] = absent
            self.counters["rebalance_deferred"] += len(absent)
        if sync:
            self._syncing[client_id] = _Syncing(session, list(targets), list(todo.drop), set(sync), set(absent))
            record_of = getattr(self._journal, "record_of", None)  # the SessionStore: the record with its will
            record, incoming, messages = snapshot(session, None if record_of is None else record_of(session))
            self.counters["rebalance_syncs"] += len(sync)
            replicator.sync(client_id, record, incoming, messages, sync, functools.partial(self._synced, client_id),
                            self._lineage_of(client_id))
            return True
        if absent:
            replicator.place(client_id, [n for n in targets if n not in todo.sync] + list(todo.drop))
        elif todo.drop:
            self.counters["rebalance_drops"] += len(todo.drop)
            replicator.drop_on(client_id, list(todo.drop))
            replicator.place(client_id, list(targets))
        elif fresh or sorted(holders) != sorted(targets):
            replicator.place(client_id, list(targets))
        return True

    def _synced(self, client_id: str, node: str, ok: bool) -> None:
        syncing = self._syncing.get(client_id)
        if syncing is None:
            return
        syncing.left.discard(node)
        if not ok:
            syncing.failed.add(node)
            self.counters["rebalance_failed"] += 1
            self._deferred.pop(client_id, None)  # it left: the membership change looks at the session again
        if syncing.left:
            return
        del self._syncing[client_id]
        if self._sessions.get(client_id) is not syncing.session or syncing.session.journal is not self._journal:
            return  # the session ended or moved meanwhile (its drop went to every holder)
        complete = [n for n in syncing.targets if n not in syncing.failed]
        if syncing.failed:  # keep every copy there is; the next rebalance tries again
            self._replicator.place(client_id, complete + syncing.drop)
            return
        self.counters["rebalance_drops"] += len(syncing.drop)
        self._replicator.drop_on(client_id, syncing.drop)
        self._replicator.place(client_id, complete)

    # ------------------------------------------------------------------------------------------ accounting

    def under_replicated(self) -> tuple[int, int]:
        """Sessions (and their messages) whose replica nodes are not yet confirmed to hold a complete copy:
        not yet looked at by the running rebalance, their sync not yet acknowledged, or waiting for an
        unreachable replica node."""
        client_ids = {*self._unsorted.waiting(), *self._walk.waiting(), *self._syncing, *self._deferred}
        sessions = messages = 0
        for client_id in client_ids:
            session = self._sessions.get(client_id)
            if session is None or session.journal is not self._journal:
                continue
            sessions += 1
            messages += len(session.inflight) + sum(1 for out in session.queue if out.qos > 0)
        return sessions, messages

    def stats(self) -> dict[str, int]:
        sessions, messages = self.under_replicated()
        return {**self.counters, "sessions_under_replicated": sessions, "messages_under_replicated": messages,
                "rebalance_syncing": len(self._syncing)}
