"""The node as the administration layer sees it (`admin.facade.AdminNode`), built by node.py from the
node's services.

Reads come from the broker, the metadata store and the cluster service; nothing here changes protocol state
except through their own methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from admin import session_table
from admin.errors import CommandError
from vmqpy import BUILD, __version__, admin_rows, runtime_settings
from vmqpy import config as config_module
from vmqpy.broker.core import operator_actions
from vmqpy.broker.operations.trace import Trace, TraceOptions
from vmqpy.cluster.admin_calls import AdminCalls, Answers, Handler
from vmqpy.cluster.errors import CommandRefused
from vmqpy.cluster.policy import LEFT_REASON, OPERATIONS
from vmqpy.mqtt.topics import validate_topic_filter, validate_topic_name
from vmqpy.sessions import records

if TYPE_CHECKING:
    from vmqpy.broker.core.broker import Broker
    from vmqpy.cluster.departure import Departure
    from vmqpy.cluster.events import ClusterEvents
    from vmqpy.cluster.policy import Policy
    from vmqpy.cluster.registration import RegistrationService
    from vmqpy.cluster.service import ClusterService
    from vmqpy.config import Config
    from vmqpy.drain import Outcome
    from vmqpy.metadata.replica import Replica
    from vmqpy.metadata.service import MetadataService
    from vmqpy.storage import Storage

Row = dict[str, Any]
RUNTIME_SETTINGS = tuple(runtime_settings.RUNTIME)  # `vmq-admin set` changes these (vmqpy.runtime_settings)


TRACE_POLL = 0.1  # seconds between two hand-outs of a trace's lines
SESSIONS = "sessions"  # the admin questions every member answers (vmqpy.cluster.admin_calls)
DISCONNECT = "disconnect"
REAUTHORIZE = "reauthorize"
STATUS = "status"
READY = "ready"
#: a node's states as `node_state` names them (its /health answers 200 only when ready)
NODE_STATES = (READY, "not ready", "joining", "draining", "leaving", "left")
NO_NEW_CLIENTS = frozenset({"draining", "leaving", "left"})
UNSUBSCRIBE = "unsubscribe"
SET = "set"  # `vmq-admin set KEY=VALUE --all` / `--node=NAME`: the member changes its own setting


API_KEYS = "api_key"  # the cluster's API keys (admin.keys): (sha256 hex,) -> [stamp, record]


def _api_key_record(value: Any) -> Row | None:
    """The record of a stored API key value ([stamp, record]), or None."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict):
        return dict(value[1])
    return None


class Lifecycle(Protocol):
    """What `vmq-admin node drain` and `node stop` ask of the node (vmqpy.node.Node)."""

    def drain_reason(self) -> str | None: ...

    async def drain_clients(self, rate: float, timeout: float) -> tuple[Outcome, int, int]: ...

    def request_stop(self) -> bool: ...

    def listener_rows(self) -> list[Row]: ...

    def stop_listener(self, address: str, port: int, kill_sessions: bool) -> str: ...

    async def start_listener(self, address: str, port: int) -> str: ...


class ClientConnection(Protocol):
    """What `session show` reads of a live MQTT connection."""

    @property
    def peer(self) -> tuple[str, int] | None: ...

    @property
    def username(self) -> str | None: ...

    @property
    def client_id(self) -> str: ...

    def follow(self, *traces: Trace) -> None: ...


