"""The broker of one node: sessions by client id, routing, retained messages, wills and session expiry.

Called by the connection driver with plain values and `now` (wall-clock seconds, since expiry deadlines must
survive a restart); it never touches sockets. Timers are one `tick(now)` the node calls periodically. It is
given its ports (vmqpy.broker.core.ports) by the node; the handover of sessions between nodes is
vmqpy.broker.core.migration's, holding publishes back across nodes vmqpy.broker.core.holdback's.

`access` (vmqpy.broker.access.control) is the ACL in force: a will to a topic the client may not write is not
published, a retained message it may not read is not delivered on SUBSCRIBE, and when the ACL changes
the subscriptions of the local sessions are judged again and those it no longer allows are removed
(vmqpy.broker.core.acl_enforcement, `enforcer`), so that no check is needed per delivered message. The user name
the ACL judges is the one a session last connected with (`open_session`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import structlog

from vmqpy.broker.access.control import AccessControl
from vmqpy.broker.access.login_pool import LoginPool
from vmqpy.broker.access.login_throttle import LoginThrottle
from vmqpy.broker.access.read_guard import ReadGuard
from vmqpy.broker.access.retain_quota import RetainQuota
from vmqpy.broker.core.acl_enforcement import AclEnforcer
from vmqpy.broker.core.expiry import ExpiryScan
from vmqpy.broker.core.forwards import Forwards
from vmqpy.broker.core.holdback import Backpressure, MovedRoutes
from vmqpy.broker.core.migration import SessionMigration
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.core.ports import AlwaysServe, Forwarder, MetadataPort, Placement, Registrar, ServePolicy
from vmqpy.broker.core.retained import RetainedStore
from vmqpy.broker.core.route_feed import RouteFeed
from vmqpy.broker.core.router import Router, RouteResult, outgoing_qos
from vmqpy.broker.core.session import NULL_JOURNAL, Session, Sink
from vmqpy.broker.core.stalls import StallBound
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.broker.core.sweeper import SubscriptionSweeper
from vmqpy.broker.core.turn_budget import TURN_YIELDED, BulkLane
from vmqpy.broker.core.wills import PendingWills
from vmqpy.broker.operations.systree import is_system_topic
from vmqpy.broker.operations.trace import Tracers
from vmqpy.client_metrics import NodeCounters
from vmqpy.config import Config
from vmqpy.mqtt import reason_codes as rc
from vmqpy.mqtt.errors import ProtocolViolation
from vmqpy.mqtt.packets import Subscription
from vmqpy.mqtt.topics import parse_shared, too_deep, validate_topic_filter
from vmqpy.sessions import records
from vmqpy.sessions.handover import SessionImage
from vmqpy.sessions.message import Message
from vmqpy.sessions.owners import UNKNOWN_USER, is_foreign
from vmqpy.sessions.parts import SubEntry
from vmqpy.sessions.remote import RemoteWait

log = structlog.get_logger("vmqpy.broker")

#: the counters of queue.max_stall and queue.overflow (docs/operations.md), made at 0 when the broker starts
OVERFLOW_COUNTERS = ("queue_stall_ended", "queue_overflow_dropped", "queue_overflow_kept",
                     "queue_overflow_disconnected")
#: the counter of retained messages a new subscription matched and the ACL does not let its client read
RETAINED_WITHHELD = "retained_not_authorized"
LINGER_CUT = "socket_linger_cut"  # drains of a closing socket cut short (vmqpy.broker.driver.linger)


class Broker:
    """Sessions are node-local (with their queues in `store`); subscriptions, retained messages and session
    owners live in the replicated metadata store, and routing follows its change events."""

    def __init__(self, config: Config, store: SessionStore, metadata: MetadataPort, rng: random.Random | None = None,
                 policy: ServePolicy | None = None) -> None:
        self.config = config
        self.node = config.nodename
        self.store = store
        self.metadata = metadata
        self.forwarder: Forwarder | None = None
        self.policy: ServePolicy = policy or AlwaysServe()
        self.sessions: dict[str, Session] = {}
        self.router = Router(self.sessions, rng)
        self.router.upgrade_qos = config.upgrade_outgoing_qos
        # subscription.acknowledge = cluster on a node with cluster links (`route_confirmation`; `vmq-admin set`)
        self.acknowledge_by_cluster = (config.subscription_acknowledge == "cluster"
                                       and config.cluster_listener is not None)
        self.retained: RetainedStore[Message] = RetainedStore(Message.unpack)  # restart: records kept packed
        # the node's own `$SYS` tree (vmqpy.broker.operations.systree): retained here only, never replicated
        self.system_retained: RetainedStore[Message] = RetainedStore()
        self.tracers = Tracers()  # `vmq-admin trace client` (vmqpy.broker.operations.trace)
        # ids of the messages this node forwards (Message.forward_id): from a random start, so that the ids of
        # one node's runs, and of different nodes, do not meet within the few seconds a duplicate can take
        self._forward_ids = random.getrandbits(62)
        self.metrics: Counter[str] = NodeCounters()  # a Counter, cheaper to count in (vmqpy.client_metrics)
        # The password check and the ACL in force (the node loads their files into it before serving).
        self.access = AccessControl(config.allow_anonymous, self.metrics, LoginThrottle(
            config.failed_login_limit, config.failed_login_window, config.failed_login_block,
            config.failed_login_addresses))
        self.logins: LoginPool | None = None  # where passwords are hashed, set by the node (None: on the loop)
        # the ACL's hold on the local sessions' subscriptions, and the user name each client last connected with
        self.enforcer = AclEnforcer(self.access, self.sessions, self.unsubscribe, self.metrics)
        # a subscription that only overlaps a deny line gets the messages of its denied topics withheld one by one
        self.router.read_guard = ReadGuard(self.access, self.enforcer.usernames, self.metrics)
        self.wills = PendingWills(self.sessions, self.store, self.enforcer.usernames, self.publish_will)
        self._expiry = ExpiryScan(self.sessions)  # the offline sessions that expired, a slice per tick
        # The cluster's hooks, set by the node: the member names, who starts handing a session over to its new
        # owner, how a CONNECT is registered and, with `persistent_session_placement = assigned`, where it goes.
        self.nodes: Callable[[], Iterable[str]] | None = None
        self.on_moving: Callable[[str, str], None] | None = None
        self.on_recreated: Callable[[str, str | None], None] | None = None  # queue replicas fetch its messages
        self.registrar: Registrar | None = None
        self.placement: Placement | None = None
        # the session mover: sessions handed to and from other nodes (vmqpy.broker.core.migration); it is what the
        # cluster sees of the broker (vmqpy.cluster.ports.BrokerPort: node.py hands it over)
        self.migration = SessionMigration(self)
        # the congestion of other nodes' subscribers: publishers here held back (node.py feeds it the signals)
        self.backpressure = Backpressure(self._current_forwarder, self.metrics)
        self._moved = MovedRoutes(self.sessions, self._current_forwarder, self.metrics)
        # The same dict as the helper's, read here directly: publish tests it every time.
        self._congested_nodes = self.backpressure.congested_nodes
        # queue.max_stall: how long one congested subscriber may hold publishers back (vmqpy.broker.core.stalls)
        self.stalls = StallBound(config.queue_max_stall)
        # the subscriptions of ended sessions, removed a slice a loop turn once the node sets its `schedule`
        self.sweeper = SubscriptionSweeper(self._sweep_subscription)
        self.router.sweeping = self.sweeper.waiting  # their routes deliver only to a session holding them
        # deferred work (a client's packets beyond a turn's budget, slices of bulk jobs), 0.2 ms a loop turn
        # in all once the node sets its `schedule` (vmqpy.broker.core.turn_budget)
        self.lane = BulkLane()
        # every counter exists from the start
        for counter in (*OVERFLOW_COUNTERS, LINGER_CUT, RETAINED_WITHHELD, TURN_YIELDED):
            self.metrics[counter] += 0
        self._feed = RouteFeed(self.node, metadata, self.router, self.sessions, self.retained, self._moved)
        # forwards to and from other nodes (vmqpy.broker.core.forwards): node.py hands its `deliver_batch` to the links
        self.forwards = Forwards(self.router, self.metrics, self._moved, self.backpressure, self._current_forwarder,
                                  self.stalls)
        metadata.on_change(records.SUBSCRIPTION, self._feed.on_subscription_change)
        metadata.on_change(records.RETAIN, self._feed.on_retain_change)
        # the retained messages each client keeps (vmqpy.broker.access.retain_quota): a change of a topic's retained
        # message (by anyone, anywhere) ends the count of the client that set it; `publish` counts the new one
        self.retain_quota = RetainQuota(config.retain_max_per_client, config.retain_max_bytes_per_client)
        metadata.on_change(records.RETAIN, lambda key, _old, _new: self.retain_quota.released(str(key[1])))
        metadata.on_change(records.SESSION, self.migration.on_session_change)
        for counter in ("session_foreign_user_cleaned", "session_foreign_user_refused", "retain_quota_exceeded"):
            self.metrics[counter] = 0  # exported at 0 from the start (admin.prometheus)

    def _current_forwarder(self) -> Forwarder | None:
        return self.forwarder

    def load(self, now: float) -> None:
        """Rebuild persistent sessions from storage, subscriptions and retained messages from the metadata
        store; expired sessions and messages are removed, and so are subscriptions of sessions that did not
        survive (clean sessions of a node that crashed). A will kept in a session record is due again: its
        connection was lost when the node stopped (vmqpy.broker.core.stored_will)."""
        self._feed.load_retained(now)
        for stored in self.store.load_sessions().values():
            disconnected_at = stored.disconnected_at if stored.disconnected_at is not None else now
            if stored.expiry_interval is not None and disconnected_at + stored.expiry_interval <= now:
                self.store.delete_session(stored.client_id)
                continue
            session = self.new_session(stored.client_id, stored.protocol_level, stored.expiry_interval)
            session.disconnected_at = disconnected_at
            session.created_at = now
            session.user = stored.user
            if stored.user != UNKNOWN_USER:  # the ACL judges it as its owner (`enforcer`), before its client is back
                self.enforcer.usernames[stored.client_id] = stored.user
            if stored.will is not None:  # the connection was lost with the node, or its will was pending
                self.wills.restore(session, stored.will, disconnected_at)
            for out in sorted(stored.messages, key=lambda o: o.seq):
                session.restore(out)
            if stored.incoming:
                session.await_release(stored.incoming)
            self.sessions[session.client_id] = session
        self._feed.load_subscriptions()
        # A restored offline session is judged against the ACL in force before anything is queued for it: its
        # subscriptions the ACL no longer allows its owner go now, not when its client connects again.
        revoked = self.enforcer.enforce()
        log.info("storage loaded", sessions=len(self.sessions), retained=len(self.retained),
                 subscriptions_revoked=revoked)

    def new_session(self, client_id: str, level: int, expiry: float | None, sweep_first: bool = True) -> Session:
        """A session with this node's limits, journaled when it is persistent (not yet in `sessions`). What an
        ended session of `client_id` subscribed to and the sweeper has not removed yet goes first, unless not
        `sweep_first` (a clean start replacing a session: the router keeps those routes from the new one)."""
        if sweep_first:
            self.sweeper.flush(client_id)
        session = Session(
            client_id,
            protocol_level=level,
            expiry_interval=expiry,
            max_inflight=self.config.max_inflight_messages,
            max_online=self.config.max_online_messages,
            max_offline=self.config.max_offline_messages,
            metrics=self.metrics,
            max_bytes=self.config.max_queued_bytes,
        )
        self._set_journal(session)
        return session

    def _set_journal(self, session: Session) -> None:
        session.journal = self.store if session.persistent else NULL_JOURNAL

    def open_session(
        self, client_id: str, level: int, clean_start: bool, expiry: float | None, owner: Sink, now: float,
        image: SessionImage | None = None, username: str | None = None, will: Message | None = None,
        will_delay: float = 0.0, confirm: Any = None,
    ) -> tuple[Session, bool]:
        """Register a CONNECT: take over a live connection of the same id, resume or replace the session.
        `image` is the session handed over by its previous owner node (or rebuilt from the store when that
        node is unreachable); its messages follow through `adopt_messages`. `username`: the authenticated
        user; the subscriptions of a resumed session are judged again for it (`enforce_acl`). `will`: the
        connection's, kept in the session record while it is connected (vmqpy.broker.core.stored_will). A session of
        another user (vmqpy.sessions.owners; the connection refused it already under `session.foreign_user =
        refuse`) is not resumed: it ends, and `username` gets a clean one. `confirm` (`route_confirmation`): the
        routes of an adopted image join what it waits for (the CONNACK waits for them:
        vmqpy.broker.driver.connect_flow)."""
        existing = self.sessions.get(client_id)
        if existing is not None and not clean_start and is_foreign(existing.user, username):
            clean_start = True
            self.metrics["session_foreign_user_cleaned"] += 1
        if existing is not None and existing.moving_to is not None:
            # It was moving away, and the client id comes back here first: it stays. What was already handed
            # over comes back from the other node once it sees that this node owns the client id again.
            self.migration.abandon_handover(client_id)
        if existing is not None and existing.sink is not None and existing.sink is not owner:
            old_will, old_delay = existing.sink.take_over()
            existing.detach(now)
            self.metrics["session_takeover"] += 1
            if old_will is not None and (clean_start or old_delay <= 0):
                self.publish_will(old_will, now)
        pending = self.wills.take(client_id)
        if pending is not None and clean_start:
            self.publish_will(pending.message, now)  # the old session ends now, so its delayed will is due
        replaced = False
        if existing is not None and clean_start:
            # its subscriptions go a slice a turn (vmqpy.broker.core.sweeper): the new session does not wait for them
            self.discard(existing)
            existing, replaced = None, True
        adopted = image is not None and image.present and not clean_start
        session_present = existing is not None or adopted
        if existing is None:
            session = self.new_session(client_id, level, expiry, sweep_first=not replaced)
            self.sessions[client_id] = session
            session.user = username
        else:
            session = existing
            session.user = username  # the same user, or the first to connect to a session of an unknown owner
            was_persistent = session.persistent
            session.protocol_level = level
            session.expiry_interval = expiry
            self._set_journal(session)
            if was_persistent and not session.persistent:
                self.store.delete_session(client_id)
        if session.persistent:
            self.store.save_session(session, None if will is None else StoredWill(will, will_delay, None, username))
        # The owner record: every node learns where this client id lives now (a newer connect wins by HLC). A
        # clean session of a node without cluster links has nobody to tell, and ends with the node at the latest:
        # no record (the node's own `sessions` is where it is found), unless one is there to be replaced.
        # Without cluster links, a record that names this node with the same terms is not written again either
        # (a resumed persistent session): nobody else reads its stamp.
        key = records.session_key(client_id)
        alone = self.config.cluster_listener is None
        known = self.metadata.get(records.SESSION, key) if alone else None
        session.owner_recorded = not alone or session.persistent or known is not None
        if session.owner_recorded and not (alone and records.same_owner(known, self.node, clean_start, expiry,
                                                                        username)):
            value = records.session_value(self.metadata.hlc_now(), self.node, clean_start, expiry, user=username)
            self.metadata.put(records.SESSION, key, value)
        if adopted:
            assert image is not None
            self.migration.adopt_image(session, image, confirm)
        self.enforcer.connected(session, username)
        self.metrics["client_connected"] += 1
        return session, session_present

    def foreign_owner(self, client_id: str, username: str | None) -> bool:
        """Whether the session of `client_id` (kept here, or named by its owner record anywhere in the cluster)
        belongs to another user than `username` (vmqpy.sessions.owners)."""
        session = self.sessions.get(client_id)
        if session is not None and is_foreign(session.user, username):
            return True
        if self.config.cluster_listener is None:  # alone, every session of the client id is here
            return False
        value = self.metadata.get(records.SESSION, records.session_key(client_id))
        return value is not None and is_foreign(records.session_user(value), username)

    def attach(self, session: Session, owner: Sink, window: int, max_packet_size: int, now: float) -> None:
        session.attach(owner, window, max_packet_size, now)

    def close_session(
        self, session: Session, owner: Sink, now: float, will: Message | None, will_delay: float
    ) -> None:
        """The connection that owns `session` is gone; `will` is set when it ended without a normal DISCONNECT."""
        if session.sink is not owner:
            return  # taken over: the new connection owns the session now
        session.detach(now)
        pending = None if will is None else self.wills.lost(session, will, will_delay, now)
        if not session.persistent:
            self.discard(session)
        else:
            self.store.save_session(session, pending)

    def discard(self, session: Session, keep_owner: bool = False) -> None:
        """End `session` here: its subscriptions, its storage and (unless `keep_owner`) the owner record
        naming this node go."""
        client_id = session.client_id
        if session.subscriptions:
            filters = list(session.subscriptions)
            session.subscriptions.clear()
            self.sweeper.add(client_id, filters)  # many: a slice a loop turn (vmqpy.broker.core.sweeper)
        if self.sessions.get(client_id) is session:
            del self.sessions[client_id]
            self.enforcer.usernames.pop(client_id, None)
        if session.persistent or session.journal is self.store:
            self.store.delete_session(client_id)
        # A session that wrote no owner record, on a node without cluster links (no other node writes one), has none
        owner = (self.metadata.get(records.SESSION, records.session_key(client_id))
                 if session.owner_recorded or self.config.cluster_listener is not None else None)
        if not keep_owner and owner is not None and records.session_owner(owner) == self.node:
            self.metadata.delete(records.SESSION, records.session_key(client_id))  # not when it moved elsewhere
        session.release_waiters()

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None:
        """The will in the record of a session recovered from a lost owner's replicas (vmqpy.broker.core.wills)."""
        self.wills.adopt(client_id, will, now)

    def release_will(self, client_id: str, now: float) -> None:
        """The delayed will of `client_id`, if one waits, is due now: publish it."""
        self.wills.release(client_id, now)

    def disconnect_for_move(self, session: Session, now: float, clean: bool, reason: str,
                            takeover: bool = True) -> None:
        """Disconnect a live connection of `session`, which goes to another node; its will as for a takeover.
        `takeover`: a CONNECT of its client id on another node is the cause (counted in `session_taken_over_remote`,
        docs/operations.md "Takeovers"); False for a session an operator or a leave moves (a handover)."""
        if session.sink is not None:
            log.info(reason + ": disconnecting it here", client_id=session.client_id)
            will, delay = session.sink.take_over()
            session.detach(now)
            if takeover:
                self.metrics["session_taken_over_remote"] += 1
            if will is not None and (clean or delay <= 0):
                self.publish_will(will, now)
        if clean:
            self.release_will(session.client_id, now)
        else:
            self.wills.take(session.client_id)

    def tick(self, now: float) -> None:
        """Publish delayed wills that are due, end offline sessions that expired, and let the publishers of a
        subscriber that held them back for queue.max_stall go on."""
        self.wills.due(now)
        for session in self.stalls.due(now):
            self.overflow(session, now)
        for session in list(self._expiry.due(now)):
            self.release_will(session.client_id, now)
            self.metrics["session_expired"] += 1
            self.discard(session)

    def publish(self, message: Message, now: float) -> RouteResult:
        """Route a client's message (or its will); a retained one replaces (or with an empty payload deletes)
        the topic's retained. `$SYS` and the topics below it are the node's own (vmqpy.broker.operations.systree): a
        client's message there is dropped (its QoS 1/2 acknowledged all the same), as Mosquitto refuses it."""
        self.metrics["publish_received"] += 1
        if message.topic[:4] == "$SYS" and is_system_topic(message.topic):
            self.metrics["publish_sys_dropped"] += 1
            return RouteResult()
        durable = False
        if message.retain:
            key = records.retain_key(message.topic)
            if message.payload:
                size = len(message.payload) + len(message.topic)
                if not self.retain_quota.admits(message.publisher, message.topic, size):
                    self.metrics["retain_quota_exceeded"] += 1
                    log.debug("retained message refused: its client's retained quota is used up",
                              client_id=message.publisher, topic=message.topic,
                              held=self.retain_quota.held(message.publisher))
                    return RouteResult(retain_refused=True)
                self.metadata.put(records.RETAIN, key, records.retain_value(self.metadata.hlc_now(), message))
                self.retain_quota.stored(message.publisher, message.topic, size)
                durable = True
            elif message.topic in self.retained:
                self.metadata.delete(records.RETAIN, key)
                durable = True
        if self.forwarder is not None and message.forward_id is None:
            # named before the local deliveries, so that a subscriber here that moved from another node watches
            # for this id: that node may pass a copy back (vmqpy.broker.core.holdback.MovedRoutes.pass_on)
            self._forward_ids += 1
            message.forward_id = self._forward_ids
        result = self.router.route(message, now)
        result.durable = result.durable or durable
        if result.congested:
            self.stalls.watch(result.congested, now)
        self.metrics["publish_dropped"] += result.dropped
        if result.remote:
            self._forward(message, result)
            if self._congested_nodes:
                result.congested_nodes = [n for n in result.remote if n in self._congested_nodes]
        return result

    def overflow(self, session: Session, now: float) -> None:
        """`session` held its publishers back for queue.max_stall seconds: they go on, and queue.overflow says
        what becomes of it (vmqpy.broker.core.stalls): it alone drops (or queues on disk) what it cannot take, or it is
        disconnected (5.0: DISCONNECT 0x97 Quota exceeded; a persistent session stays, offline)."""
        policy = self.config.queue_overflow
        self.metrics["queue_stall_ended"] += 1
        log.warning("a subscriber held its publishers back for queue.max_stall: they go on without it",
                    client_id=session.client_id, queued=len(session.queue), queued_bytes=session.queued_bytes,
                    policy=policy)
        sink = session.sink
        if policy == "disconnect" and sink is not None:
            self.metrics["queue_overflow_disconnected"] += 1
            will, delay = sink.take_over(rc.QUOTA_EXCEEDED)
            self.close_session(session, sink, now, will, delay)
            return
        keep_on_disk = policy == "queue" and session.persistent
        session.overflow(max(session.max_offline, session.max_online) if keep_on_disk else session.max_online)

    def publish_system(self, message: Message, now: float) -> RouteResult:
        """Deliver a message the node itself publishes in its `$SYS` tree (vmqpy.broker.operations.systree) to this
        node's
        subscribers, and keep it in `system_retained` when it is retained (an empty payload deletes). The tree
        is the node's own, as a broker's `$SYS` is: not replicated, not forwarded to other nodes, not counted as
        received, and not held to the netsplit policy."""
        if message.retain:
            if message.payload:
                self.system_retained.set(message.topic, message)
            else:
                self.system_retained.delete(message.topic)
        result = self.router.route(message, now)
        result.remote = {}
        return result

    def publish_will(self, message: Message, now: float) -> bool:
        """A will is published only where publishing is allowed (netsplit policy) and to a topic the ACL in force
        lets its client write; otherwise it is dropped. False: the netsplit policy refused it (now)."""
        client_id = message.publisher
        if not self.access.may_publish(client_id, self.enforcer.usernames.get(client_id), message.topic):
            self.metrics["will_not_authorized"] += 1
            log.warning("will not published: the ACL does not allow its client to publish there",
                        client_id=client_id, topic=message.topic)
            return True
        if self.policy.may("publish"):
            self.publish(message, now)
            return True
        self.metrics["will_dropped_netsplit"] += 1
        log.warning("will not published: the cluster is not ready", topic=message.topic)
        return False

    def _forward(self, message: Message, result: RouteResult) -> None:
        """Hand the publish to the other nodes (vmqpy.broker.core.forwards). For QoS 1/2, `result.remote_ack`
        completes once every one of them acknowledged it (the publisher's acknowledgement waits for it)."""
        if message.forward_id is None:
            self._forward_ids += 1
            message.forward_id = self._forward_ids
        self.forwards.send(message, result)

    def deliver_forwarded(self, record: Any, now: float, peer: str | None = None, seq: int = 0) -> bool:
        """A publish another node routed here: deliver it to the local sessions only (to `clients` of the
        record when it names them). When a subscriber here is congested, `peer` is asked to slow its publishers
        down until the subscriber drained. True when a persistent session took it (it is on disk after the next
        storage barrier).

        `peer` may have routed it here by a subscription that moved away since (a session handed over to
        another node, whose new route has not reached `peer` yet): those subscribers get it through their new
        node, and `peer`'s acknowledgement of forward `seq` waits until that node has it (`MovedRoutes.pass_on`)."""
        return self.forwards.deliver_one(record, now, peer, seq)

    def route_confirmation(self) -> Any:
        """What the routes of one SUBSCRIBE/UNSUBSCRIBE wait for before its acknowledgement leaves
        (`subscription.acknowledge = cluster`: every reachable member applied them; docs/cluster.md), to pass to
        `subscribe`/`unsubscribe` and then `routes_applied`; None: the acknowledgement does not wait (`local`, or
        a node without cluster links)."""
        if not self.acknowledge_by_cluster:
            return None
        return self.metadata.confirmation()

    def routes_applied(self, confirm: Any) -> RemoteWait | None:
        """The wait for the members to apply the routes written with `confirm` (bounded by
        `subscription.acknowledge_timeout`); None when there is nothing to wait for."""
        if confirm is None:
            return None
        wait = self.metadata.seal(confirm)
        if wait is not None:
            self.metrics["subscription_acks_waited"] += 1
            wait.add_done_callback(partial(self._routes_settled, confirm))
        return wait

    def _routes_settled(self, confirm: Any) -> None:
        if confirm.late:
            self.metrics["subscription_acks_late"] += 1

    def subscribe(
        self, session: Session, subscriptions: list[Subscription], subscription_id: int | None, confirm: Any = None
    ) -> tuple[list[int], list[tuple[SubEntry, bool]]]:
        """Add subscriptions; the reason codes for SUBACK and the (entry, is_new) whose retained are due. With
        `confirm` (`route_confirmation`), the writes join what it waits for."""
        codes: list[int] = []
        added: list[tuple[SubEntry, bool]] = []
        failure = rc.V311_SUBACK_FAILURE if session.protocol_level < 5 else rc.TOPIC_FILTER_INVALID
        for sub in subscriptions:
            try:
                group, match_filter = parse_shared(sub.topic_filter)
            except ValueError:
                codes.append(failure)
                continue
            if not validate_topic_filter(match_filter) or too_deep(match_filter, self.config.topic_max_depth):
                codes.append(failure)  # 5.0: 0x8F Topic Filter invalid, as for any filter we cannot take
                continue
            if group is not None and sub.options.no_local:
                raise ProtocolViolation("no-local set on a shared subscription")
            entry = SubEntry(sub.topic_filter, match_filter, sub.options, subscription_id, group)
            is_new = sub.topic_filter not in session.subscriptions
            value = records.subscription_value(self.metadata.hlc_now(), self.node, entry)
            key = records.subscription_key(session.client_id, sub.topic_filter)
            self.metadata.put(records.SUBSCRIPTION, key, value, confirm)
            codes.append(sub.options.qos)
            added.append((entry, is_new))
        return codes, added

    def deliver_retained(self, session: Session, added: list[tuple[SubEntry, bool]], now: float) -> None:
        for entry, is_new in added:
            handling = entry.options.retain_handling
            if entry.group is not None or handling == 2 or (handling == 1 and not is_new):
                continue
            ids = [] if entry.subscription_id is None else [entry.subscription_id]
            matches = self.retained.match(entry.match_filter)
            if entry.match_filter[:4] == "$SYS":  # only a filter starting with $SYS matches the tree [MQTT-4.7.2-1]
                matches += self.system_retained.match(entry.match_filter)
            username = self.enforcer.usernames.get(session.client_id)
            for topic, message in matches:
                if message.expired(now):
                    continue
                if not self.access.may_read(session.client_id, username, topic):
                    self.metrics[RETAINED_WITHHELD] += 1
                    continue
                qos = outgoing_qos(message.qos, entry.options.qos, self.router.upgrade_qos)
                session.deliver(message, qos, True, ids, now)

    def _sweep_subscription(self, client_id: str, topic_filter: str) -> None:
        """Remove the subscription `topic_filter` of an ended session of `client_id` (the sweeper's remover),
        unless a session here holds that filter again, or the record is gone or names another node now."""
        current = self.sessions.get(client_id)
        if current is not None and topic_filter in current.subscriptions:
            return
        key = records.subscription_key(client_id, topic_filter)
        value = self.metadata.get(records.SUBSCRIPTION, key)
        if value is None or records.subscription_entry(key, value)[1] != self.node:
            return
        self.metadata.delete(records.SUBSCRIPTION, key)

    def unsubscribe(self, session: Session, topic_filters: list[str], confirm: Any = None) -> list[int]:
        """Remove subscriptions; the reason codes for UNSUBACK. With `confirm`, as `subscribe`."""
        codes = []
        for topic_filter in topic_filters:
            if topic_filter not in session.subscriptions:
                codes.append(rc.NO_SUBSCRIPTION_EXISTED)
                continue
            self.metadata.delete(records.SUBSCRIPTION, records.subscription_key(session.client_id, topic_filter),
                                 confirm)
            session.subscriptions.pop(topic_filter, None)
            codes.append(rc.SUCCESS)
        return codes

    def queued(self) -> int:
        return sum(len(s.queue) + len(s.inflight) for s in self.sessions.values())


__all__ = ["Broker"]
