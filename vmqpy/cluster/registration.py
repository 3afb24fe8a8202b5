"""Registration of CONNECTs through a per-client-id leader, and the handover of sessions between nodes.

A CONNECT on node X asks the client id's leader (vmqpy.cluster.leader) for the id's lock (registry.py). While
X holds it, the previous owner O (named by the leader, or by X's replica of the store) stops the old
connection (5.0: DISCONNECT 0x8E) and hands the session over: an image (subscriptions, incoming QoS 2 state),
then its messages in batches, in order, with their packet ids. X answers CONNACK once the messages O held at
that moment are here, writes the new owner record, and releases the lock. Registrations of one client id are
thereby serialised by its leader: at every moment at most one live session per client id.

Every batch is acknowledged by X once it is on X's disk, and only then does O forget it; a batch that is
sent twice (a link that broke and came back) is recognised by its sequence numbers and taken once. Messages
that still reach O (routed by nodes that have not yet seen the subscriptions move) follow in later batches;
O lets the session go once nothing routes to it and everything it held was acknowledged.

The same handover, without a CONNECT, moves the session of a duplicate client id to the winner after a heal,
reconciles an old owner that was unreachable during a takeover, and empties a node that leaves (`-k`).

Frames are CONTROL frames with these `op`s: reg_lock / reg_grant / reg_busy / reg_release (with the leader),
handover (X asks O), mig_begin / mig_batch / mig_ready (O to X), mig_ack (X to O).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from vmqpy.client_metrics import HANDOVER_DURATION
from vmqpy.cluster.handover_batches import handover_batches
from vmqpy.cluster.leader import leader_for, ranking
from vmqpy.cluster.ports import BrokerPort
from vmqpy.cluster.registry import Busy, Grant, Registry
from vmqpy.sessions import records
from vmqpy.sessions.handover import RegistrationRefused, SessionImage, Ticket, pack_messages, unpack_messages
from vmqpy.sessions.owners import UNKNOWN_USER, pack_user, unpack_user
from vmqpy.sessions.parts import Outgoing
from vmqpy.sessions.remote import RemoteWait
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.registration")

LOCK_TIMEOUT = 5.0  # waiting for the leader's grant
HANDOVER_TIMEOUT = 5.0  # waiting for the old owner's messages before CONNACK
RESEND_AFTER = 3.0  # a batch not acknowledged after this long is sent again
MIGRATION_LIMIT = 600.0  # a handover that cannot finish for this long is abandoned (the session stays)
POLL = 0.05


class ControlLinks(Protocol):
    """What registration needs of the cluster (vmqpy.cluster.service.ClusterService)."""

    name: str

    def member_names(self) -> list[str]: ...

    def is_reachable(self, node: str) -> bool: ...

    def send_control(self, node: str, body: dict[str, Any]) -> bool: ...


@dataclass(slots=True)
class _Outgoing:
    """A session this node hands over: what was sent to the new owner and what it acknowledged."""

    client_id: str
    target: str
    migration: int
    solicited: bool
    sent_upto: int = 0
    acked_upto: int = 0
    last_ack: float = 0.0
    wake: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class _Incoming:
    """A session handed over to this node: the highest sequence number of the old owner taken so far, and the wait
    for the other members to route to this node (its hand-over is acknowledged only then: docs/cluster.md)."""

    client_id: str
    upto: int = 0
    routes: RemoteWait | None = None


class _LeaderLost(Exception):
    """The leader asked for a lock became unreachable before it answered."""


class RegistrationService:
    def __init__(self, links: ControlLinks, broker: BrokerPort, storage: Storage | None,
                 allow_without_leader: Callable[[], bool], majority_serves: Callable[[], bool]) -> None:
        self.links = links
        self.name = links.name
        self.broker = broker
        self.storage = storage
        self.allow_without_leader = allow_without_leader
        self.majority_serves = majority_serves
        self.registry = Registry()
        self.counters: dict[str, int] = {
            "registrations": 0, "registrations_remote_leader": 0, "registrations_without_leader": 0,
            "registrations_refused": 0, "handovers_requested": 0, "handover_timeouts": 0,
            "handover_batches_sent": 0, "handover_batches_received": 0, "handover_duplicates_ignored": 0,
        }
        # the handover duration histogram (vmqpy.client_metrics): from asking the old owner to the CONNACK
        self.histograms: Counter[str] = Counter()
        self._ids = itertools.count(int(time.time() * 1000) % 1_000_000_000 * 1000)
        # request -> (leader, its grant: the owner it knows and the stamp of that owner's record)
        self._grants: dict[int, tuple[str, asyncio.Future[tuple[str | None, Any]]]] = {}
        self._tickets: dict[tuple[str, int], tuple[Ticket, asyncio.Future[None]]] = {}  # (old owner, migration)
        self._incoming: dict[tuple[str, int], _Incoming] = {}
        self._outgoing: dict[str, _Outgoing] = {}  # client id -> handover in progress from here
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry: asyncio.Task[None] | None = None
        # queue replicas: wait until a session recreated without its messages adopted their copies (node.py)
        self.recovery: Callable[[str], Awaitable[None]] | None = None

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Expire locks from now on and resume handovers. node.py wires the service first: to the broker (as its
        registrar, its `on_moving`, and the member names) and to the owner records (`on_session_record`)."""
        self._expiry = asyncio.get_running_loop().create_task(self._expire_locks())
        self._resume_handovers()

    def _resume_handovers(self) -> None:
        """After a restart: sessions kept here whose owner record names another member were moving (or their
        client registered elsewhere while this node was down): hand them over now."""
        for session in self.broker.local_sessions():
            client_id = session.client_id
            owner = self.broker.owner_of(client_id)
            if owner is not None and owner != self.name and self.broker.move_session(client_id, owner):
                log.info("resuming the handover of a session kept here", client_id=client_id, to=owner)

    async def stop(self) -> None:
        tasks = list(self._tasks) + ([self._expiry] if self._expiry is not None else [])
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _expire_locks(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._deliver(self.registry.expire(time.monotonic()))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------------------ the new owner

    async def register(self, client_id: str, clean_start: bool, user: str | None = UNKNOWN_USER) -> Ticket:
        """Hold `client_id`'s lock and have its previous owner hand the session over (see the module doc). The
        old owner is told `user`, the connecting user: it never hands another user's session over (the
        ticket comes back `foreign` when it refused; vmqpy.sessions.owners)."""
        self.counters["registrations"] += 1
        request = next(self._ids)
        members = self.links.member_names()
        ticket = Ticket(client_id, request, None)
        owner_hint, stamp = await self._lock(ticket, members)
        # The owner record written for this connect must win over the one it replaces, even when both fall in
        # the same millisecond: its stamp is made greater than every owner record known to come before it.
        self.broker.witness(stamp)
        if owner_hint not in members:
            owner_hint = None
        owner = owner_hint or self.broker.owner_of(client_id)
        if owner is None or owner == self.name or owner not in members:
            return ticket
        if not self.links.is_reachable(owner):
            # Reconciled when it is reachable again: it sees the new owner record and hands over then.
            log.info("previous owner unreachable: registering without its messages", client_id=client_id,
                     owner=owner)
            ticket.image = None if clean_start else self.broker.image_from_store(client_id)
            await self._recovered(ticket)
            return ticket
        self.counters["handovers_requested"] += 1
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tickets[(owner, request)] = (ticket, ready)
        self._incoming[(owner, request)] = _Incoming(client_id)
        ticket.source = owner
        ticket.asked_at = time.monotonic()
        self.links.send_control(owner, {"op": "handover", "client_id": client_id, "migration": request,
                                        "clean": clean_start, "user": pack_user(user)})
        try:
            await asyncio.wait_for(asyncio.shield(ready), HANDOVER_TIMEOUT)
        except TimeoutError:
            self.counters["handover_timeouts"] += 1
            log.warning("previous owner did not hand the session over in time", client_id=client_id, owner=owner)
        if ticket.image is None and not clean_start and not ticket.foreign:  # it never answered (gone, or cut off)
            ticket.image = self.broker.image_from_store(client_id)
            await self._recovered(ticket)
        return ticket

    async def _recovered(self, ticket: Ticket) -> None:
        """The messages of a session recreated from the store are adopted from the queue replicas first (so that
        in-flight ones keep their packet ids and are sent again with DUP)."""
        if ticket.image is not None and self.recovery is not None:
            await self.recovery(ticket.client_id)

    def _leader(self, client_id: str, members: list[str]) -> str:
        """The client id's leader. With `cluster.readiness = majority`, a node on the majority side skips the
        members it cannot reach (the minority side registers nothing), so the majority keeps registering."""
        if not members:
            return self.name
        if self.majority_serves():
            for member in ranking(client_id, members):
                if self.links.is_reachable(member):
                    return member
        return leader_for(client_id, members)

    async def _lock(self, ticket: Ticket, members: list[str]) -> tuple[str | None, Any]:
        """Hold the client id's lock at its leader; the owner the leader knows and the stamp of its record.
        When the leader is found unreachable meanwhile, the choice is made again (another leader, or none when
        that is allowed)."""
        for _attempt in range(3):
            leader = ticket.leader = self._leader(ticket.client_id, members)
            future: asyncio.Future[tuple[str | None, Any]] = asyncio.get_running_loop().create_future()
            if leader == self.name:
                self._grants[ticket.request] = (leader, future)
                try:
                    grants = self.registry.request(ticket.client_id, self.name, ticket.request, time.monotonic())
                except Busy:
                    self._grants.pop(ticket.request, None)
                    raise self._refuse("too many connects of this client id are waiting") from None
                self._deliver(grants)
            elif self.links.is_reachable(leader):
                self.counters["registrations_remote_leader"] += 1
                self._grants[ticket.request] = (leader, future)
                self.links.send_control(leader, {"op": "reg_lock", "client_id": ticket.client_id,
                                                 "request": ticket.request})
            elif self.allow_without_leader():
                self.counters["registrations_without_leader"] += 1
                ticket.leader = None
                return None, None
            else:
                raise self._refuse(f"the registration leader of this client id ({leader}) is unreachable")
            try:
                return await asyncio.wait_for(future, LOCK_TIMEOUT)
            except _LeaderLost:
                continue
            except TimeoutError:
                self._release(ticket, None)
                if not self.links.is_reachable(leader):
                    continue
                raise self._refuse(f"the registration leader ({leader}) did not answer in time") from None
            finally:
                self._grants.pop(ticket.request, None)
        raise self._refuse("no registration leader could be reached")

    def _refuse(self, why: str) -> RegistrationRefused:
        self.counters["registrations_refused"] += 1
        return RegistrationRefused(why)

    def connected(self, ticket: Ticket, owner: str | None) -> None:
        """The CONNECT completed (the owner record is written) or failed: take the messages that came early,
        acknowledge them once on disk, and release the lock."""
        source = ticket.source
        if source is not None:
            self._tickets.pop((source, ticket.request), None)
            if owner is not None and ticket.asked_at is not None:  # the session is live here now: observed once
                HANDOVER_DURATION.observe_ns(self.histograms, round((time.monotonic() - ticket.asked_at) * 1e9))
                ticket.asked_at = None
            if ticket.stash:
                self._take(source, ticket.request, ticket.client_id, ticket.stash)
                ticket.stash = []
        self._release(ticket, owner)

    def _release(self, ticket: Ticket, owner: str | None) -> None:
        leader = ticket.leader
        if leader is None:
            return
        stamp = self.broker.owner_stamp(ticket.client_id) if owner is not None else None
        if leader == self.name:
            self._deliver(self.registry.release(ticket.client_id, self.name, ticket.request, owner,
                                                time.monotonic(), stamp))
        else:
            self.links.send_control(leader, {"op": "reg_release", "client_id": ticket.client_id,
                                             "request": ticket.request, "owner": owner, "stamp": stamp})

    def _take(self, source: str, migration: int, client_id: str, outs: list[Outgoing]) -> None:
        """Messages handed over to a session here: keep the new ones, acknowledge once on disk."""
        incoming = self._incoming.setdefault((source, migration), _Incoming(client_id))
        fresh = [o for o in outs if o.seq > incoming.upto]
        self.counters["handover_duplicates_ignored"] += len(outs) - len(fresh)
        if fresh:
            if not self.broker.adopt_messages(client_id, fresh, time.time(), source=source):
                self.broker.adopt_offline(SessionImage(client_id, True, source=source), time.time())
                self.broker.adopt_messages(client_id, fresh, time.time(), source=source)
            incoming.upto = fresh[-1].seq
        self._ack_when_durable(source, migration, client_id, incoming.upto)

    def _ack_when_durable(self, source: str, migration: int, client_id: str, upto: int) -> None:
        """Acknowledge the messages up to `upto` once they are on disk here and the other members route the
        session's subscriptions here: the old owner lets the session go at the last acknowledgement (a node that
        leaves is then removed), so nothing may still route there that does not pass it on."""
        incoming = self._incoming.get((source, migration))
        routes = None if incoming is None else incoming.routes
        if routes is not None and not routes.done():
            routes.add_done_callback(lambda: self._ack_when_durable(source, migration, client_id, upto))
            return
        body = {"op": "mig_ack", "client_id": client_id, "migration": migration, "upto": upto}
        if self.storage is None:
            self.links.send_control(source, body)
            return
        loop = asyncio.get_running_loop()
        future = self.storage.barrier()
        future.add_done_callback(
            lambda f: loop.call_soon_threadsafe(self._ack_if_stored, source, body, f.exception() is None))

    def _ack_if_stored(self, source: str, body: dict[str, Any], stored: bool) -> None:
        if stored:
            self.links.send_control(source, body)
        else:
            log.error("storage failed: handed-over messages not acknowledged", client_id=body["client_id"])

    # ------------------------------------------------------------------------------------------ the old owner

    def on_moving(self, client_id: str, target: str) -> None:
        """The broker gave a session up to `target` without being asked (a newer owner record arrived)."""
        self._start_handover(client_id, target, next(self._ids), solicited=False)

    def _start_handover(self, client_id: str, target: str, migration: int, solicited: bool) -> None:
        current = self._outgoing.get(client_id)
        if current is not None:
            current.wake.set()
            return
        state = _Outgoing(client_id, target, migration, solicited, last_ack=time.monotonic())
        self._outgoing[client_id] = state
        self._spawn(self._hand_over(state))

    async def _hand_over(self, state: _Outgoing) -> None:
        broker = self.broker
        loop = asyncio.get_running_loop()
        started = loop.time()
        ready_sent = False
        begun = state.solicited
        try:
            while loop.time() - started < MIGRATION_LIMIT:
                if not self.links.is_reachable(state.target):
                    state.sent_upto = state.acked_upto
                    await asyncio.sleep(0.2)
                    continue
                if not begun:
                    image = broker.moving_image(state.client_id)
                    if image is None:
                        return
                    begun = self.links.send_control(state.target, {
                        "op": "mig_begin", "client_id": state.client_id, "migration": state.migration,
                        "image": image.pack()})
                outs = broker.pending_for_handover(state.client_id, state.sent_upto)
                if outs is None:
                    return  # gone, or it stays here after all
                for batch in handover_batches(outs):
                    if not self.links.send_control(state.target, {
                            "op": "mig_batch", "client_id": state.client_id, "migration": state.migration,
                            "messages": pack_messages(batch)}):
                        break
                    self.counters["handover_batches_sent"] += 1
                    state.sent_upto = batch[-1].seq
                if not ready_sent and state.sent_upto >= (outs[-1].seq if outs else 0):
                    ready_sent = self.links.send_control(state.target, {
                        "op": "mig_ready", "client_id": state.client_id, "migration": state.migration})
                if broker.finish_handover(state.client_id):
                    log.info("session handed over", client_id=state.client_id, to=state.target)
                    return
                if state.sent_upto > state.acked_upto and time.monotonic() - state.last_ack > RESEND_AFTER:
                    state.sent_upto = state.acked_upto  # send again what was not acknowledged
                    state.last_ack = time.monotonic()
                state.wake.clear()
                try:
                    await asyncio.wait_for(state.wake.wait(), POLL * 4)
                except TimeoutError:
                    pass
            log.error("handover did not finish: the session stays here", client_id=state.client_id,
                      to=state.target)
            broker.abandon_handover(state.client_id)
        finally:
            if self._outgoing.get(state.client_id) is state:
                del self._outgoing[state.client_id]

    # ------------------------------------------------------------------------------------------ frames

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        op = body.get("op")
        handler = self._handlers.get(str(op))
        if handler is None:
            return
        try:
            handler(self, peer, body)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("malformed registration frame", peer=peer, op=op, error=str(exc))

    def _on_reg_lock(self, peer: str, body: dict[str, Any]) -> None:
        client_id, request = str(body["client_id"]), int(body["request"])
        try:
            grants = self.registry.request(client_id, peer, request, time.monotonic())
        except Busy:
            self.links.send_control(peer, {"op": "reg_busy", "client_id": client_id, "request": request})
            return
        self._deliver(grants)

    def _on_reg_release(self, peer: str, body: dict[str, Any]) -> None:
        owner = body.get("owner")
        client_id = str(body["client_id"])
        self._deliver(self.registry.release(client_id, peer, int(body["request"]),
                                            None if owner is None else str(owner), time.monotonic(),
                                            body.get("stamp")))

    def on_session_record(self, key: Any, old: Any, new: Any) -> None:
        """An owner record changed in the store (node.py subscribes this to its changes)."""
        if new is not None:
            self.registry.note_record(str(key[1]), records.session_owner(new), new[0])

    def _on_reg_grant(self, peer: str, body: dict[str, Any]) -> None:
        waiting = self._grants.get(int(body["request"]))
        owner = body.get("owner")
        if waiting is not None and waiting[0] == peer and not waiting[1].done():
            waiting[1].set_result((None if owner is None else str(owner), body.get("stamp")))
        elif waiting is None:  # the connect gave up meanwhile: give the lock back
            self.links.send_control(peer, {"op": "reg_release", "client_id": body["client_id"],
                                           "request": body["request"], "owner": None})

    def _on_reg_busy(self, peer: str, body: dict[str, Any]) -> None:
        waiting = self._grants.get(int(body["request"]))
        if waiting is not None and not waiting[1].done():
            waiting[1].set_exception(self._refuse("too many connects of this client id are waiting"))

    def _deliver(self, grants: list[Grant]) -> None:
        for grant in grants:
            if grant.node == self.name:
                waiting = self._grants.get(grant.request)
                if waiting is not None and not waiting[1].done():
                    waiting[1].set_result((grant.owner, grant.stamp))
                else:
                    self._deliver(self.registry.release(grant.client_id, self.name, grant.request, None,
                                                        time.monotonic()))
            else:
                self.links.send_control(grant.node, {"op": "reg_grant", "client_id": grant.client_id,
                                                     "request": grant.request, "owner": grant.owner,
                                                     "stamp": grant.stamp})

    def _on_handover(self, peer: str, body: dict[str, Any]) -> None:
        client_id, migration = str(body["client_id"]), int(body["migration"])
        # a node of an earlier version names no user: UNKNOWN_USER, and the session is handed over as before
        image = self.broker.hand_over(client_id, bool(body["clean"]), peer, time.time(), unpack_user(body.get("user")))
        begin = {"op": "mig_begin", "client_id": client_id, "migration": migration, "image": image.pack(),
                 "stamp": self.broker.owner_stamp(client_id)}
        if image.foreign:
            begin["foreign"] = True
        self.links.send_control(peer, begin)
        if image.present:
            self._start_handover(client_id, peer, migration, solicited=True)
        else:
            self.links.send_control(peer, {"op": "mig_ready", "client_id": client_id, "migration": migration})

    def _on_mig_begin(self, peer: str, body: dict[str, Any]) -> None:
        migration = int(body["migration"])
        image = SessionImage.unpack(body["image"], source=peer)
        pending = self._tickets.get((peer, migration))
        if pending is not None:
            if body.get("foreign"):
                pending[0].foreign = True
            else:
                pending[0].image = image
            self.broker.witness(body.get("stamp"))  # the old owner's record: the new one comes after
            return
        key = (peer, migration)
        if key not in self._incoming:
            confirm = self.broker.route_confirmation()
            self.broker.adopt_offline(image, time.time(), confirm)
            self._incoming[key] = _Incoming(image.client_id, routes=self.broker.routes_applied(confirm))
            log.info("session handed over to this node", client_id=image.client_id, by=peer)

    def _on_mig_batch(self, peer: str, body: dict[str, Any]) -> None:
        migration, client_id = int(body["migration"]), str(body["client_id"])
        outs = unpack_messages(body["messages"])
        self.counters["handover_batches_received"] += 1
        pending = self._tickets.get((peer, migration))
        if pending is not None:
            ticket = pending[0]
            last = ticket.stash[-1].seq if ticket.stash else 0
            ticket.stash.extend(o for o in outs if o.seq > last)
            return
        self._take(peer, migration, client_id, outs)

    def _on_mig_ready(self, peer: str, body: dict[str, Any]) -> None:
        pending = self._tickets.get((peer, int(body["migration"])))
        if pending is not None and not pending[1].done():
            pending[1].set_result(None)

    def _on_mig_ack(self, peer: str, body: dict[str, Any]) -> None:
        client_id = str(body["client_id"])
        state = self._outgoing.get(client_id)
        if state is None or state.target != peer or state.migration != int(body["migration"]):
            return
        upto = int(body["upto"])
        if upto > state.acked_upto:
            state.acked_upto = upto
            state.last_ack = time.monotonic()
            self.broker.handed_over(client_id, upto)
        state.wake.set()

    _handlers: dict[str, Callable[[RegistrationService, str, dict[str, Any]], None]] = {
        "reg_lock": _on_reg_lock, "reg_release": _on_reg_release, "reg_grant": _on_reg_grant,
        "reg_busy": _on_reg_busy, "handover": _on_handover, "mig_begin": _on_mig_begin,
        "mig_batch": _on_mig_batch, "mig_ready": _on_mig_ready, "mig_ack": _on_mig_ack,
    }
    #: the CONTROL ops `on_control` takes (node.py registers them in the cluster's control table)
    CONTROL_OPS: tuple[str, ...] = tuple(_handlers)

    # ------------------------------------------------------------------------------------------ reachability

    def on_reachability(self, peer: str, reachable: bool) -> None:
        if reachable:
            for state in self._outgoing.values():
                if state.target == peer:
                    state.wake.set()
            return
        self._deliver(self.registry.node_down(peer, time.monotonic()))
        for _request, (leader, future) in list(self._grants.items()):
            if leader == peer and not future.done():
                future.set_exception(_LeaderLost(peer))
        for (source, _migration), (_ticket, ready) in list(self._tickets.items()):
            if source == peer and not ready.done():
                ready.set_result(None)  # go on without the rest: reconciled when it is back

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        out.update(self.histograms)
        out["locks_held"] = len(self.registry.held)
        out["locks_expired"] = self.registry.expired
        out["handovers_in_progress"] = len(self._outgoing)
        return out


__all__ = ["RegistrationService"]
