"""The composition root: builds the node's services, starts them in order and stops them in reverse."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import structlog

from admin.errors import CommandError
from admin.keys import KeyStore, ensure_node_key, migrate_file_keys
from vmqpy import config as config_module
from vmqpy import logconfig, sdnotify
from vmqpy.broker.access.auth import Authenticator, parse_password_file
from vmqpy.broker.access.login_pool import LoginPool
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.broker.driver.connection import MQTTConnection
from vmqpy.broker.driver.live_connections import LiveConnections
from vmqpy.broker.listeners.address_limit import AddressLimits
from vmqpy.broker.listeners.listener_control import ListenerControl
from vmqpy.broker.listeners.listeners import Listeners
from vmqpy.broker.listeners.tls import ClusterContexts, ListenerContexts, cluster_contexts, https_context
from vmqpy.broker.listeners.tls import settings_of as tls_settings_of
from vmqpy.broker.operations import systree
from vmqpy.broker.operations.systree import SysTreePublisher
from vmqpy.cluster.admin_calls import AdminCalls
from vmqpy.cluster.controls import ControlTable
from vmqpy.cluster.departure import Departure
from vmqpy.cluster.discovery import Discovery
from vmqpy.cluster.discovery_plan import Situation, peers_of
from vmqpy.cluster.events import ClusterEvents
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.leaving import LeaveState
from vmqpy.cluster.membership import DEPARTED as MEMBERSHIP_DEPARTED
from vmqpy.cluster.membership import MEMBERSHIP as MEMBERSHIP_PREFIX
from vmqpy.cluster.membership import (
    LeftState,
    load_incarnation,
    next_incarnation,
    replica_id,
    save_incarnation,
)
from vmqpy.cluster.placement import AssignedServers
from vmqpy.cluster.policy import OPERATIONS, NetsplitSettings, Policy
from vmqpy.cluster.registration import RegistrationService
from vmqpy.cluster.replica_links import ReplicaLinks
from vmqpy.cluster.service import ClusterService
from vmqpy.cluster.tcp import ClusterNetwork
from vmqpy.cluster.view import View
from vmqpy.config import Config
from vmqpy.descriptors import OpenFilesLimit, mqtt_socket_budget, open_descriptors, per_address, raise_open_files_limit
from vmqpy.drain import Outcome
from vmqpy.facade import API_KEYS, NodeFacade
from vmqpy.gc_watch import THRESHOLDS
from vmqpy.hangup import Hangup, reload_on_hangup
from vmqpy.metadata.replication_log import ReplicationLog
from vmqpy.metadata.resolve import latest_stamp
from vmqpy.metadata.service import MetadataService
from vmqpy.node_tick import background, ticking
from vmqpy.replicas.audit import EVENT as REPLICA_AUDIT
from vmqpy.replicas.failover import Failover
from vmqpy.replicas.owner import QueueReplicator
from vmqpy.replicas.rebalancer import Rebalancer
from vmqpy.replicas.service import QueueReplication
from vmqpy.sessions import records
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.node")

RESOLVERS = {records.SESSION: latest_stamp, records.SUBSCRIPTION: latest_stamp, records.RETAIN: latest_stamp,
             records.NODE_LISTENERS: latest_stamp, API_KEYS: latest_stamp}


def _keep_no_replica(_record: Any, _now: float, _sender: str, _seq: int) -> bool:
    """A node without queue replicas keeps no replica operation it is sent; it acknowledges them (after its
    storage barrier, as a replica does) so that the sender does not send them again."""
    return True


class Node:
    """One vmqpy node. `async with node.running():` starts it; leaving the block stops it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.storage: Storage | None = None
        self.broker: Broker | None = None
        self.metadata: MetadataService | None = None
        self.cluster: ClusterService | None = None  # when listener.vmq.clustering is set
        self.cluster_tls: ClusterContexts | None = None  # when cluster.tls.* are set: links over TLS
        self.registration: RegistrationService | None = None
        self.departure: Departure | None = None
        self.replication: QueueReplication | None = None  # queue.replicas > 1 and cluster links (vmqpy.replicas)
        self.controls: ControlTable | None = None  # with a cluster: who handles each frame from another node
        self.policy = Policy(NetsplitSettings.of(config))
        self.events = ClusterEvents()  # recent joins, leaves, netsplits, session moves (the status page)
        self._reopening: asyncio.Task[None] | None = None
        self._placement: AssignedServers | None = None  # persistent_session_placement = assigned
        self.connections: LiveConnections[MQTTConnection] = LiveConnections()  # in the order accepted
        # the MQTT listeners: opened, stopped and started by the operator, drained
        self.listeners = ListenerControl(config, self.connections,
                                         lambda: self.cluster is not None and self.cluster.removed)
        self.started_at = 0.0
        self.open_files = OpenFilesLimit(None, None, None)  # the soft limit as `running` raised it
        self.on_stop_request: Callable[[], None] | None = None  # `serve` sets it: `vmq-admin node stop`
        self.hangup = Hangup()  # SIGHUP: kept while the node starts, a reload once its listeners are open

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Node]:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self.hangup.signalled)  # kept until the listeners are open
        warn_ignored_keys(self.config)
        logconfig.set_connection_lines(self.config.log_connections)
        self.open_files = raise_open_files_limit()  # systemd's soft 1,024 would refuse clients long before memory
        async with AsyncExitStack() as stack:
            stack.callback(loop.remove_signal_handler, signal.SIGHUP)
            storage = await stack.enter_async_context(self._storage())
            incarnation = load_incarnation(self.config.data_dir)
            network = await stack.enter_async_context(self._network(incarnation))
            incarnations: dict[str, int] = {self.config.nodename: incarnation}
            links = None if network is None else ReplicaLinks(network, incarnations)
            metadata = await stack.enter_async_context(self._metadata(storage, incarnation, links))
            broker = self.broker = Broker(self.config, SessionStore(storage), metadata, policy=self.policy)
            broker.lane.schedule = loop.call_soon  # deferred work: 0.5 ms a loop turn (vmqpy.broker.core.turn_budget)
            lane = broker.lane
            # ended sessions' subscriptions: a slice a step of the bulk lane
            broker.sweeper.schedule = lambda step: lane.add(step, loop.call_soon)
            broker.router.shared_policy = self.config.shared_subscription_policy
            # The ACL and password files in force before the sessions are restored (a file that cannot be used
            # stops the start): a restored session's subscriptions the ACL no longer allows go at once.
            broker.access.load(config_module.acl_file_in_force(self.config),
                               config_module.password_file_in_force(self.config))
            broker.load(time.time())
            if network is not None:
                self.replication = QueueReplication.configured(self.config, storage, self.policy)
                await stack.enter_async_context(self._cluster(network, metadata, broker, incarnation, incarnations))
            collector = await stack.enter_async_context(ticking(broker))
            facade = self._facade(broker, metadata, storage, collector.counters)
            if self.replication is not None:
                storage = self.replication.durable(storage)  # acknowledgements wait for the replicas too
            await stack.enter_async_context(self._systree(broker, facade))
            await stack.enter_async_context(self._access_reload(broker))
            await stack.enter_async_context(self._admin_api(facade))
            # once the listeners are closed (their sessions ended), the subscriptions still waiting to be swept go
            # before the cluster and the metadata store close (vmqpy.broker.core.sweeper)
            stack.callback(broker.sweeper.drain)
            await stack.enter_async_context(self._listeners(broker, storage))
            if self.cluster is not None and self.config.persistent_session_placement == "assigned":
                self._assign_servers(broker, metadata)
            await stack.enter_async_context(self._discovery())  # cluster.discovery: once the node serves
            self.started_at = time.time()
            listening = [f"{k}:{h}:{p}" if k != "tcp" else f"{h}:{p}"
                         for k, _n, h, p in config_module.mqtt_listeners(self.config)]
            log.info("node started", listeners=listening)
            # Started: listeners open, admin API answering (its /health may still say 503 in a netsplit or a join:
            # readiness to serve is HAProxy's question; waiting for it here would let a unit time out and kill a
            # node whose peers are down). `Type=notify` units count the start as done from here.
            sdnotify.notify({"READY": "1", "STATUS": f"{self.config.nodename} started; MQTT on {', '.join(listening)}"})
            yield self
            sdnotify.notify({"STOPPING": "1", "STATUS": f"{self.config.nodename} stopping"})
            log.info("node stopping")

    @contextlib.asynccontextmanager
    async def _storage(self) -> AsyncIterator[Storage]:
        data_dir = self.config.data_dir
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in ("broker.db", "broker.db-wal", "broker.db-shm"):  # 0644 from versions before the 0077 umask
            if (data_dir / name).exists():
                (data_dir / name).chmod(0o600)
        storage = self.storage = Storage(data_dir / "broker.db")
        storage.open()
        try:
            yield storage
        finally:
            storage.close()

    @contextlib.asynccontextmanager
    async def _network(self, incarnation: int) -> AsyncIterator[ClusterNetwork | None]:
        """The node links, when `listener.vmq.clustering` is set."""
        address = self.config.cluster_listener
        if address is None:
            yield None
            return
        tls = self.cluster_tls = cluster_contexts(self.config)  # ConfigError: checked by `vmqpy start` already
        network = ClusterNetwork(
            self.config.nodename,
            incarnation,
            self.config.distributed_cookie,
            address,
            detect_timeout=self.config.detect_timeout,
            handshake_timeout=self.config.cluster_handshake_timeout,
            max_pending_links=self.config.cluster_max_pending_links,
            max_pending_links_per_address=self.config.cluster_max_pending_links_per_address,
            incoming_buffer=self.config.incoming_clustering_buffer_size,
            outgoing_buffer=self.config.outgoing_clustering_buffer_size,
            tls_server=tls.server if tls is not None else None,
            tls_client=tls.client if tls is not None else None,
        )
        await network.start()
        try:
            yield network
        finally:
            await network.stop()

    @contextlib.asynccontextmanager
    async def _cluster(
        self, network: ClusterNetwork, metadata: MetadataService, broker: Broker, incarnation: int,
        incarnations: dict[str, int],
    ) -> AsyncIterator[None]:
        address = self.config.cluster_listener
        assert address is not None
        left = LeftState.load(self.config.data_dir)
        if left is not None and left.incarnation != incarnation:
            LeftState.clear(self.config.data_dir)  # a marker of a former incarnation (a crash while rejoining)
            left = None
        self.policy.left = left is not None
        replication = self.replication
        local_barrier = None if self.storage is None else self.storage.barrier
        barrier = local_barrier if replication is None else replication.barrier  # forwards: the replicas' too
        # the publishes' forwarding (FORWARD, `fwd_ack`, `congestion`): the broker's Forwarder
        forwarding = ForwardDriver(network, broker.deliver_forwarded, barrier,
                                   deliver_batch=broker.forwards.deliver_batch,
                                   on_congestion=broker.backpressure.on_peer_congestion)
        # the queue replicas' operations (REPLICA, `rep_ack`), acknowledged after the storage's own barrier
        replica_transport = ForwardDriver(network, _keep_no_replica if replication is None else replication.deliver,
                                          local_barrier or barrier, frame_type=FrameType.REPLICA, ack_op="rep_ack")
        cluster = self.cluster = ClusterService(
            self.config.nodename, incarnation, address, network, metadata,
            forwarding=forwarding, replication=replica_transport,
            on_removed=self._on_removed, on_view=self._on_view,
            left=None if left is None else left.by, reincarnate=self._reincarnate,
            joining=self._on_joining, incarnations=incarnations,
        )
        broker.forwarder = forwarding
        mover = broker.migration  # what the cluster sees of the broker (vmqpy.cluster.ports.BrokerPort)
        durable = self.storage if replication is None or self.storage is None else replication.durable(self.storage)
        registration = self.registration = RegistrationService(
            cluster, mover, durable, allow_without_leader=lambda: self.policy.settings.allow_register,
            majority_serves=lambda: self.policy.settings.readiness == "majority" and self.policy.ready)
        departure = self.departure = Departure(
            cluster, registration, mover, self._stop_serving, self._reopen_listeners,
            recoverable=None if replication is None else replication.held_for)
        controls = self.controls = self._control_table(cluster, registration, departure)
        cluster.add_hooks(reachability=broker.backpressure.on_peer_reachability)
        cluster.add_hooks(reachability=registration.on_reachability)
        if replication is not None:
            self._queue_replicas(replication, replica_transport, cluster, broker, registration, controls)
        network.on_message(controls.deliver)  # every frame but METADATA goes straight to its one handler
        cluster.start()
        # Before registration.start(), which resumes the handovers of sessions kept here.
        broker.registrar = registration
        broker.on_moving = registration.on_moving
        broker.nodes = cluster.member_names
        metadata.on_change(records.SESSION, registration.on_session_record)
        metadata.on_change(records.SESSION, self.events.on_session)
        metadata.on_change(MEMBERSHIP_PREFIX, self.events.on_membership)
        registration.start()
        try:
            yield
        finally:
            broker.registrar = None
            broker.on_moving = None
            if replication is not None:
                replication.stop()
                broker.store.replicas = None
                broker.on_recreated = None
            await registration.stop()
            broker.forwarder = None
            await cluster.stop()

    def _control_table(self, cluster: ClusterService, registration: RegistrationService,
                       departure: Departure) -> ControlTable:
        """Who handles each frame another node sends (vmqpy.cluster.controls): one handler per frame type and per
        CONTROL op; the admin questions join once the facade is built (`_facade`), the queue replicas' ops in
        `_queue_replicas`."""
        controls = ControlTable(self.config.nodename)
        controls.add_frame(FrameType.REACHABILITY, cluster.on_reports)
        controls.add_ops(cluster.control_ops())
        for driver in (cluster.forwarding, cluster.replication):
            controls.add_frame(driver.frame_type, driver.receive)
            controls.add_ops(driver.control_ops())
        controls.add_all(RegistrationService.CONTROL_OPS, registration.on_control)
        controls.add_all(Departure.CONTROL_OPS, departure.on_control)
        return controls

    def _queue_replicas(self, replication: QueueReplication, transport: ForwardDriver, cluster: ClusterService,
                        broker: Broker, registration: RegistrationService, controls: ControlTable) -> None:
        """The queue replicas' owner side (vmqpy.replicas), built from its parts and wired: the broker's persistent
        sessions journal to the replicas from now on; a recreated session's messages are fetched from them
        (failover), and a registration that recreates one waits for that; the copies move with the membership
        (rebalancer); `cluster show` counts what is not yet on every replica node."""
        assert self.storage is not None
        replicas, quorum = replication.settings
        replicator = QueueReplicator(cluster.name, cluster.member_names, cluster.is_reachable, transport,
                                     self.storage.barrier, replicas=replicas, write_quorum=quorum,
                                     strict=replication.strict)
        failover = Failover(cluster.name, replication.copies, cluster, broker.migration, replication.barrier,
                            replication.failover_timeout)
        rebalancer = Rebalancer(replicator, broker.sessions, broker.store,
                                lambda: {name: member.incarnation for name, member in cluster.members.items()},
                                replication.rebalance_rate, cluster.is_reachable, broker.migration.lineage_names)
        broker.store.replicas = replicator
        broker.on_recreated = replication.on_recreated
        registration.recovery = replication.recovered
        controls.add_all(Failover.CONTROL_OPS, failover.on_control)
        cluster.add_hooks(reachability=replication.on_reachability, membership=rebalancer.on_membership,
                          show_columns=replication.show_columns)
        replication.start(transport, replicator, failover, rebalancer)
        metadata = self.metadata
        if metadata is not None and metadata.replication_log is not None:
            replication.audit(functools.partial(metadata.log, REPLICA_AUDIT))

    @contextlib.asynccontextmanager
    async def _discovery(self) -> AsyncIterator[None]:
        """`cluster.discovery` (vmqpy.cluster.discovery): join a listed peer's cluster, retried, while the node
        runs; nothing without a cluster listener or without peers."""
        cluster = self.cluster
        if cluster is None or not self.config.cluster_discovery:
            yield
            return

        def situation() -> Situation:
            members = frozenset(cluster.members)
            departed = {str(key[0]) for key, _value in cluster.metadata.fold(MEMBERSHIP_DEPARTED)} - members
            leaving = self.departure is not None and self.departure.state is not LeaveState.SERVING
            return Situation(self.config.nodename, members | {self.config.nodename}, frozenset(departed),
                             left=cluster.removed, busy=self.policy.joining or leaving)

        discovery = Discovery(peers_of(self.config.cluster_discovery), situation, cluster.join,
                              shortest=self.config.cluster_discovery_interval,
                              longest=self.config.cluster_discovery_max_interval)
        async with background(discovery.run()):
            yield

    def _on_view(self, view: View) -> None:
        self.events.on_view(self.policy.view, view)
        self.policy.view = view
        log.info("cluster view", ready=view.ready, majority=view.in_majority, groups=[list(g) for g in view.groups],
                 serving=self.policy.ready)
        if self.metadata is not None and self.metadata.replication_log is not None:
            fields = view.to_dict()
            del fields["node"]  # every line names its node already
            self.metadata.replication_log.write("cluster_view", self.metadata.hlc_now(), fields)

    def _stop_serving(self, reference: str | None) -> None:
        """This node is leaving with `-k`: no new clients; 5.0 clients are told to use `reference`."""
        self.listeners.close_servers()
        for conn in list(self.connections):
            conn.move_away(reference)

    def _on_removed(self) -> None:
        """This node left the cluster (docs/cluster.md, "After a leave"): it remembers that across restarts,
        refuses every client (CONNACK: server unavailable) and disconnects the ones it has, and stays up, alone,
        until `cluster join` makes it a new incarnation."""
        cluster = self.cluster
        assert cluster is not None
        LeftState(cluster.incarnation, cluster.removed_by or cluster.name, time.time()).save(self.config.data_dir)
        self.policy.left = True
        if self.departure is not None:
            self.departure.removed()
        for conn in list(self.connections):
            conn.close()
        self._reopen_listeners()  # closed by a `leave -k`: clients are told why they are refused

    def _on_joining(self, joining: bool) -> None:
        """A `cluster join` runs (docs/cluster.md, "Joining"): no client is served until the cluster's records
        are here."""
        self.policy.joining = joining
        log.info("joining a cluster: taking no client until its records are here" if joining else
                 "joining done: serving as the netsplit policy says", serving=self.policy.ready)

    def _assign_servers(self, broker: Broker, metadata: MetadataService) -> None:
        """`persistent_session_placement = assigned` (vmqpy.cluster.placement): tell the cluster where clients
        reach this node's listeners, and send each CONNECT of a persistent session to its assigned server."""
        assert self.cluster is not None
        placement = self._placement = AssignedServers(self.config.nodename, metadata, self.cluster.member_names,
                                                      self.cluster.is_reachable)
        placement.advertise(self.listeners.advertised())
        broker.placement = placement

    async def _reincarnate(self) -> int:
        """Start again after a leave: an empty store under a new incarnation, saved before it is used."""
        assert self.metadata is not None and self.cluster is not None
        network = self.cluster.network
        new = next_incarnation(self.cluster.incarnation)
        await self.metadata.reincarnate(replica_id(self.config.nodename, new))
        save_incarnation(self.config.data_dir, new)
        LeftState.clear(self.config.data_dir)
        network.set_incarnation(new)
        if self.departure is not None:
            self.departure.reset()
        self.policy.left = False
        if self._placement is not None:  # the new incarnation's store starts empty
            self._placement.advertise(self.listeners.advertised())
        return new

    @contextlib.asynccontextmanager
    async def _metadata(
        self, storage: Storage, incarnation: int, links: ReplicaLinks | None
    ) -> AsyncIterator[MetadataService]:
        replication_log = ReplicationLog(self.config.replication_log or self.config.data_dir / "replication.log",
                                         self.config.nodename, max_size=self.config.replication_log_max_size,
                                         count=self.config.replication_log_count,
                                         values=self.config.replication_log_values)
        replication_log.open()
        metadata = self.metadata = MetadataService(
            replica_id(self.config.nodename, incarnation),
            storage,
            replication_log=replication_log,
            transport=links,
            resolvers=RESOLVERS,
            sync_interval=self.config.metadata_sync_interval,
            reply_bytes=min(8 << 20, self.config.incoming_clustering_buffer_size // 2),
            # every node answers the pushes of subscriptions (whatever its own subscription.acknowledge), so that
            # a SUBACK can wait for the routes to be applied across the cluster (docs/cluster.md)
            acknowledged=(records.SUBSCRIPTION,),
            ack_timeout=self.config.subscription_acknowledge_timeout,
        )
        metadata.start()
        try:
            yield metadata
        finally:
            metadata.stop()
            replication_log.close()

    def _facade(self, broker: Broker, metadata: MetadataService, storage: Storage,
                collector: Callable[[], dict[str, int | float]]) -> NodeFacade:
        """The node as the admin layer sees it: its services, handed over one by one; with a cluster, the
        questions of the other members' admin commands reach it (`admin_calls`, in the control table)."""
        replication = self.replication
        facade = NodeFacade(
            config=lambda: self.config, apply_setting=self.apply_setting, broker=broker, metadata=metadata,
            storage=storage, policy=self.policy, connections=self.connections, cluster=self.cluster,
            registration=self.registration, departure=self.departure, lifecycle=self,
            events=self.events, collector=collector, queue_replicas=None if replication is None else replication.stats,
        )
        calls = facade.admin_calls
        if calls is not None and self.controls is not None:
            self.controls.add_all(AdminCalls.CONTROL_OPS, calls.on_control)
        return facade

    def _migrate_api_keys(self, facade: NodeFacade) -> None:
        """The API keys an earlier version kept in DATA_DIR/api_keys, moved into the cluster's store (admin.keys)."""
        try:
            moved = migrate_file_keys(self.config.data_dir, facade)
        except CommandError as exc:
            log.warning("api_keys_not_migrated", reason=exc.message)
            return
        if moved:
            log.info("api_keys_migrated", keys=moved, into="the cluster's metadata store")

    @contextlib.asynccontextmanager
    async def _admin_api(self, facade: NodeFacade) -> AsyncIterator[None]:
        """The HTTP admin API on `listener.http.default`, with the node's API key created at first start."""
        address = self.config.http_listener
        secure = self.config.https_listener  # listener.https.default: the same API over TLS
        if address is None and secure is None:
            yield
            return
        from admin.http import start_api  # aiohttp's server: loaded by the nodes that serve the API only

        ensure_node_key(self.config.data_dir)
        self._migrate_api_keys(facade)
        apis = []
        try:
            if address is not None:
                apis.append(await start_api(facade, KeyStore(self.config.data_dir, facade), address[0], address[1],
                                            max_connections=self.config.http_max_connections,
                                            request_timeout=self.config.http_request_timeout))
            if secure is not None:
                apis.append(await start_api(facade, KeyStore(self.config.data_dir, facade), secure[0], secure[1],
                                            ssl_context=https_context(self.config),
                                            max_connections=self.config.http_max_connections,
                                            request_timeout=self.config.http_request_timeout))
            yield
        finally:
            for api in reversed(apis):
                await api.stop()

    def apply_setting(self, key: str, value: object) -> None:
        """A run-time change made through `vmq-admin set` (only keys in vmqpy.facade.RUNTIME_SETTINGS)."""
        if key == "log.console.level":
            logconfig.set_level(str(value))
        if key == "log.connections":
            logconfig.set_connection_lines(bool(value))
        changes: dict[str, Any] = {config_module.field_of(key): value}
        if key == "trade_consistency":
            changes.update({f"allow_{op}_during_netsplit": value for op in OPERATIONS})
        self.config = dataclasses.replace(self.config, **changes)
        self.policy.settings = NetsplitSettings.of(self.config)
        if self.broker is not None:
            self.broker.router.shared_policy = self.config.shared_subscription_policy
            self.broker.acknowledge_by_cluster = (self.config.subscription_acknowledge == "cluster"
                                                  and self.config.cluster_listener is not None)
            self._apply_limits(self.broker)
        if self.metadata is not None:
            self.metadata.ack_timeout = self.config.subscription_acknowledge_timeout
        log.info("setting changed", key=key, value=value)

    def _apply_limits(self, broker: Broker) -> None:
        """The copies of the settings in force (vmqpy.runtime_settings says when each takes effect): the broker's
        and the listeners' configuration (read for new sessions and connections), every session's queue limits,
        the authenticator's allow_anonymous and the router's QoS upgrade."""
        config = self.config
        broker.config = config
        listener_set = self.listeners.listener_set
        if listener_set is not None:
            listener_set.config = config
            listener_set.auth.allow_anonymous = config.allow_anonymous
        broker.access.authenticator.allow_anonymous = config.allow_anonymous
        broker.router.upgrade_qos = config.upgrade_outgoing_qos
        for session in broker.sessions.values():
            session.max_online = config.max_online_messages
            session.max_offline = config.max_offline_messages
            session.max_bytes = config.max_queued_bytes
            session.max_inflight = config.max_inflight_messages

    @contextlib.asynccontextmanager
    async def _access_reload(self, broker: Broker) -> AsyncIterator[None]:
        """The ACL and password files in force (vmqpy.broker.access.control; loaded before the broker's sessions are
        restored) looked at every `vmq_acl.acl_reload_interval` and `vmq_passwd.password_reload_interval` seconds
        (0: never) and reloaded when they changed. The login pool (`auth.hash_workers`, `auth.hash_queue`) runs as
        long."""
        # passwords are hashed in the login pool's threads, not on the event loop (vmqpy.broker.access.login_pool)
        logins = broker.logins = LoginPool(self.config.hash_workers, self.config.hash_queue)
        broker.access.authenticator.deferred = True

        async def watch(interval: float, acl: bool) -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    broker.enforcer.reload(acl=acl, passwords=not acl)
                except Exception:
                    log.exception("access file reload failed")

        async with background(*(watch(interval, acl)
                                for interval, acl in ((self.config.acl_reload_interval, True),
                                                      (self.config.password_reload_interval, False))
                                if interval > 0)):
            try:
                yield
            finally:
                logins.close()

    @contextlib.asynccontextmanager
    async def _systree(self, broker: Broker, facade: NodeFacade) -> AsyncIterator[None]:
        """The `$SYS` tree (vmqpy.broker.operations.systree): a round every `systree_interval` milliseconds, unless
        `systree_enabled` is off or the interval is 0."""
        interval = systree.period(self.config.systree_enabled, self.config.systree_interval)
        if interval is None:
            yield
            return
        publisher = SysTreePublisher(
            self.config.nodename, metrics=facade.metrics, publish=broker.publish_system,
            retained=lambda prefix: [(t, m.payload) for t, m in broker.system_retained.match(prefix + "/#")],
        )
        async with background(systree.run(publisher, interval, time.time, time.monotonic)):
            yield

    @contextlib.asynccontextmanager
    async def _listeners(self, broker: Broker, storage: Storage) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        path = config_module.password_file_in_force(self.config)
        auth = Authenticator(self.config.allow_anonymous, parse_password_file(path) if path else {})
        tls = ListenerContexts(tls_settings_of(self.config))  # ConfigError: checked by `vmqpy start` already
        budget, addresses = self._socket_budget(broker)
        listener_set = Listeners(self.config, broker, storage, auth, self.connections, tls, budget, addresses)
        self.listeners.listener_set = listener_set
        self.listeners.socket_budget = budget
        try:
            await listener_set.start()
            await self.listeners.open_all()
            self.hangup.serve(lambda: reload_on_hangup(tls, self.cluster_tls, broker))
            yield
        finally:
            self.hangup.serve(None)
            self.listeners.close_servers()
            for conn in list(self.connections):
                conn.normal_close = True  # a shutdown is not the client's failure: no will
                conn.close()
            deadline = loop.time() + 2.0
            while self.connections and loop.time() < deadline:
                await asyncio.sleep(0.01)
            await listener_set.close()
            await storage.sync()

    def _socket_budget(self, broker: Broker) -> tuple[int | None, AddressLimits]:
        """The MQTT sockets the node may hold (vmqpy.descriptors: the open files limit less what is open now, the
        admin listeners' caps, the cluster port's pending links and a spare) and the per-address limits in force
        (`auto`: a half and an eighth)."""
        admin_listeners = (self.config.http_listener is not None) + (self.config.https_listener is not None)
        cluster_pending = 0 if self.config.cluster_listener is None else self.config.cluster_max_pending_links
        budget = mqtt_socket_budget(self.open_files.soft, open_descriptors() or 0,
                                    admin_listeners * self.config.http_max_connections, cluster_pending)
        addresses = AddressLimits(per_address(self.config.max_connections_per_address, budget, 2),
                                  per_address(self.config.max_pending_per_address, budget, 8), broker.metrics)
        log.info("MQTT socket budget", max_sockets=budget, cluster_pending_links=cluster_pending,
                 per_address=addresses.maximum,
                 pending_per_address=addresses.pending, open_files_limit=self.open_files.soft)
        return budget, addresses

    # ------------------------------------------------------------------------- admin.cli.listener, node drain

    def listener_rows(self) -> list[dict[str, Any]]:
        return self.listeners.rows()

    def stop_listener(self, address: str, port: int, kill_sessions: bool) -> str:
        return self.listeners.stop(address, port, kill_sessions)

    async def start_listener(self, address: str, port: int) -> str:
        return await self.listeners.start(address, port)

    def drain_reason(self) -> str | None:
        return self.listeners.drain_reason()

    async def drain_clients(self, rate: float, timeout: float) -> tuple[Outcome, int, int]:
        return await self.listeners.drain_clients(rate, timeout)

    def request_stop(self) -> bool:
        """`vmq-admin node stop`: stop the node as SIGTERM does, once the current answer is sent. False when
        nothing can stop it this way (a node not run by `serve`)."""
        stop = self.on_stop_request
        if stop is None:
            return False
        log.info("stop requested through the admin API")
        asyncio.get_running_loop().call_soon(stop)
        return True

    def _reopen_listeners(self) -> None:
        async def reopen() -> None:
            try:
                await self.listeners.open_all()
            except OSError as exc:
                log.error("MQTT listeners could not be opened again", error=str(exc))

        self._reopening = asyncio.get_running_loop().create_task(reopen())

    def bound_ports(self) -> list[tuple[str, int]]:
        return self.listeners.bound_ports()


def warn_ignored_keys(config: Config) -> None:
    """One warning line naming the configuration keys that mean nothing here (VerneMQ's, vmqpy.vernemq_conf)."""
    if config.ignored:
        log.warning("configuration keys ignored: they have no meaning in vmqpy (docs/configuration.md, "
                    "'Starting from a vernemq.conf')", keys=list(config.ignored))


async def serve(config: Config) -> None:
    """Run a node until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node = Node(config)
    node.on_stop_request = stop.set
    async with node.running():
        tune_garbage_collector()
        await stop.wait()
        gc.freeze()  # what the node built while it ran: the interpreter's exit collections would walk all of it


def tune_garbage_collector() -> None:
    """What the node loaded at start (its store, its sessions, its code) lives until it stops: move it out of
    the collector's sight (`gc.freeze`), so that a full collection no longer walks it, and set the collector's
    thresholds (`vmqpy.gc_watch.THRESHOLDS`: young collections after 50,000 net allocations instead of 700, short
    passes over the older generations; the watch freezes again after a slow full pass)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
