"""Registration of CONNECTs through a per-client-id leader: the leader lock.

A CONNECT on node X asks the client id's leader (vmqpy.cluster.leader) for the id's lock (registry.py). While
X holds it, the previous owner O (named by the leader, or by X's replica of the store) hands the session over
(vmqpy.cluster.transfer). X answers CONNACK once the messages O held at that moment are here, writes the new
owner record, and releases the lock. Registrations of one client id are thereby serialised by its leader: at
every moment at most one live session per client id.

Frames are CONTROL frames with these `op`s: reg_lock / reg_grant / reg_busy / reg_release (with the leader);
the transfer's ops (`SessionTransfer.CONTROL_OPS`) arrive here too and are passed on.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from vmqpy.cluster.leader import leader_for, ranking
from vmqpy.cluster.ports import BrokerPort
from vmqpy.cluster.registry import Busy, Grant, Registry
from vmqpy.cluster.transfer import ControlLinks, SessionTransfer
from vmqpy.sessions import records
from vmqpy.sessions.handover import RegistrationRefused, Ticket
from vmqpy.sessions.owners import UNKNOWN_USER
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.registration")

LOCK_TIMEOUT = 5.0  # waiting for the leader's grant


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
            "registrations_refused": 0,
        }
        # lock requests and the transfers this node starts share one numbering
        self._ids = itertools.count(int(time.time() * 1000) % 1_000_000_000 * 1000)
        self.transfer = SessionTransfer(links, broker, storage, self._ids)
        # request -> (leader, its grant: the owner it knows and the stamp of that owner's record)
        self._grants: dict[int, tuple[str, asyncio.Future[tuple[str | None, Any]]]] = {}
        self._expiry: asyncio.Task[None] | None = None

    @property
    def recovery(self) -> Callable[[str], Awaitable[None]] | None:
        """Queue replicas: wait until a session recreated without its messages adopted their copies (node.py)."""
        return self.transfer.recovery

    @recovery.setter
    def recovery(self, recovery: Callable[[str], Awaitable[None]] | None) -> None:
        self.transfer.recovery = recovery

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Expire locks from now on and resume handovers. node.py wires the service first: to the broker (as its
        registrar, its `on_moving`, and the member names) and to the owner records (`on_session_record`)."""
        self._expiry = asyncio.get_running_loop().create_task(self._expire_locks())
        self.transfer.resume()

    async def stop(self) -> None:
        expiry = self._expiry
        if expiry is not None:
            expiry.cancel()
        await self.transfer.stop()
        if expiry is not None:
            try:
                await expiry
            except (asyncio.CancelledError, Exception):
                pass

    async def _expire_locks(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            self._deliver(self.registry.expire(now), now)

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
        await self.transfer.take_over(ticket, owner, clean_start, user)
        if ticket.moving:
            self.connected(ticket, None)  # the lock goes back: the client tries again once the session landed
            raise self._refuse("the session of this client id is moving to another node (cluster leave -k): "
                               "connect again")
        return ticket

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
                now = time.monotonic()
                try:
                    grants = self.registry.request(ticket.client_id, self.name, ticket.request, now)
                except Busy:
                    self._grants.pop(ticket.request, None)
                    raise self._refuse("too many connects of this client id are waiting") from None
                self._deliver(grants, now)
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
                self._release(ticket, None, time.monotonic())
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
        now = time.monotonic()
        self.transfer.connected(ticket, owner is not None, now)
        self._release(ticket, owner, now)

    def _release(self, ticket: Ticket, owner: str | None, now: float) -> None:
        leader = ticket.leader
        if leader is None:
            return
        stamp = self.broker.owner_stamp(ticket.client_id) if owner is not None else None
        if leader == self.name:
            self._deliver(self.registry.release(ticket.client_id, self.name, ticket.request, owner, now, stamp), now)
        else:
            self.links.send_control(leader, {"op": "reg_release", "client_id": ticket.client_id,
                                             "request": ticket.request, "owner": owner, "stamp": stamp})

    # ------------------------------------------------------------------------------------------ the old owner

    def on_moving(self, client_id: str, target: str) -> None:
        """The broker gave a session up to `target` without being asked (a newer owner record arrived)."""
        self.transfer.on_moving(client_id, target)

    # ------------------------------------------------------------------------------------------ frames

    def on_control(self, peer: str, body: dict[str, Any]) -> None:
        op = str(body.get("op"))
        handler = self._handlers.get(op)
        try:
            if handler is not None:
                handler(self, peer, body)
            elif op in SessionTransfer.CONTROL_OPS:
                self.transfer.on_control(peer, body)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("malformed registration frame", peer=peer, op=body.get("op"), error=str(exc))

    def _on_reg_lock(self, peer: str, body: dict[str, Any]) -> None:
        client_id, request = str(body["client_id"]), int(body["request"])
        now = time.monotonic()
        try:
            grants = self.registry.request(client_id, peer, request, now)
        except Busy:
            self.links.send_control(peer, {"op": "reg_busy", "client_id": client_id, "request": request})
            return
        self._deliver(grants, now)

    def _on_reg_release(self, peer: str, body: dict[str, Any]) -> None:
        owner = body.get("owner")
        client_id = str(body["client_id"])
        now = time.monotonic()
        self._deliver(self.registry.release(client_id, peer, int(body["request"]),
                                            None if owner is None else str(owner), now, body.get("stamp")), now)

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

    def _deliver(self, grants: list[Grant], now: float) -> None:
        """Hand out `grants` (made by the registry at monotonic time `now`): to a connect waiting here, or in a
        reg_grant frame; a grant nobody here waits for any more is released at once."""
        for grant in grants:
            if grant.node == self.name:
                waiting = self._grants.get(grant.request)
                if waiting is not None and not waiting[1].done():
                    waiting[1].set_result((grant.owner, grant.stamp))
                else:
                    self._deliver(self.registry.release(grant.client_id, self.name, grant.request, None, now), now)
            else:
                self.links.send_control(grant.node, {"op": "reg_grant", "client_id": grant.client_id,
                                                     "request": grant.request, "owner": grant.owner,
                                                     "stamp": grant.stamp})

    _handlers: dict[str, Callable[[RegistrationService, str, dict[str, Any]], None]] = {
        "reg_lock": _on_reg_lock, "reg_release": _on_reg_release, "reg_grant": _on_reg_grant,
        "reg_busy": _on_reg_busy,
    }
    #: the CONTROL ops `on_control` takes (node.py registers them in the cluster's control table): the lock's
    #: and the session transfer's
    CONTROL_OPS: tuple[str, ...] = (*_handlers, *SessionTransfer.CONTROL_OPS)

    # ------------------------------------------------------------------------------------------ reachability

    def on_reachability(self, peer: str, reachable: bool) -> None:
        if not reachable:
            now = time.monotonic()
            self._deliver(self.registry.node_down(peer, now), now)
            for _request, (leader, future) in list(self._grants.items()):
                if leader == peer and not future.done():
                    future.set_exception(_LeaderLost(peer))
        self.transfer.on_reachability(peer, reachable)

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        out.update(self.transfer.counters)
        out.update(self.transfer.histograms)
        out["locks_held"] = len(self.registry.held)
        out["locks_expired"] = self.registry.expired
        out["handovers_in_progress"] = self.transfer.in_progress()
        return out


__all__ = ["RegistrationService"]
