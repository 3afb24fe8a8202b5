"""The broker of one node: sessions by client id, routing, retained messages, wills and session expiry.

Called by the connection driver with plain values and `now` (wall-clock seconds, since expiry deadlines must
survive a restart); it never touches sockets. Timers are one `tick(now)` the node calls periodically.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from vmqpy.broker import records
from vmqpy.broker.handover import SessionImage, Ticket
from vmqpy.broker.message import Message
from vmqpy.broker.persistence import SessionStore
from vmqpy.broker.remote_ack import RemoteAck
from vmqpy.broker.retained import RetainedStore
from vmqpy.broker.router import Router, RouteResult
from vmqpy.broker.session import NullJournal, Outgoing, Session, Sink, SubEntry
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt import topics
from vmqpy.mqtt.errors import ProtocolViolation
from vmqpy.mqtt.packets import Subscription
from vmqpy.mqtt.topics import parse_shared, validate_topic_filter

# How long forwards that other nodes still route here by a subscription that moved away are passed on to its
# new node: longer than a new route takes to reach every node (anti-entropy rounds, a partition's heal).
MOVED_ROUTE_TTL = 60.0

log = structlog.get_logger("vmqpy.broker")


class ServePolicy(Protocol):
    """Whether this node serves an operation now (the netsplit policy of the cluster)."""

    def may(self, operation: str) -> bool:
        """`operation` is register, publish, subscribe or unsubscribe; False is a refusal (counted)."""
        ...

    def reason(self) -> str:
        """Why operations are refused now (told to a refused client)."""
        ...


class AlwaysServe:
    def may(self, operation: str) -> bool:
        return True

    def reason(self) -> str:
        return "ready"


class Forwarder(Protocol):
    """How the broker hands a publish to another node (the cluster's links)."""

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool:
        """Queue `record` (msgpack-encodable, at most `size` bytes encoded) for `node`; False when it cannot even
        be buffered (the publisher gets no ack). With `on_ack`, `node` acknowledges it once it has it
        (`on_fail`: it never will)."""
        ...

    def signal_congestion(self, node: str, congested: bool) -> None:
        """Tell `node` that subscribers here that it feeds are congested (it should slow its publishers
        down), or no longer are."""
        ...

    def hold(self, peer: str, seq: int) -> Callable[[], None]:
        """Keep forward `seq` of `peer` (being delivered now) unacknowledged until the returned function runs."""
        ...

    def replica_of(self, node: str) -> str | None:
        """The metadata replica id of member `node` (None: not a member)."""
        ...


class Registrar(Protocol):
    """How a CONNECT is registered in the cluster (vmqpy.cluster.registration): through the client id's
    leader, with the session handed over by its previous owner node."""

    async def register(self, client_id: str, clean_start: bool) -> Ticket:
        """Hold the client id's registration lock; raises RegistrationRefused."""
        ...

    def connected(self, ticket: Ticket, owner: str | None) -> None:
        """The CONNECT completed here (or failed, `owner` None): take the early messages, release the lock."""
        ...


@dataclass(slots=True)
class PendingWill:
    due: float
    message: Message


class Broker:
    """Sessions are node-local (with their queues in `store`); subscriptions, retained messages and session
    owners live in the replicated metadata store, and routing follows its change events."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        metadata: records.MetadataPort,
        rng: random.Random | None = None,
        policy: ServePolicy | None = None,
    ) -> None:
        self.config = config
        self.node = config.nodename
        self.store = store
        self.metadata = metadata
        self.forwarder: Forwarder | None = None
        self.policy: ServePolicy = policy or AlwaysServe()
        self.sessions: dict[str, Session] = {}
        self.router = Router(self.sessions, rng)
        self.retained: RetainedStore[Message] = RetainedStore()
        self.metrics: Counter[str] = Counter()
        self._wills: dict[str, PendingWill] = {}
        # The cluster's hooks: the member names, and who starts handing a session over to its new owner.
        self.nodes: Callable[[], Iterable[str]] | None = None
        self.on_moving: Callable[[str, str], None] | None = None
        self.registrar: Registrar | None = None
        # Backpressure across nodes: the nodes that asked us to slow down (with the callbacks waiting for them
        # to recover), and per node how many congested subscribers here its forwards are waiting on.
        self._congested_nodes: dict[str, list[Callable[[], None]]] = {}
        self._congesting: dict[str, int] = {}
        # (client id, filter) -> (its new node, entry, until): subscriptions that moved away from here lately
        self._moved_routes: dict[tuple[str, str], tuple[str, SubEntry, float]] = {}
        metadata.on_change(records.SUBSCRIPTION, self._on_subscription_change)
        metadata.on_change(records.RETAIN, self._on_retain_change)
        metadata.on_change(records.SESSION, self._on_session_change)

    # ------------------------------------------------------------------------------------------ metadata

    def _on_subscription_change(self, key: records.Key, old: Any, new: Any) -> None:
        """Feed the routing trie (and the local session's view) from the store."""
        if old is not None:
            client_id, node, entry = records.subscription_entry(key, old)
            if node != self.node:
                self.router.remove_remote(node, client_id, entry)
            else:
                self.router.remove(client_id, entry)
                session = self.sessions.get(client_id)
                moved_to = records.subscription_entry(key, new)[1] if new is not None else None
                moved = moved_to is not None and moved_to != self.node
                if (new is None or moved) and session is not None:
                    session.subscriptions.pop(entry.topic_filter, None)
                if moved_to is not None and moved:
                    # Other nodes may route to it here a while yet: pass such forwards on (deliver_forwarded).
                    self._moved_routes[(client_id, entry.topic_filter)] = (
                        moved_to, entry, time.monotonic() + MOVED_ROUTE_TTL)
                elif new is None:
                    self._moved_routes.pop((client_id, entry.topic_filter), None)
        if new is not None:
            client_id, node, entry = records.subscription_entry(key, new)
            if node != self.node:
                self.router.add_remote(node, client_id, entry)
                return
            self.router.add(client_id, entry)
            session = self.sessions.get(client_id)
            if session is not None:
                session.subscriptions[entry.topic_filter] = entry

    def _on_session_change(self, key: records.Key, old: Any, new: Any) -> None:
        """The client id now lives on another node (a newer connect there, the winner after a heal, a node
        that adopted it): a live connection here is taken over (5.0: DISCONNECT 0x8E), a clean session here
        ends, and a persistent one is handed over to the new owner with its messages."""
        if new is None:
            return
        client_id = str(key[1])
        session = self.sessions.get(client_id)
        if records.session_owner(new) == self.node:
            if session is None and records.session_origin(new) is not None:
                image = self.image_from_store(client_id)
                if image is not None:  # the session of a dead node that left: recreated here
                    log.info("recreating the session of a node that left", client_id=client_id,
                             origin=records.session_origin(new))
                    self.adopt_offline(image, time.time())
                    self.metrics["sessions_recreated"] += 1
            return
        if session is None or session.moving_to is not None:
            return
        self._release(session, time.time(), clean=False, reason="client id connected on another node")
        if session.persistent:
            self.move_session(client_id, records.session_owner(new))
        else:
            self._discard(session, keep_owner=True)

    def move_session(self, client_id: str, target: str) -> bool:
        """Start handing the (offline) session of `client_id` over to `target`; False when it cannot move."""
        session = self.sessions.get(client_id)
        if session is None or session.moving_to is not None or target not in self.known_nodes():
            return False
        if session.sink is not None:
            self._release(session, time.time(), clean=False, reason="session moves to another node")
        session.moving_to = target
        self.metrics["session_migrations_started"] += 1
        if self.on_moving is not None:
            self.on_moving(client_id, target)
        return True

    def known_nodes(self) -> set[str]:
        return set(self.nodes()) if self.nodes is not None else set()

    def _on_retain_change(self, key: records.Key, old: Any, new: Any) -> None:
        topic = key[1]
        if new is None:
            self.retained.delete(topic)
        else:
            self.retained.set(topic, records.retained_message(new))

    # ------------------------------------------------------------------------------------------ start

    def load(self, now: float) -> None:
        """Rebuild persistent sessions from storage, subscriptions and retained messages from the metadata
        store; expired sessions and messages are removed, and so are subscriptions of sessions that did not
        survive (clean sessions of a node that crashed)."""
        for key, value in list(self.metadata.fold(records.RETAIN)):
            message = records.retained_message(value)
            if message.expired(now):
                self.metadata.delete(records.RETAIN, key)
            else:
                self.retained.set(message.topic, message)
        for stored in self.store.load_sessions().values():
            disconnected_at = stored.disconnected_at if stored.disconnected_at is not None else now
            if stored.expiry_interval is not None and disconnected_at + stored.expiry_interval <= now:
                self.store.delete_session(stored.client_id)
                continue
            session = self._new_session(stored.client_id, stored.protocol_level, stored.expiry_interval)
            session.disconnected_at = disconnected_at
            for out in sorted(stored.messages, key=lambda o: o.seq):
                session.restore(out)
            session.awaiting_release = stored.incoming
            self.sessions[session.client_id] = session
        for key, value in list(self.metadata.fold(records.SESSION)):
            if records.session_owner(value) == self.node and str(key[1]) not in self.sessions:
                self.metadata.delete(records.SESSION, key)  # a clean session of before a crash
        for key, value in list(self.metadata.fold(records.SUBSCRIPTION)):
            client_id, node, entry = records.subscription_entry(key, value)
            if node != self.node:
                self.router.add_remote(node, client_id, entry)  # the store's change events only tell changes
                continue
            owner = self.sessions.get(client_id)
            if owner is None:
                self.metadata.delete(records.SUBSCRIPTION, key)
                continue
            owner.subscriptions[entry.topic_filter] = entry
            self.router.add(client_id, entry)
        log.info("storage loaded", sessions=len(self.sessions), retained=len(self.retained))

    def _new_session(self, client_id: str, level: int, expiry: float | None) -> Session:
        session = Session(
            client_id,
            protocol_level=level,
            expiry_interval=expiry,
            max_inflight=self.config.max_inflight_messages,
            max_online=self.config.max_online_messages,
            max_offline=self.config.max_offline_messages,
        )
        self._set_journal(session)
        return session

    def _set_journal(self, session: Session) -> None:
        session.journal = self.store if session.persistent else NullJournal()

    # ------------------------------------------------------------------------------------------ connections

    def open_session(
        self, client_id: str, level: int, clean_start: bool, expiry: float | None, owner: Sink, now: float,
        image: SessionImage | None = None,
    ) -> tuple[Session, bool]:
        """Register a CONNECT: take over a live connection of the same id, resume or replace the session.
        `image` is the session handed over by its previous owner node (or rebuilt from the store when that
        node is unreachable); its messages follow through `adopt_messages`."""
        existing = self.sessions.get(client_id)
        if existing is not None and existing.moving_to is not None:
            # It was moving away, and the client id comes back here first: it stays. What was already handed
            # over comes back from the other node once it sees that this node owns the client id again.
            self.abandon_handover(client_id)
        if existing is not None and existing.sink is not None and existing.sink is not owner:
            old_will, old_delay = existing.sink.take_over()
            existing.detach(now)
            self.metrics["session_takeover"] += 1
            if old_will is not None and (clean_start or old_delay <= 0):
                self.publish_will(old_will, now)
        pending = self._wills.pop(client_id, None)
        if pending is not None and clean_start:
            self.publish_will(pending.message, now)  # the old session ends now, so its delayed will is due
        if existing is not None and clean_start:
            self._discard(existing)
            existing = None
        adopted = image is not None and image.present and not clean_start
        session_present = existing is not None or adopted
        if existing is None:
            session = self._new_session(client_id, level, expiry)
            self.sessions[client_id] = session
        else:
            session = existing
            was_persistent = session.persistent
            session.protocol_level = level
            session.expiry_interval = expiry
            self._set_journal(session)
            if was_persistent and not session.persistent:
                self.store.delete_session(client_id)
        if session.persistent:
            self.store.save_session(session)
        # The owner record: every node learns where this client id lives now (a newer connect wins by HLC).
        value = records.session_value(self.metadata.hlc_now(), self.node, clean_start, expiry)
        self.metadata.put(records.SESSION, records.session_key(client_id), value)
        if adopted:
            assert image is not None
            self._adopt_image(session, image)
        self.metrics["client_connected"] += 1
        return session, session_present

    def _adopt_image(self, session: Session, image: SessionImage) -> None:
        """Make the subscriptions of a handed-over session route here, and keep its incoming QoS 2 state."""
        session.awaiting_release.update(image.awaiting_release)
        for packet_id in image.awaiting_release:
            session.journal.save_incoming(session, packet_id, True)
        for entry in image.subscriptions:
            own = session.subscriptions.get(entry.topic_filter, entry)
            value = records.subscription_value(self.metadata.hlc_now(), self.node, own)
            self.metadata.put(records.SUBSCRIPTION, records.subscription_key(session.client_id, entry.topic_filter),
                              value)

    def adopt_offline(self, image: SessionImage, now: float) -> Session:
        """A session handed over without a connect (its node leaves, or a duplicate resolved after a heal):
        merged into the local one, or kept here offline, and this node becomes its owner."""
        session = self.sessions.get(image.client_id)
        if session is None or session.moving_to is not None:
            session = self._new_session(image.client_id, image.protocol_level, image.expiry_interval)
            session.disconnected_at = now
            self.sessions[image.client_id] = session
            self.store.save_session(session)
            value = records.session_value(self.metadata.hlc_now(), self.node, False, image.expiry_interval)
            self.metadata.put(records.SESSION, records.session_key(image.client_id), value)
        self._adopt_image(session, image)
        return session

    def image_from_store(self, client_id: str) -> SessionImage | None:
        """The session of `client_id` as the replicated store knows it, when its owner node is out of reach:
        its subscriptions (its messages stay with that node until it is reachable again)."""
        value = self.metadata.get(records.SESSION, records.session_key(client_id))
        if value is None or bool(value[2]):
            return None
        image = SessionImage(client_id, True, 4, value[3])
        for key, sub in self.metadata.fold(records.SUBSCRIPTION):
            if key[1] == client_id:
                image.subscriptions.append(records.subscription_entry(key, sub)[2])
        return image

    def owner_of(self, client_id: str) -> str | None:
        value = self.metadata.get(records.SESSION, records.session_key(client_id))
        return None if value is None else records.session_owner(value)

    # ------------------------------------------------------------------------------------------ handover

    def hand_over(self, client_id: str, clean_start: bool, new_owner: str, now: float) -> SessionImage:
        """A newer CONNECT of `client_id` registers on `new_owner`: stop the connection here (5.0: DISCONNECT
        0x8E) and give the session up. A persistent one (when the new connect resumes it) stays here, marked
        as moving, until its messages are handed over and its subscriptions route to the new owner."""
        session = self.sessions.get(client_id)
        if session is None or session.moving_to is not None:
            return SessionImage.absent(client_id)
        self._release(session, now, clean=clean_start, reason="client id registers on another node")
        if clean_start or not session.persistent:
            self._discard(session, keep_owner=True)
            return SessionImage.absent(client_id)
        session.moving_to = new_owner
        self.metrics["session_migrations_started"] += 1
        return SessionImage.of(session)

    def _release(self, session: Session, now: float, clean: bool, reason: str) -> None:
        """Disconnect a live connection of `session` for a connect elsewhere; its will as for a takeover."""
        if session.sink is not None:
            log.info(reason + ": disconnecting it here", client_id=session.client_id)
            will, delay = session.sink.take_over()
            session.detach(now)
            self.metrics["session_taken_over_remote"] += 1
            if will is not None and (clean or delay <= 0):
                self.publish_will(will, now)
        pending = self._wills.pop(session.client_id, None)
        if pending is not None and clean:
            self.publish_will(pending.message, now)

    def pending_for_handover(self, client_id: str, after_seq: int) -> list[Outgoing] | None:
        """Messages of a moving session not yet sent to its new owner; None when the session is gone."""
        session = self.sessions.get(client_id)
        if session is None or session.moving_to is None:
            return None
        return session.pending(after_seq)

    def handed_over(self, client_id: str, upto_seq: int) -> None:
        """The new owner holds every message up to `upto_seq` on its disk: forget them here."""
        session = self.sessions.get(client_id)
        if session is not None and session.moving_to is not None:
            self.metrics["messages_handed_over"] += session.forget_upto(upto_seq)

    def finish_handover(self, client_id: str, force: bool = False) -> bool:
        """The moving session is gone from here once nothing routes to it and it holds no message."""
        session = self.sessions.get(client_id)
        if session is None or session.moving_to is None:
            return True
        if not force and (session.subscriptions or session.queue or session.inflight):
            return False
        del self.sessions[client_id]
        self.store.delete_session(client_id)
        session.release_waiters()
        self.metrics["session_migrations_done"] += 1
        return True

    def abandon_handover(self, client_id: str) -> None:
        """The new owner cannot be reached for too long: the session stays here as an offline session."""
        session = self.sessions.get(client_id)
        if session is not None and session.moving_to is not None:
            session.moving_to = None
            if session.persistent:
                self.store.save_session(session)

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float) -> bool:
        """Messages handed over by the previous owner; False when there is no session here to take them."""
        session = self.sessions.get(client_id)
        if session is None or session.moving_to is not None:
            return False
        for out in outs:
            if not session.adopt(out):
                self.metrics["handover_dropped"] += 1
        self.metrics["messages_adopted"] += len(outs)
        session.pump(now)
        return True

    def attach(self, session: Session, owner: Sink, window: int, max_packet_size: int, now: float) -> None:
        session.attach(owner, window, max_packet_size, now)

    def close_session(
        self, session: Session, owner: Sink, now: float, will: Message | None, will_delay: float
    ) -> None:
        """The connection that owns `session` is gone; `will` is set when it ended without a normal DISCONNECT."""
        if session.sink is not owner:
            return  # taken over: the new connection owns the session now
        session.detach(now)
        if will is not None:
            expiry = session.expiry_interval
            if will_delay > 0 and session.persistent:
                delay = will_delay if expiry is None else min(will_delay, expiry)
                self._wills[session.client_id] = PendingWill(now + delay, will)
            else:
                self.publish_will(will, now)
        if not session.persistent:
            self._discard(session)
        else:
            self.store.save_session(session)

    def _discard(self, session: Session, keep_owner: bool = False) -> None:
        client_id = session.client_id
        for topic_filter in list(session.subscriptions):
            self.metadata.delete(records.SUBSCRIPTION, records.subscription_key(client_id, topic_filter))
        session.subscriptions.clear()
        if self.sessions.get(client_id) is session:
            del self.sessions[client_id]
        if session.persistent or session.journal is self.store:
            self.store.delete_session(client_id)
        owner = self.metadata.get(records.SESSION, records.session_key(client_id))
        if not keep_owner and owner is not None and records.session_owner(owner) == self.node:
            self.metadata.delete(records.SESSION, records.session_key(client_id))  # not when it moved elsewhere
        session.release_waiters()

    def tick(self, now: float) -> None:
        """Publish delayed wills that are due and end offline sessions that expired."""
        for client_id, pending in list(self._wills.items()):
            if pending.due <= now:
                del self._wills[client_id]
                self.publish_will(pending.message, now)
        for session in list(self.sessions.values()):
            if session.online or session.disconnected_at is None or session.expiry_interval is None:
                continue
            if session.disconnected_at + session.expiry_interval <= now:
                due = self._wills.pop(session.client_id, None)
                if due is not None:
                    self.publish_will(due.message, now)
                self.metrics["session_expired"] += 1
                self._discard(session)

    # ------------------------------------------------------------------------------------------ messages

    def publish(self, message: Message, now: float) -> RouteResult:
        """Route a message; a retained one replaces (or with an empty payload deletes) the topic's retained."""
        self.metrics["publish_received"] += 1
        durable = False
        if message.retain:
            key = records.retain_key(message.topic)
            if message.payload:
                self.metadata.put(records.RETAIN, key, records.retain_value(self.metadata.hlc_now(), message))
                durable = True
            elif message.topic in self.retained:
                self.metadata.delete(records.RETAIN, key)
                durable = True
        result = self.router.route(message, now)
        result.durable = result.durable or durable
        self.metrics["publish_dropped"] += result.dropped
        if result.remote:
            self._forward(message, result)
            if self._congested_nodes:
                result.congested_nodes = [n for n in result.remote if n in self._congested_nodes]
        return result

    def publish_will(self, message: Message, now: float) -> None:
        """A will is published only where publishing is allowed (netsplit policy); otherwise it is dropped."""
        if self.policy.may("publish"):
            self.publish(message, now)
        else:
            self.metrics["will_dropped_netsplit"] += 1
            log.warning("will not published: the cluster is not ready", topic=message.topic)

    def _forward(self, message: Message, result: RouteResult) -> None:
        """Hand the publish to the other nodes. For QoS 1/2, `result.remote_ack` completes once every one of
        them acknowledged it (the publisher's acknowledgement waits for it)."""
        forwarder = self.forwarder
        countdown = RemoteAck(len(result.remote)) if message.qos > 0 else None
        plain: tuple[list[Any], int] | None = None  # the forward without shared groups: the same for every node
        for node, groups in result.remote.items():
            if groups:
                record, size = records.forward_record(message, groups)
            else:
                if plain is None:
                    plain = records.forward_record(message, groups)
                record, size = plain
            if forwarder is None:
                sent = False
            elif countdown is None:
                sent = forwarder.forward(node, record, size)
            else:
                sent = forwarder.forward(node, record, size, countdown.one_done, countdown.fail)
            if not sent:
                self.metrics["forward_refused"] += 1
                result.refused = True
            else:
                self.metrics["forwarded"] += 1
        if countdown is not None:
            result.remote_ack = countdown

    def deliver_forwarded(self, record: Any, now: float, peer: str | None = None, seq: int = 0) -> bool:
        """A publish another node routed here: deliver it to the local sessions only (to `clients` of the
        record when it names them). When a subscriber here is congested, `peer` is asked to slow its publishers
        down until the subscriber drained. True when a persistent session took it (it is on disk after the next
        storage barrier).

        `peer` may have routed it here by a subscription that moved away since (a session handed over to
        another node, whose new route has not reached `peer` yet): those subscribers get it through their new
        node, and `peer`'s acknowledgement of forward `seq` waits until that node has it (`_pass_on`)."""
        try:
            message, groups, clients = records.parse_forward(record)
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("undecodable forwarded publish", error=str(exc))
            self.metrics["forward_malformed"] += 1
            return False
        self.metrics["forward_received"] += 1
        result = self.router.route(message, now, only_groups=groups, only_clients=clients)
        if self._moved_routes and peer is not None:
            self._pass_on(message, peer, seq, clients)
        self.metrics["publish_dropped"] += result.dropped
        if result.congested and peer is not None and self.forwarder is not None:
            self._hold_back(peer, result.congested)
        return result.durable

    def _pass_on(self, message: Message, peer: str, seq: int, clients: set[str] | None) -> None:
        """Forward `message` to the new node of every subscription that moved away from here recently and
        matches it (see deliver_forwarded), naming the subscribers; a QoS 1/2 forward from `peer` is
        acknowledged to it only once every such node has it."""
        forwarder = self.forwarder
        if forwarder is None:
            return
        due = time.monotonic()
        targets: dict[str, list[str]] = {}
        sender = forwarder.replica_of(peer)
        for route_key, (node, entry, until) in list(self._moved_routes.items()):
            client_id, topic_filter = route_key
            if until < due:
                del self._moved_routes[route_key]
                continue
            if (node == peer or client_id in self.sessions or (clients is not None and client_id not in clients)
                    or entry.group is not None or not topics.matches(entry.match_filter, message.topic)):
                continue
            key = records.subscription_key(client_id, topic_filter)
            if sender is not None and self.metadata.known_to(sender, records.SUBSCRIPTION, key):
                # The sender's last report (earlier on the same link) held the new route: it sent this for
                # other subscribers here, and that one got it from the sender directly.
                continue
            if client_id not in targets.setdefault(node, []):
                targets[node].append(client_id)
        for node, client_ids in targets.items():
            record, size = records.forward_record(message, [], client_ids)
            self.metrics["forwards_passed_on"] += 1
            if message.qos == 0 or not seq:
                forwarder.forward(node, record, size)
                continue
            release = forwarder.hold(peer, seq)

            def lost(why: str, node: str = node, release: Callable[[], None] = release) -> None:
                log.error("a forward passed on to a subscriber's new node is lost", node=node, error=why,
                          topic=message.topic)
                self.metrics["forwards_passed_on_lost"] += 1
                release()  # acknowledgements are cumulative: holding it for ever would stop every later one

            if not forwarder.forward(node, record, size, release, lost):
                lost("the outgoing buffer to that node is full")

    def _hold_back(self, peer: str, sessions: list[Session]) -> None:
        """Backpressure across nodes: `peer` waits until these congested sessions drained."""
        count = self._congesting.get(peer, 0)
        if count == 0:
            assert self.forwarder is not None
            self.forwarder.signal_congestion(peer, True)
            self.metrics["congestion_signalled"] += 1
        self._congesting[peer] = count + len(sessions)
        for session in sessions:
            session.wait_for_drain(lambda: self._drained(peer))

    def _drained(self, peer: str) -> None:
        count = self._congesting.get(peer, 0) - 1
        if count > 0:
            self._congesting[peer] = count
            return
        self._congesting.pop(peer, None)
        if self.forwarder is not None:
            self.forwarder.signal_congestion(peer, False)

    def on_peer_congestion(self, node: str, congested: bool) -> None:
        """`node` asks us to slow down (or lets us go on, or became unreachable: `congested` False)."""
        if congested:
            self._congested_nodes.setdefault(node, [])
            return
        waiters = self._congested_nodes.pop(node, None)
        for callback in waiters or ():
            callback()

    def on_peer_reachability(self, node: str, reachable: bool) -> None:
        """A node that went away holds nobody back any more, and forgets what we asked of it."""
        if not reachable:
            self.on_peer_congestion(node, False)
            self._congesting.pop(node, None)

    def wait_for_node(self, node: str, callback: Callable[[], None]) -> None:
        """Call `callback` once `node` is no longer congested (at once when it is not)."""
        waiters = self._congested_nodes.get(node)
        if waiters is None:
            callback()
        else:
            waiters.append(callback)

    def subscribe(
        self, session: Session, subscriptions: list[Subscription], subscription_id: int | None
    ) -> tuple[list[int], list[tuple[SubEntry, bool]]]:
        """Add subscriptions; the reason codes for SUBACK and the (entry, is_new) whose retained are due."""
        codes: list[int] = []
        added: list[tuple[SubEntry, bool]] = []
        failure = rc.V311_SUBACK_FAILURE if session.protocol_level < 5 else rc.TOPIC_FILTER_INVALID
        for sub in subscriptions:
            try:
                group, match_filter = parse_shared(sub.topic_filter)
            except ValueError:
                codes.append(failure)
                continue
            if not validate_topic_filter(match_filter):
                codes.append(failure)
                continue
            if group is not None and sub.options.no_local:
                raise ProtocolViolation("no-local set on a shared subscription")
            entry = SubEntry(sub.topic_filter, match_filter, sub.options, subscription_id, group)
            is_new = sub.topic_filter not in session.subscriptions
            value = records.subscription_value(self.metadata.hlc_now(), self.node, entry)
            key = records.subscription_key(session.client_id, sub.topic_filter)
            self.metadata.put(records.SUBSCRIPTION, key, value)
            codes.append(sub.options.qos)
            added.append((entry, is_new))
        return codes, added

    def deliver_retained(self, session: Session, added: list[tuple[SubEntry, bool]], now: float) -> None:
        for entry, is_new in added:
            handling = entry.options.retain_handling
            if entry.group is not None or handling == 2 or (handling == 1 and not is_new):
                continue
            ids = [] if entry.subscription_id is None else [entry.subscription_id]
            for _topic, message in self.retained.match(entry.match_filter):
                if message.expired(now):
                    continue
                session.deliver(message, min(message.qos, entry.options.qos), True, ids, now)

    def unsubscribe(self, session: Session, topic_filters: list[str]) -> list[int]:
        codes = []
        for topic_filter in topic_filters:
            if topic_filter not in session.subscriptions:
                codes.append(rc.NO_SUBSCRIPTION_EXISTED)
                continue
            self.metadata.delete(records.SUBSCRIPTION, records.subscription_key(session.client_id, topic_filter))
            session.subscriptions.pop(topic_filter, None)
            codes.append(rc.SUCCESS)
        return codes

    def queued(self) -> int:
        return sum(len(s.queue) + len(s.inflight) for s in self.sessions.values())


__all__ = ["Broker", "PendingWill"]
