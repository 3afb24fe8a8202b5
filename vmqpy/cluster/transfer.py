"""The session transfer: an old owner hands a session over to its new owner node, image first, then its messages.

The new owner X asks the old owner O (`handover`, while X holds the client id's lock: vmqpy.cluster.registration).
O stops the old connection (5.0: DISCONNECT 0x8E) and answers with the session's image (subscriptions,
incoming QoS 2 state: `mig_begin`), then its messages in batches, in order, with their packet ids
(`mig_batch`), and says when the messages it held at that moment are sent (`mig_ready`). X's CONNACK waits
for that (at most HANDOVER_TIMEOUT).

Every batch is acknowledged by X once it is on X's disk (`mig_ack`), and only then does O forget it; a batch
that is sent twice (a link that broke and came back) is recognised by its sequence numbers and taken once.
Messages that still reach O (routed by nodes that have not yet seen the subscriptions move) follow in later
batches; O lets the session go once nothing routes to it and everything it held was acknowledged. A batch not
acknowledged after RESEND_AFTER is sent again; a transfer that cannot finish within MIGRATION_LIMIT is
abandoned and the session stays at O.

The same transfer, without a CONNECT (O starts it: `on_moving`), moves the session of a duplicate client id to
the winner after a heal, reconciles an old owner that was unreachable during a takeover, and empties a node
that leaves (`-k`).

Frames are CONTROL frames with these `op`s: handover (X asks O), mig_begin / mig_batch / mig_ready (O to X),
mig_ack (X to O).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from vmqpy.client_metrics import HANDOVER_DURATION
from vmqpy.cluster.handover_batches import handover_batches
from vmqpy.cluster.ports import BrokerPort
from vmqpy.sessions.handover import SessionImage, Ticket, pack_messages, unpack_messages
from vmqpy.sessions.owners import UNKNOWN_USER, pack_user, unpack_user
from vmqpy.sessions.parts import Outgoing
from vmqpy.sessions.remote import RemoteWait
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.registration")

HANDOVER_TIMEOUT = 5.0  # waiting for the old owner's messages before CONNACK
RESEND_AFTER = 3.0  # a batch not acknowledged after this long is sent again
MIGRATION_LIMIT = 600.0  # a handover that cannot finish for this long is abandoned (the session stays)
POLL = 0.05


class ControlLinks(Protocol):
    """What registration and the session transfer need of the cluster (vmqpy.cluster.service.ClusterService)."""

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


class SessionTransfer:
    """Both ends of the session transfer of one node: the new owner's (`take_over`, `connected`) and the old
    owner's (`on_moving`, the `handover` frame)."""

    def __init__(self, links: ControlLinks, broker: BrokerPort, storage: Storage | None, ids: Iterator[int]) -> None:
        """`ids` numbers the transfers this node starts (shared with registration's lock requests, whose number
        is the migration of the transfer they ask for)."""
        self.links = links
        self.name = links.name
        self.broker = broker
        self.storage = storage
        self._ids = ids
        self._tasks: set[asyncio.Task[None]] = set()  # the senders of the sessions handed over from here
        self.counters: dict[str, int] = {
            "handovers_requested": 0, "handover_timeouts": 0, "handover_batches_sent": 0,
            "handover_batches_received": 0, "handover_duplicates_ignored": 0,
        }
        # the handover duration histogram (vmqpy.client_metrics): from asking the old owner to the CONNACK
        self.histograms: Counter[str] = Counter()
        self._tickets: dict[tuple[str, int], tuple[Ticket, asyncio.Future[None]]] = {}  # (old owner, migration)
        self._incoming: dict[tuple[str, int], _Incoming] = {}
        self._outgoing: dict[str, _Outgoing] = {}  # client id -> handover in progress from here
        # queue replicas: wait until a session recreated without its messages adopted their copies (node.py)
        self.recovery: Callable[[str], Awaitable[None]] | None = None

    def resume(self) -> None:
        """After a restart: sessions kept here whose owner record names another member were moving (or their
        client registered elsewhere while this node was down): hand them over now."""
        for session in self.broker.local_sessions():
            client_id = session.client_id
            owner = self.broker.owner_of(client_id)
            if owner is not None and owner != self.name and self.broker.move_session(client_id, owner):
                log.info("resuming the handover of a session kept here", client_id=client_id, to=owner)

    async def stop(self) -> None:
        """Cancel the senders (a handover not finished resumes after a restart: `resume`)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    def in_progress(self) -> int:
        """How many sessions this node is handing over now."""
        return len(self._outgoing)

    # ------------------------------------------------------------------------------------------ the new owner

    async def take_over(self, ticket: Ticket, owner: str, clean_start: bool, user: str | None = UNKNOWN_USER) -> None:
        """With the client id's lock held: have `owner` hand the session over into `ticket`, or recreate it from
        the store when `owner` is unreachable or does not answer in time (reconciled when it is back)."""
        client_id = ticket.client_id
        if not self.links.is_reachable(owner):
            # Reconciled when it is reachable again: it sees the new owner record and hands over then.
            log.info("previous owner unreachable: registering without its messages", client_id=client_id,
                     owner=owner)
            ticket.image = None if clean_start else self.broker.image_from_store(client_id)
            await self._recovered(ticket)
            return
        self.counters["handovers_requested"] += 1
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tickets[(owner, ticket.request)] = (ticket, ready)
        self._incoming[(owner, ticket.request)] = _Incoming(client_id)
        ticket.source = owner
        ticket.asked_at = time.monotonic()
        self.links.send_control(owner, {"op": "handover", "client_id": client_id, "migration": ticket.request,
                                        "clean": clean_start, "user": pack_user(user)})
        try:
            await asyncio.wait_for(asyncio.shield(ready), HANDOVER_TIMEOUT)
        except TimeoutError:
            self.counters["handover_timeouts"] += 1
            log.warning("previous owner did not hand the session over in time", client_id=client_id, owner=owner)
        if ticket.image is None and not clean_start and not ticket.foreign and not ticket.moving:
            # it never answered (gone, or cut off)
            ticket.image = self.broker.image_from_store(client_id)
            await self._recovered(ticket)

    async def _recovered(self, ticket: Ticket) -> None:
        """The messages of a session recreated from the store are adopted from the queue replicas first (so that
        in-flight ones keep their packet ids and are sent again with DUP)."""
        if ticket.image is not None and self.recovery is not None:
            await self.recovery(ticket.client_id)

    def connected(self, ticket: Ticket, live: bool, now: float) -> None:
        """The CONNECT completed (`live`: the owner record is written) or failed at monotonic time `now`: take
        the messages that came early and acknowledge them once on disk."""
        source = ticket.source
        if source is None:
            return
        self._tickets.pop((source, ticket.request), None)
        if live and ticket.asked_at is not None:  # the session is live here now: observed once
            HANDOVER_DURATION.observe_ns(self.histograms, round((now - ticket.asked_at) * 1e9))
            ticket.asked_at = None
        if ticket.stash:
            self._take(source, ticket.request, ticket.client_id, ticket.stash, time.time())
            ticket.stash = []

    def _take(self, source: str, migration: int, client_id: str, outs: list[Outgoing], now: float) -> None:
        """Messages handed over to a session here (at wall-clock time `now`): keep the new ones, acknowledge once
        on disk."""
        incoming = self._incoming.setdefault((source, migration), _Incoming(client_id))
        fresh = [o for o in outs if o.seq > incoming.upto]
        self.counters["handover_duplicates_ignored"] += len(outs) - len(fresh)
        if fresh:
            if not self.broker.adopt_messages(client_id, fresh, now, source=source):
                self.broker.adopt_offline(SessionImage(client_id, True, source=source), now)
                self.broker.adopt_messages(client_id, fresh, now, source=source)
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
        task = asyncio.get_running_loop().create_task(self._hand_over(state))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
                now = time.monotonic()
                if state.sent_upto > state.acked_upto and now - state.last_ack > RESEND_AFTER:
                    state.sent_upto = state.acked_upto  # send again what was not acknowledged
                    state.last_ack = now
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
        """One of CONTROL_OPS from `peer`; a malformed body raises KeyError, TypeError or ValueError."""
        self._handlers[str(body["op"])](self, peer, body)

    def _on_handover(self, peer: str, body: dict[str, Any]) -> None:
        client_id, migration = str(body["client_id"]), int(body["migration"])
        # a node of an earlier version names no user: UNKNOWN_USER, and the session is handed over as before
        image = self.broker.hand_over(client_id, bool(body["clean"]), peer, time.time(), unpack_user(body.get("user")))
        begin = {"op": "mig_begin", "client_id": client_id, "migration": migration, "image": image.pack(),
                 "stamp": self.broker.owner_stamp(client_id)}
        if image.foreign:
            begin["foreign"] = True
        if image.moving:
            begin["moving"] = True
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
            elif body.get("moving"):
                pending[0].moving = True
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
        self._take(peer, migration, client_id, outs, time.time())

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

    _handlers: dict[str, Callable[[SessionTransfer, str, dict[str, Any]], None]] = {
        "handover": _on_handover, "mig_begin": _on_mig_begin, "mig_batch": _on_mig_batch,
        "mig_ready": _on_mig_ready, "mig_ack": _on_mig_ack,
    }
    #: the CONTROL ops of the transfer (registration's `on_control` passes them on here)
    CONTROL_OPS: tuple[str, ...] = tuple(_handlers)

    # ------------------------------------------------------------------------------------------ reachability

    def on_reachability(self, peer: str, reachable: bool) -> None:
        """A sender waiting for `peer` goes on when it is back; a new owner waiting for `peer`'s messages goes
        on without the rest when it is gone (reconciled when it is back)."""
        if reachable:
            for state in self._outgoing.values():
                if state.target == peer:
                    state.wake.set()
            return
        for (source, _migration), (_ticket, ready) in list(self._tickets.items()):
            if source == peer and not ready.done():
                ready.set_result(None)


__all__ = ["HANDOVER_TIMEOUT", "MIGRATION_LIMIT", "RESEND_AFTER", "ControlLinks", "SessionTransfer"]
