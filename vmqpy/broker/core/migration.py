"""The broker's side of sessions moving between nodes: giving a session up, and adopting one.

A session leaves this node when its client id registers on another node (`hand_over`), when a newer owner
record names another node (`on_session_change`: a connect there, the winner after a heal, a node that adopted
it) or when this node leaves (`move_session`). A persistent one stays here, marked as moving, until the new
owner holds its messages (`pending_for_handover`, `handed_over`) and nothing routes to it any more
(`finish_handover`). The other way round, a session arrives with its image (`adopt_offline`, or
`adopt_image` for a CONNECT) and then its messages (`adopt_messages`). The frames that carry all this between
nodes are vmqpy.cluster.registration's; this module only changes the broker's state.

`SessionMigration` is what the cluster sees of the broker (vmqpy.cluster.ports.BrokerPort): node.py hands it to
registration, departure and the queue replicas' failover.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from vmqpy.broker.core.holdback import MOVED_ROUTE_TTL
from vmqpy.broker.core.lineage import Lineage, fingerprint, names_record
from vmqpy.broker.core.session import FORWARD_MEMORY, Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.sessions import records
from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.names import Entry
from vmqpy.sessions.owners import UNKNOWN_USER, is_foreign
from vmqpy.sessions.parts import Outgoing
from vmqpy.sessions.remote import RemoteWait

if TYPE_CHECKING:
    from vmqpy.broker.core.broker import Broker

log = structlog.get_logger("vmqpy.broker")

LINEAGE_PRUNE_EVERY = 60.0  # seconds between two sweeps of the lineage (on a recovery)


class SessionMigration:
    """Moves the sessions of one broker (its `sessions`, store, metadata and metrics) to and from other nodes."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._lineage: Lineage | None = None  # loaded from storage at first use
        self._pruned_at = 0.0

    # The broker's own steps that a move takes too: the routes of an adopted session wait for the members as a
    # SUBSCRIBE's do, and a session recovered from the queue replicas brings its will.

    def route_confirmation(self) -> Any:
        """What the routes of an adopted session wait for before they are claimed (`Broker.route_confirmation`)."""
        return self._broker.route_confirmation()

    def routes_applied(self, confirm: Any) -> RemoteWait | None:
        """The wait for the members to apply the routes written with `confirm` (`Broker.routes_applied`)."""
        return self._broker.routes_applied(confirm)

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None:
        """The will in the record of a session recovered from a lost owner's replicas (`Broker.adopt_will`)."""
        self._broker.adopt_will(client_id, will, now)

    def local_sessions(self) -> list[Session]:
        """The sessions kept on this node now (online, offline or moving away)."""
        return list(self._broker.sessions.values())

    def owner_of(self, client_id: str) -> str | None:
        """The node that the owner record of `client_id` names (None: there is none)."""
        value = self._broker.metadata.get(records.SESSION, records.session_key(client_id))
        return None if value is None else records.session_owner(value)

    def owner_stamp(self, client_id: str) -> Any:
        """The stamp of the owner record of `client_id` (None: there is none)."""
        return (self._broker.metadata.get(records.SESSION, records.session_key(client_id)) or (None,))[0]

    def witness(self, stamp: Any) -> None:
        """Every owner record this node writes from now on is stamped after `stamp` (learnt from a peer)."""
        self._broker.metadata.witness(stamp)

    @property
    def lineage(self) -> Lineage:
        """The messages recovered from old owners' replica copies, per session (vmqpy.replicas.lineage)."""
        if self._lineage is None:
            self._lineage = Lineage(self._broker.store.storage)
            self._lineage.on_added = self._replicate_lineage
            if self._lineage.malformed:
                log.error("unreadable lineage entries skipped", entries=self._lineage.malformed)
        return self._lineage

    def _replicate_lineage(self, client_id: str, entries: list[Entry]) -> None:
        """New names in a persistent session's lineage go to its queue replicas too (a `lin` operation): a node
        that recovers the session from this node's copies inherits them (`inherit_lineage`)."""
        replicas = self._broker.store.replicas
        session = self._broker.sessions.get(client_id)
        if replicas is not None and session is not None and session.persistent:
            replicas.lineage(client_id, names_record(entries))

    def lineage_names(self, client_id: str) -> bytes | None:
        """The whole lineage of `client_id` as a `lin` operation carries it (the rebalancer's sync); None: none."""
        entries = self.lineage.carried(client_id, self._broker.node)
        return names_record(entries) if entries else None

    def inherit_lineage(self, client_id: str, entries: list[Entry], sender: str) -> None:
        """The lineage found in the copies of a lost owner `sender` (failover.py): before its messages are
        adopted, so that an older owner's later handover skips what `sender` had already taken."""
        inherited = self.lineage.inherit(client_id, entries, sender)
        self._broker.metrics["lineage_inherited"] += inherited

    def on_session_change(self, key: records.Key, old: Any, new: Any) -> None:
        """The client id now lives on another node (a newer connect there, the winner after a heal, a node
        that adopted it): a live connection here is taken over (5.0: DISCONNECT 0x8E), a clean session here
        ends, and a persistent one is handed over to the new owner with its messages."""
        if new is None:
            return
        broker = self._broker
        client_id = str(key[1])
        session = broker.sessions.get(client_id)
        if records.session_owner(new) == broker.node:
            if session is None and records.session_origin(new) is not None:
                image = self.image_from_store(client_id, released=records.session_origin(new))
                if image is not None:  # the session of a dead node that left: recreated here
                    log.info("recreating the session of a node that left", client_id=client_id,
                             origin=records.session_origin(new))
                    self.adopt_offline(image, time.time())
                    broker.metrics["sessions_recreated"] += 1
            return
        if session is None or session.moving_to is not None:
            return
        broker.disconnect_for_move(session, time.time(), clean=False, reason="client id connected on another node")
        user = records.session_user(new)
        if user != UNKNOWN_USER and is_foreign(session.user, user):
            # another user's connect there (vmqpy.sessions.owners): it started clean, and nothing of this goes to it
            broker.metrics["session_foreign_user_cleaned"] += 1
            broker.discard(session, keep_owner=True)
        elif session.persistent:
            self.move_session(client_id, records.session_owner(new))
        else:
            broker.discard(session, keep_owner=True)

    def move_session(self, client_id: str, target: str) -> bool:
        """Start handing the (offline) session of `client_id` over to `target`; False when it cannot move."""
        broker = self._broker
        session = broker.sessions.get(client_id)
        if session is None or session.moving_to is not None or target not in self.known_nodes():
            return False
        if session.sink is not None:
            broker.disconnect_for_move(session, time.time(), clean=False, reason="session moves to another node",
                                       takeover=False)
        session.moving_to = target
        broker.metrics["session_migrations_started"] += 1
        if broker.on_moving is not None:
            broker.on_moving(client_id, target)
        return True

    def known_nodes(self) -> set[str]:
        nodes = self._broker.nodes
        return set(nodes()) if nodes is not None else set()

    def hand_over(self, client_id: str, clean_start: bool, new_owner: str, now: float,
                  user: str | None = UNKNOWN_USER) -> SessionImage:
        """A newer CONNECT of `client_id` by `user` registers on `new_owner`: stop the connection here (5.0:
        DISCONNECT 0x8E) and give the session up. A persistent one (when the new connect resumes it) stays here,
        marked as moving, until its messages are handed over and its subscriptions route to the new owner.
        A session of another user (vmqpy.sessions.owners; the new owner's replica had no owner record yet to tell
        it) is never handed over: under `session.foreign_user = refuse` it stays as it is and the image says
        `foreign` (the new owner refuses the CONNECT); else it ends here as for a clean start."""
        broker = self._broker
        session = broker.sessions.get(client_id)
        if session is None:
            return SessionImage.absent(client_id)
        if session.moving_to is not None:
            # On its way to another node (a leave -k): answered absent, the new owner made a new session and the
            # moving one landed later (docs/testing.md, churn seed 3). A resuming CONNECT is refused for now.
            return SessionImage(client_id, False, moving=not clean_start)
        if user != UNKNOWN_USER and is_foreign(session.user, user):
            if broker.config.session_foreign_user == "refuse":  # even for a clean start: the owner's stays
                return SessionImage(client_id, False, foreign=True)
            if not clean_start:  # (a clean start: the connecting node knew, and counted it)
                broker.metrics["session_foreign_user_cleaned"] += 1
                log.info("the client id's session belongs to another user: it ends, the other user starts clean",
                         client_id=client_id, node=new_owner)
                clean_start = True
        broker.disconnect_for_move(session, now, clean=clean_start, reason="client id registers on another node")
        if clean_start or not session.persistent:
            broker.discard(session, keep_owner=True)
            return SessionImage.absent(client_id)
        session.moving_to = new_owner
        broker.metrics["session_migrations_started"] += 1
        return self._image(session, new_owner)

    def moving_image(self, client_id: str) -> SessionImage | None:
        """The image of the session of `client_id` while it is handed over from here (None: it is not)."""
        session = self._moving(client_id)
        return None if session is None or session.moving_to is None else self._image(session, session.moving_to)

    def _image(self, session: Session, to: str) -> SessionImage:
        """A session's image for the node `to`, with the lineage it takes along (an old owner that comes back
        may hand its older copy over there: vmqpy.replicas.lineage)."""
        image = SessionImage.of(session)
        image.lineage = self.lineage.carried(session.client_id, to)
        return image

    def pending_for_handover(self, client_id: str, after_seq: int) -> list[Outgoing] | None:
        """Messages of a moving session not yet sent to its new owner; None when the session is gone."""
        session = self._moving(client_id)
        return None if session is None else session.pending(after_seq)

    def handed_over(self, client_id: str, upto_seq: int) -> None:
        """The new owner holds every message up to `upto_seq` on its disk: forget them here."""
        session = self._moving(client_id)
        if session is not None:
            self._broker.metrics["messages_handed_over"] += session.forget_upto(upto_seq)

    def finish_handover(self, client_id: str, force: bool = False) -> bool:
        """The moving session is gone from here once nothing routes to it and it holds no message."""
        broker = self._broker
        session = self._moving(client_id)
        if session is None:
            return True
        if not force and (session.subscriptions or session.queue or session.inflight):
            return False
        del broker.sessions[client_id]
        broker.store.delete_session(client_id)
        if self._lineage is not None:  # not loaded yet: a later sweep forgets what is stored (`_unseen`)
            self._lineage.forget(client_id)
        session.release_waiters()
        broker.metrics["session_migrations_done"] += 1
        return True

    def abandon_handover(self, client_id: str) -> None:
        """The new owner cannot be reached for too long: the session stays here as an offline session."""
        session = self._moving(client_id)
        if session is not None:
            session.moving_to = None
            if session.persistent:
                self._broker.store.save_session(session)

    def _moving(self, client_id: str) -> Session | None:
        session = self._broker.sessions.get(client_id)
        return session if session is not None and session.moving_to is not None else None

    def adopt_image(self, session: Session, image: SessionImage, confirm: Any = None) -> None:
        """Make the subscriptions of a handed-over session route here, and keep its incoming QoS 2 state. For a
        while the session gets each forwarded message once, though the node it left passes some on here that
        their publisher's node sends here too (`Session.watch_forwards`). With `confirm`
        (`Broker.route_confirmation`), the route writes join what it waits for."""
        broker = self._broker
        if image.lineage:
            self.inherit_lineage(session.client_id, image.lineage, image.source or "")
        session.watch_forwards(time.time() + MOVED_ROUTE_TTL + FORWARD_MEMORY)
        session.await_release(image.awaiting_release)
        for packet_id in image.awaiting_release:
            session.journal.save_incoming(session, packet_id, True)
        for entry in image.subscriptions:
            own = session.subscriptions.get(entry.topic_filter, entry)
            value = records.subscription_value(broker.metadata.hlc_now(), broker.node, own)
            broker.metadata.put(records.SUBSCRIPTION, records.subscription_key(session.client_id, entry.topic_filter),
                                value, confirm)

    def adopt_offline(self, image: SessionImage, now: float, confirm: Any = None) -> Session:
        """A session handed over without a connect (its node leaves, or a duplicate resolved after a heal):
        merged into the local one, or kept here offline, and this node becomes its owner. `confirm`: as for
        `adopt_image`."""
        broker = self._broker
        session = broker.sessions.get(image.client_id)
        if session is None or session.moving_to is not None:
            session = broker.new_session(image.client_id, image.protocol_level, image.expiry_interval)
            session.disconnected_at = now
            known = broker.metadata.get(records.SESSION, records.session_key(image.client_id))
            session.user = UNKNOWN_USER if known is None else records.session_user(known)  # its owner moves too
            if session.user != UNKNOWN_USER:
                broker.enforcer.usernames[image.client_id] = session.user
            broker.sessions[image.client_id] = session
            broker.store.save_session(session)
            value = records.session_value(broker.metadata.hlc_now(), broker.node, False, image.expiry_interval,
                                          user=session.user)
            broker.metadata.put(records.SESSION, records.session_key(image.client_id), value)
        elif self.lineage.guards(image.client_id, image.source):
            # recovered here (or by the node it came from) from an old owner's copies, and this is that old
            # owner's image: the state here is the later one (divergent copies). The old owner's image would
            # bring back QoS 2 packet ids this session completed since (a new PUBLISH with one of them would be
            # taken for a duplicate and dropped) and subscriptions it may have removed.
            broker.metrics["handover_image_ignored"] += 1
            log.info("older image of a recovered session ignored (divergent copies)", client_id=image.client_id,
                     by=image.source)
            return session
        self.adopt_image(session, image, confirm)
        return session

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None,
                       source: str | None = None) -> bool:
        """Messages handed over by the previous owner (`source`: that node, when known), or (`origin`: that old
        owner) recovered from its replica copies; False when there is no session here to take them. Divergent
        copies (docs/replication.md): a message this session already took from the same owner, by either path,
        is skipped (vmqpy.replicas.lineage)."""
        broker = self._broker
        session = broker.sessions.get(client_id)
        if session is None or session.moving_to is not None:
            return False
        if outs and (origin is not None or self.lineage.holds(client_id)):
            outs = self._unseen(client_id, outs, origin, source)
        for out in outs:
            if not session.adopt(out):
                broker.metrics["handover_dropped"] += 1
        broker.metrics["messages_adopted"] += len(outs)
        session.pump(now)
        return True

    def _unseen(self, client_id: str, outs: list[Outgoing], origin: str | None, source: str | None
                ) -> list[Outgoing]:
        """The messages of `outs` this session has not taken yet (named before `Session.adopt` renumbers them)."""
        broker = self._broker
        lineage = self.lineage
        if origin is not None and time.monotonic() - self._pruned_at >= LINEAGE_PRUNE_EVERY:
            self._pruned_at = time.monotonic()
            sessions = broker.sessions
            members = self.known_nodes()
            lineage.prune(lambda cid: cid in sessions and sessions[cid].moving_to is None, members or None)
        verdicts = lineage.admit(client_id, [(out.seq, fingerprint(out.message)) for out in outs], origin, source)
        fresh = [out for out, new in zip(outs, verdicts, strict=True) if new]
        skipped = len(outs) - len(fresh)
        if skipped:
            broker.metrics["recovered_already_adopted" if origin is not None else "handover_already_recovered"] += (
                skipped)
            log.info("messages this session already took skipped (divergent copies)", client_id=client_id,
                     skipped=skipped, path="replicas" if origin is not None else "handover")
        return fresh

    def image_from_store(self, client_id: str, released: str | None = None) -> SessionImage | None:
        """The session of `client_id` as the replicated store knows it, when its owner node is out of reach:
        its subscriptions (its messages stay with that node until it is reachable again; with queue replicas,
        `broker.on_recreated` fetches their copies: vmqpy.replicas.failover). `released`: the dead node an
        operator removed with `cluster leave`, whose copies are taken at once (no failover timeout)."""
        metadata = self._broker.metadata
        value = metadata.get(records.SESSION, records.session_key(client_id))
        if value is None or not records.session_persistent(value):  # a 5.0 clean start with an expiry persists
            return None
        image = SessionImage(client_id, True, 4, value[3])
        for key, sub in metadata.fold(records.SUBSCRIPTION):
            if key[1] == client_id:
                image.subscriptions.append(records.subscription_entry(key, sub)[2])
        if self._broker.on_recreated is not None:  # its messages may live on in the queue replicas
            self._broker.on_recreated(client_id, released)
        return image

    def reassign_sessions(self, node: str, new_owner: Callable[[str], str]) -> int:
        """The owner records of the persistent sessions of `node` (a dead node that leaves) name
        `new_owner(client_id)` instead, with `node` as their origin: each new owner recreates its session from
        the store (`on_session_change`). How many were reassigned."""
        metadata = self._broker.metadata
        reassigned = 0
        for key, value in list(metadata.fold(records.SESSION)):
            if records.session_owner(value) != node or not records.session_persistent(value):
                continue
            record = records.session_value(metadata.hlc_now(), new_owner(str(key[1])), False, value[3], origin=node,
                                           user=records.session_user(value))
            metadata.put(records.SESSION, key, record)
            reassigned += 1
        return reassigned


__all__ = ["SessionMigration"]