class NodeFacade:
    """Implements `admin.facade.AdminNode` over the services of a running node."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        apply_setting: Callable[[str, object], None],
        broker: Broker,
        metadata: MetadataService,
        storage: Storage,
        policy: Policy,
        connections: Collection[ClientConnection],
        cluster: ClusterService | None = None,
        registration: RegistrationService | None = None,
        departure: Departure | None = None,
        lifecycle: Lifecycle | None = None,
        events: ClusterEvents | None = None,
        collector: Callable[[], dict[str, int | float]] | None = None,
        queue_replicas: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        """`config` gives the configuration in force and `apply_setting` changes it (`vmq-admin set`);
        `connections` holds the live MQTT connections; `cluster`, `registration` and `departure` are there when
        the node has a cluster listener. `collector`: the garbage collector's counters (vmqpy.gc_watch);
        `queue_replicas`: the queue replicas' counters (vmqpy.replicas; None: `queue.replicas = 1`). With a
        cluster, the questions other members put to this node come through `admin_calls` (node.py registers its
        ops in the cluster's control table)."""
        self._config = config
        self._apply_setting = apply_setting
        self._broker = broker
        self._metadata = metadata
        self._storage = storage
        self._policy = policy
        self._connections = connections
        self._cluster = cluster
        self._registration = registration
        self._departure = departure
        self._lifecycle = lifecycle
        self._events = events
        self.queue_replicas = queue_replicas
        self.collector = collector
        self._exchanges_seen: tuple[int, float | None] = (0, None)  # (exchanges completed, when seen moving)
        self._handlers: dict[str, Handler] = {
            SESSIONS: self._local_sessions, DISCONNECT: self._local_disconnect,
            REAUTHORIZE: self._local_reauthorize, STATUS: self._local_status,
            UNSUBSCRIBE: self._local_unsubscribe, SET: self._local_set,
        }
        self._calls = None if cluster is None else AdminCalls(cluster, self._handlers)

    @property
    def admin_calls(self) -> AdminCalls | None:
        """The questions this node puts to every member and answers (vmqpy.cluster.admin_calls); None alone."""
        return self._calls

    def node_name(self) -> str:
        return self._config().nodename

    # ------------------------------------------------------------------------- admin.keys: the cluster's API keys
    def api_key_get(self, digest: str) -> Row | None:
        return _api_key_record(self._metadata.get(API_KEYS, (digest,)))

    def api_key_fold(self) -> list[tuple[str, Row]]:
        found = ((key[0], _api_key_record(value)) for key, value in self._metadata.fold(API_KEYS))
        return [(str(digest), record) for digest, record in found if record is not None]

    def api_key_put(self, digest: str, record: Row) -> None:
        self._refuse_writes_when_left()
        self._metadata.put(API_KEYS, (digest,), [records.stamp_list(self._metadata.hlc_now()), record])

    def api_key_delete(self, digest: str) -> None:
        self._refuse_writes_when_left()
        self._metadata.delete(API_KEYS, (digest,))

    def _refuse_writes_when_left(self) -> None:
        if self._policy.left:  # the store is frozen (MetadataService.freeze): the write would be lost
            raise CommandError(f"API keys cannot be changed now: {LEFT_REASON}", 409)

    # ---------------------------------------------------------------------------------------------- cluster

    def cluster_show(self) -> list[Row]:
        cluster = self._cluster
        if cluster is None:
            return [{"Node": self.node_name(), "Running": True, "Reachable": True, "Ready": True}]
        rows: list[Row] = cluster.show()
        if cluster.removed:  # it left: not ready, as its /health says (it still reaches itself)
            for row in rows:
                row["Ready"] = row["Ready"] and row["Node"] != self.node_name()
        return rows

    async def cluster_join(self, discovery_node: str) -> str:
        cluster = self._cluster
        if cluster is None:
            raise CommandError("this node has no cluster listener (set listener.vmq.clustering)", 409)
        try:
            given_up = None if self._departure is None else await self._departure.before_join()
            answer: str = await cluster.join(discovery_node)
        except CommandRefused as exc:
            raise CommandError(str(exc), exc.status) from None
        return answer if given_up is None else f"{given_up}\n{answer}"

    async def cluster_leave(self, node: str, kill_sessions: bool, interval: float, timeout: float) -> str:
        cluster = self._cluster
        if cluster is None:
            raise CommandError("this node has no cluster listener (set listener.vmq.clustering)", 409)
        try:
            departure = self._departure
            if kill_sessions and departure is not None:
                answer: str = await departure.leave(node, interval, timeout)
            else:
                answer = await cluster.leave(node)
        except CommandRefused as exc:
            raise CommandError(str(exc), exc.status) from None
        return answer

    def health(self) -> tuple[bool, str]:
        state, reason = self.node_state()
        return state == READY, reason

    def node_state(self) -> tuple[str, str]:
        """(state, reason): one of NODE_STATES and why, in a few words; /health answers 200 only when "ready".
        The status page shows the state per member and builds its headline from it (admin/status_page.py)."""
        draining = self._lifecycle.drain_reason() if self._lifecycle is not None else None
        if draining is not None:
            return "draining", draining
        cluster = self._cluster
        if cluster is None:
            return READY, "single node"
        if cluster.removed:
            return "left", LEFT_REASON
        leaving = None if self._departure is None else self._departure.leaving()
        if leaving is not None:
            return "leaving", leaving
        policy = self._policy
        if policy.joining:
            return "joining", policy.reason()
        if not policy.ready:
            return "not ready", policy.reason()
        ready: tuple[bool, str] = cluster.health()
        return READY, ready[1]

    def serves(self, state: str) -> list[str]:
        """The client operations (OPERATIONS) this node serves now in `state`: all while ready, else those its
        netsplit policy still allows (as `Policy.may`, without counting a refusal); no new client while it
        drains, leaves or left."""
        policy = self._policy
        out = policy.left or policy.joining
        served = [op for op in OPERATIONS if policy.ready or (not out and policy.settings.allows(op))]
        return [op for op in served if op != "register"] if state in NO_NEW_CLIENTS else served

    # ---------------------------------------------------------------------------------------------- node

    async def node_drain(self, rate: float, timeout: float) -> str:
        lifecycle = self._lifecycle
        if lifecycle is None:
            raise CommandError("this node cannot drain", 409)
        try:
            outcome, disconnected, left = await lifecycle.drain_clients(rate, timeout)
        except ValueError as exc:
            raise CommandError(str(exc), 400) from None
        done = f"disconnected {disconnected} clients; {left} connections left"
        if left:
            raise CommandError(f"{outcome.value} after {timeout:g}s: {done}", 503)
        return f"{self.node_name()} drained: {done}"

    def node_stop(self) -> str:
        if self._lifecycle is None or not self._lifecycle.request_stop():
            raise CommandError("this node cannot be stopped through the API (it was not started by vmqpy start)",
                               409)
        return f"{self.node_name()} is stopping"

    # ---------------------------------------------------------------------------------------------- listeners

    def listener_show(self) -> list[Row]:
        return [] if self._lifecycle is None else self._lifecycle.listener_rows()

    def listener_stop(self, address: str, port: int, kill_sessions: bool) -> str:
        lifecycle = self._lifecycle
        if lifecycle is None:
            raise CommandError("this node has no listeners to stop", 409)
        try:
            return lifecycle.stop_listener(address, port, kill_sessions)
        except LookupError as exc:
            raise CommandError(str(exc.args[0]), 404) from None

    async def listener_start(self, address: str, port: int) -> str:
        lifecycle = self._lifecycle
        if lifecycle is None:
            raise CommandError("this node has no listeners to start", 409)
        try:
            return await lifecycle.start_listener(address, port)
        except LookupError as exc:
            raise CommandError(str(exc.args[0]), 404) from None
        except RuntimeError as exc:
            raise CommandError(str(exc), 409) from None
        except OSError as exc:
            raise CommandError(f"cannot listen on {address}:{port}: {exc.strerror or exc}", 503) from None

    # ---------------------------------------------------------------------------------------------- broker

    async def session_show(
        self, filters: list[session_table.Filter], per_subscription: bool, limit: int, per_message: bool = False
    ) -> tuple[list[Row], str | None]:
        args = {"filters": [list(f) for f in filters], "per_subscription": per_subscription, "limit": limit,
                "per_message": per_message}
        answers = await self._ask_all(SESSIONS, args)
        # filtered again here: a member of an older version may not know every filter (it answers more rows)
        rows = [row for node_rows in answers.results.values() for row in node_rows
                if session_table.matches(row, filters)]
        return rows, answers.note()

    async def session_unsubscribe(self, client_id: str, topic_filter: str) -> str:
        if not validate_topic_filter(topic_filter):
            raise CommandError(f"not a topic filter: {topic_filter!r}", 400)
        if not self._policy.may("unsubscribe"):
            raise CommandError(f"the node does not take unsubscribes now: {self._policy.reason()}", 503)
        done, note = await self._ask_about(UNSUBSCRIBE, client_id, {"topic": topic_filter})
        if not any(removed for _node, removed in done):
            raise CommandError(f"{client_id!r} has no subscription {topic_filter!r}", 404)
        lines = ["Done"] + [f"{client_id} on {node}: unsubscribed from {topic_filter}" for node, removed in done
                            if removed]
        return "\n".join(lines + ([f"note: {note}"] if note else []))

    def _local_unsubscribe(self, args: dict[str, Any]) -> bool | None:
        """Remove the subscription from this node's session of the client, as its own UNSUBSCRIBE would (the
        replicated record and the route): True when it had it, False when not, None when the session is not
        here."""
        session = self._broker.sessions.get(str(args["client_id"]))
        if session is None:
            return None
        topic_filter = str(args["topic"])
        if topic_filter not in session.subscriptions:
            return False
        self._broker.unsubscribe(session, [topic_filter])
        return True

    async def session_disconnect(self, client_id: str, cleanup: bool) -> str:
        done, note = await self._ask_about(DISCONNECT, client_id, {"cleanup": cleanup})
        lines = [f"{client_id} on {node}: {what}" for node, what in done]
        return "\n".join(lines + ([f"note: {note}"] if note else []))

    async def _ask_about(self, what: str, client_id: str, args: dict[str, Any]) -> tuple[list[tuple[str, Any]], str]:
        """Ask every member `what` about `client_id`'s session: the (node, answer) of the members that hold it, in
        node order, and the note naming members that did not answer. None holds it: CommandError 404."""
        answers = await self._ask_all(what, {"client_id": client_id, **args})
        done = sorted((node, answer) for node, answer in answers.results.items() if answer is not None)
        note = answers.note() or ""
        if not done:
            unsure = f" ({note})" if note else ""
            raise CommandError(f"no session of client id {client_id!r} in the cluster{unsure}", 404)
        return done, note

    def acl_reload(self) -> str:
        answers = self._broker.enforcer.reload(force=True)
        text = "\n".join(answer.describe() for answer in answers)
        if any(answer.error is not None for answer in answers):
            raise CommandError(text, 400)
        return text

    def retain_delete_expired(self) -> int:
        if not self._policy.may("publish"):
            raise CommandError(f"the node does not take writes now: {self._policy.reason()}", 503)
        return operator_actions.delete_expired_retained(self._broker, time.time())

    def retain_delete(self, topic: str) -> str:
        if not validate_topic_name(topic):
            raise CommandError(f"not a topic name: {topic!r} (wildcards delete nothing)", 400)
        if not self._policy.may("publish"):
            raise CommandError(f"the node does not take writes now: {self._policy.reason()}", 503)
        if not operator_actions.delete_retained(self._broker, topic):
            raise CommandError(f"no retained message on {topic!r}", 404)
        return f"deleted the retained message of {topic}"

    async def _ask_all(self, what: str, args: dict[str, Any]) -> Answers:
        calls = self._calls
        if calls is None:
            return Answers(results={self.node_name(): self._handlers[what](args)})
        return await calls.ask_all(what, args)

    def _local_sessions(self, args: dict[str, Any]) -> list[Row]:
        """This node's sessions as full rows (admin.session_table), filtered, at most `limit`."""
        filters = session_table.filters_of(args.get("filters") or [])
        per_message = bool(args.get("per_message"))
        by_sink = {id(conn): conn for conn in self._connections}
        rows = (admin_rows.session_row(session, by_sink.get(id(session.sink)) if session.sink is not None else None,
                                       self.node_name(), per_message)
                for _, session in sorted(self._broker.sessions.items()))
        return session_table.select(rows, filters, bool(args.get("per_subscription")), int(args.get("limit", 100)),
                                    per_message)

    async def status(self) -> tuple[list[Row], str | None]:
        answers = await self._ask_all(STATUS, {})
        return [answers.results[node] for node in sorted(answers.results)], answers.note()

    def _local_status(self, args: dict[str, Any]) -> Row:
        broker = self._broker
        state, reason = self.node_state()
        online = sum(1 for s in broker.sessions.values() if s.online)
        return {
            "node": self.node_name(), "ready": state == READY, "reason": reason, "version": __version__,
            "core": BUILD.kind, "build": BUILD.describe(), "state": state, "serves": self.serves(state),
            "connections": len(self._connections), "sessions_online": online,
            "sessions_offline": len(broker.sessions) - online,
            "subscriptions": sum(len(s.subscriptions) for s in broker.sessions.values()),
            "retained": len(broker.retained), "queued": broker.queued(),
            "publish_received": broker.metrics["publish_received"],
            "publish_dropped": broker.metrics["publish_dropped"],
            "members": self._cluster.member_names() if self._cluster is not None else [self.node_name()],
            **self._status_page_fields(),
        }

    def _status_page_fields(self) -> Row:
        """What the status page adds to a member's status row: messages sent, the store's keys and last
        exchange, the groups this member sees (its view of a split), and its sessions and messages not yet
        confirmed on their queue replica nodes (None without queue replicas)."""
        broker = self._broker
        replica = self._metadata.replica
        stats = replica.stats() if replica is not None else {}
        completed = int(stats.get("exchanges_completed", 0))
        count, seen_at = self._exchanges_seen
        if completed != count:  # seen moving now: the page polls every second, so this is within one poll
            self._exchanges_seen = (completed, time.time() if count or seen_at is not None else None)
        view = self._policy.view
        name = self.node_name()
        replicas = self.queue_replicas() if self.queue_replicas is not None else {}  # none: queue.replicas = 1
        return {
            "under_replicated": [replicas["sessions_under_replicated"], replicas["messages_under_replicated"]]
            if "sessions_under_replicated" in replicas else None,
            "publish_sent": broker.metrics["mqtt_publish_sent"],
            "metadata_keys": int(stats.get("keys", 0)),
            "exchanges_completed": completed,
            "last_exchange_at": self._exchanges_seen[1],
            "groups": [list(g) for g in view.groups] if view is not None else [[name]],
        }

    def overview(self) -> Row:
        """This node's view for the status page: members (as `cluster show`), the groups it sees, the netsplit
        policy in force and the recent cluster events."""
        settings = self._policy.settings
        view = self._policy.view
        name = self.node_name()
        state, reason = self.node_state()
        return {
            "node": name,
            "time": time.time(),
            "version": __version__,
            "core": BUILD.kind,
            "build": BUILD.describe(),
            "state": state,  # this node's, always current (its row in "nodes" may be from an earlier answer)
            "reason": reason,
            "serves": self.serves(state),
            "members": self.cluster_show(),
            "groups": [list(g) for g in view.groups] if view is not None else [[name]],
            "policy": {
                "readiness": settings.readiness,
                "allow_register": settings.allow_register,
                "allow_publish": settings.allow_publish,
                "allow_subscribe": settings.allow_subscribe,
                "allow_unsubscribe": settings.allow_unsubscribe,
                "trade_consistency": all(settings.allows(op) for op in OPERATIONS),
                "serving": self._policy.ready,
                "reason": self._policy.reason(),
                "unreachable": sorted(set(view.members) - view.reachable) if view is not None else [],
            },
            "events": self._events.recent() if self._events is not None else [],
        }

    async def session_reauthorize(self, client_id: str, username: str) -> str:
        done, note = await self._ask_about(REAUTHORIZE, client_id, {"username": username})
        removed = sum(r for _node, (_kept, r) in done)
        lines = ["Unchanged" if removed == 0 else "Done"]
        lines += [f"{client_id} on {node}: {kept} subscriptions kept, {r} removed" for node, (kept, r) in done]
        return "\n".join(lines + ([f"note: {note}"] if note else []))

    def _local_reauthorize(self, args: dict[str, Any]) -> list[int] | None:
        found = self._broker.enforcer.reauthorize(str(args["client_id"]), str(args["username"]))
        return None if found is None else list(found)

    def _local_disconnect(self, args: dict[str, Any]) -> str | None:
        return operator_actions.disconnect(self._broker, str(args["client_id"]), time.time(),
                                        bool(args.get("cleanup")))

    async def trace_client(
        self, client_id: str, *, rate_max: int, rate_interval: float, payload_limit: int, stop_after: float
    ) -> AsyncIterator[str]:
        """A trace of `client_id`'s connections on this node (vmqpy.broker.operations.trace): those there now and those
        that connect while it runs. Lines are handed out every TRACE_POLL seconds; closing the iterator (the
        operator's terminal went away) stops the trace."""
        tracers = self._broker.tracers
        options = TraceOptions(client_id, rate_max, rate_interval, payload_limit, stop_after)
        trace = tracers.start(options, time.monotonic())
        try:
            live = [conn for conn in list(self._connections) if conn.client_id == client_id]
            for conn in live:
                conn.follow(trace)
            trace.note(f"tracing client {client_id!r} on {self.node_name()}: {len(live)} connection(s) now, "
                       "and those that connect", time.time())
            while True:
                trace.tick(time.monotonic(), time.time())
                for line in trace.take():
                    yield line
                if trace.done:
                    return
                await asyncio.sleep(TRACE_POLL)
        finally:
            tracers.stop(trace, time.time())

    def subscription_show(self, client_id: str | None, limit: int) -> list[Row]:
        rows = []
        for key, value in self._replica().fold(records.SUBSCRIPTION):
            client, node, entry = records.subscription_entry(key, value)
            if client_id is not None and client != client_id:
                continue
            rows.append({"Client": client, "Filter": entry.topic_filter, "QoS": entry.options.qos, "Node": node})
        rows.sort(key=lambda r: (r["Client"], r["Filter"]))
        return rows[:limit]

    def retain_show(self, topic_filter: str | None, limit: int) -> list[Row]:
        broker = self._broker
        pattern = topic_filter or "#"
        if not validate_topic_filter(pattern):
            raise CommandError(f"not a topic filter: {pattern!r}", 400)
        rows = [
            {"topic": topic, "payload": admin_rows.payload_text(message.payload), "qos": message.qos, "mountpoint": ""}
            for topic, message in sorted(broker.retained.match(pattern), key=lambda tm: tm[0])
        ]
        return rows[:limit]

    def build_info(self) -> dict[str, str]:
        return {"version": __version__, "core": BUILD.kind}

    def metrics(self) -> dict[str, int | float]:
        broker = self._broker
        out: dict[str, int | float] = {f"broker.{k}": v for k, v in sorted(broker.metrics.items())}
        out["broker.sessions"] = len(broker.sessions)
        out["broker.sessions_online"] = sum(1 for s in broker.sessions.values() if s.online)
        out["broker.queued_messages"] = broker.queued()
        out["broker.retained"] = len(broker.retained)
        out["broker.connections"] = len(self._connections)
        out["broker.subscriptions"] = sum(len(s.subscriptions) for s in broker.sessions.values())
        out["broker.subscriptions_sweeping"] = len(broker.sweeper)
        replication_log = self._metadata.replication_log
        if replication_log is not None:
            out["replication_log.lines"] = replication_log.lines_written
            out["replication_log.rotations"] = replication_log.rotations
            try:
                out["replication_log.file_bytes"] = replication_log.path.stat().st_size
            except OSError:
                pass  # not created yet, or moved away by an operator: the gauge is left out, not faked
        out.update({f"storage.{k}": v for k, v in self._storage.stats.items()})
        replica, cluster, registration = self._metadata.replica, self._cluster, self._registration
        sources: list[tuple[str, Callable[[], Mapping[str, int | float]] | None]] = [
            ("metadata", replica.stats if replica is not None else None),
            ("cluster", cluster.stats if cluster is not None else None),
            ("registration", registration.stats if registration is not None else None),
            ("queue_replica", self.queue_replicas), ("process", self.collector)]
        for prefix, stats in sources:
            if stats is not None:
                out.update({f"{prefix}.{k}": v for k, v in stats().items()})
        for operation, count in sorted(self._policy.refused.items()):
            out[f"netsplit.refused_{operation}"] = count
        return out

    def _replica(self) -> Replica:
        replica = self._metadata.replica
        if replica is None:
            raise CommandError("the node is starting", 503)
        return replica

    def metadata_dump(self, prefix: str | None) -> list[Row]:
        """The replica's records, without the API keys: their hashes would let a `read` key test guesses of a key
        chosen with `api-key add` offline (`api-key show` lists the keys without them)."""
        if prefix == API_KEYS:
            raise CommandError(f"the {API_KEYS} records are not dumped; `vmq-admin api-key show` lists the keys", 400)
        dump = self._replica().dump()
        rows: list[Row] = []
        for row in admin_rows.dump_rows(dump):
            if row["Prefix"] != API_KEYS and (prefix is None or row["Prefix"] == prefix):
                rows.append(row)
        rows.sort(key=lambda r: (r["Prefix"], repr(r["Key"])))
        return rows

    # ---------------------------------------------------------------------------------------------- settings

    def get_setting(self, key: str) -> str:
        cfg = self._config()
        if key not in config_module.SCHEMA:
            raise CommandError(f"unknown setting {key!r}", 404)
        value = config_module.value_of(cfg, key)
        if isinstance(value, bool):
            return "on" if value else "off"
        return "" if value is None else str(value)

    def setting_rows(self) -> list[Row]:
        return [{"Setting": key, "Value": self.get_setting(key),
                 "Run time": runtime_settings.RUNTIME.get(key, "no: " + runtime_settings.why_not(key))}
                for key in sorted(config_module.SCHEMA)]

    def _parsed_setting(self, key: str, value: str) -> object:
        """The value of `vmq-admin set KEY=VALUE`, checked: unknown key 404, not settable at run time 409 (with
        why), bad value 400."""
        if key not in config_module.SCHEMA:
            raise CommandError(f"unknown setting {key!r}", 404)
        if key not in RUNTIME_SETTINGS:
            raise CommandError(f"{key} cannot be changed while the node runs: {runtime_settings.why_not(key)}; "
                               "set it in the config file and restart the node", 409)
        try:
            return config_module.SCHEMA[key].parse(value)
        except ValueError as exc:
            raise CommandError(f"bad value for {key}: {exc}", 400) from None

    def set_setting(self, key: str, value: str) -> str:
        self._apply_setting(key, self._parsed_setting(key, value))
        return self.get_setting(key)

    async def set_settings_on(self, pairs: list[tuple[str, str]], node: str | None) -> str:
        for key, value in pairs:  # checked here first: nothing changes anywhere when one pair is wrong
            self._parsed_setting(key, value)
        answers = await self._ask_all(SET, {"pairs": [list(p) for p in pairs], "node": node})
        done = sorted((name, lines) for name, lines in answers.results.items() if lines is not None)
        note = answers.note()
        if node is not None and not done:
            unsure = f" ({note})" if note else ""
            raise CommandError(f"no member {node!r} answered{unsure}", 404)
        lines = [f"{name}: {line}" for name, node_lines in done for line in node_lines]
        if answers.failed or (node is None and answers.missing):
            raise CommandError("\n".join([*lines, f"not changed on: {note}"]), 503)
        return "\n".join(lines)

    def _local_set(self, args: dict[str, Any]) -> list[str] | None:
        """`set ... --all` / `--node=NAME` on this member: the lines `KEY = VALUE` now in force; None when the
        question names another member."""
        node = args.get("node")
        if node is not None and node != self.node_name():
            return None
        return [f"{key} = {self.set_setting(str(key), str(value))}" for key, value in args["pairs"]]
