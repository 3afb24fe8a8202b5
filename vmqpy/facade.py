"""The node as the administration layer sees it (`admin.facade.AdminNode`), built by node.py from the
node's services.

Reads come from the broker, the metadata store and the cluster service; nothing here changes protocol state
except through their own methods.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sized
from typing import TYPE_CHECKING, Any

from admin.errors import CommandError
from vmqpy import config as config_module
from vmqpy.broker import records
from vmqpy.cluster.errors import CommandRefused
from vmqpy.cluster.policy import LEFT_REASON
from vmqpy.mqtt.topics import validate_topic_filter

if TYPE_CHECKING:
    from vmqpy.broker.broker import Broker
    from vmqpy.cluster.departure import Departure
    from vmqpy.cluster.policy import Policy
    from vmqpy.cluster.registration import RegistrationService
    from vmqpy.cluster.service import ClusterService
    from vmqpy.config import Config
    from vmqpy.metadata.replica import Replica
    from vmqpy.metadata.service import MetadataService
    from vmqpy.storage import Storage

Row = dict[str, Any]
RUNTIME_SETTINGS = (
    "log.console.level",
    "allow_register_during_netsplit",
    "allow_publish_during_netsplit",
    "allow_subscribe_during_netsplit",
    "allow_unsubscribe_during_netsplit",
    "trade_consistency",
    "cluster.readiness",
    "shared_subscription_policy",
)


def _text(payload: bytes) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(payload).decode("ascii")


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
        connections: Sized,
        cluster: ClusterService | None = None,
        registration: RegistrationService | None = None,
        departure: Departure | None = None,
    ) -> None:
        """`config` gives the configuration in force and `apply_setting` changes it (`vmq-admin set`);
        `connections` holds the live MQTT connections; `cluster`, `registration` and `departure` are there when
        the node has a cluster listener."""
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

    def node_name(self) -> str:
        return self._config().nodename

    # ---------------------------------------------------------------------------------------------- cluster

    def cluster_show(self) -> list[Row]:
        cluster = self._cluster
        if cluster is None:
            return [{"Node": self.node_name(), "Running": True, "Reachable": True, "Ready": True}]
        rows: list[Row] = cluster.show()
        return rows

    async def cluster_join(self, discovery_node: str) -> str:
        cluster = self._cluster
        if cluster is None:
            raise CommandError("this node has no cluster listener (set listener.vmq.clustering)", 409)
        try:
            answer: str = await cluster.join(discovery_node)
        except CommandRefused as exc:
            raise CommandError(str(exc), exc.status) from None
        return answer

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
        cluster = self._cluster
        if cluster is None:
            return True, "single node"
        if cluster.removed:
            return False, LEFT_REASON
        policy = self._policy
        if not policy.ready:
            return False, policy.reason()
        ready: tuple[bool, str] = cluster.health()
        return True, ready[1]

    # ---------------------------------------------------------------------------------------------- broker

    def session_show(self, client_id: str | None, limit: int) -> list[Row]:
        broker = self._broker
        sessions = [broker.sessions[client_id]] if client_id in broker.sessions else []
        if client_id is None:
            sessions = sorted(broker.sessions.values(), key=lambda s: s.client_id)
        rows = []
        for session in sessions[:limit]:
            d = session.describe()
            rows.append({
                "Client": d["client_id"], "Online": d["online"], "Protocol": d["protocol"],
                "Persistent": session.persistent, "Subscriptions": d["subscriptions"], "Inflight": d["inflight"],
                "Queued": d["queued"], "Dropped": d["dropped"],
            })
        return rows

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
            {"Topic": topic, "Payload": _text(message.payload), "QoS": message.qos}
            for topic, message in sorted(broker.retained.match(pattern), key=lambda tm: tm[0])
        ]
        return rows[:limit]

    def metrics(self) -> dict[str, int | float]:
        broker = self._broker
        out: dict[str, int | float] = {f"broker.{k}": v for k, v in sorted(broker.metrics.items())}
        out["broker.sessions"] = len(broker.sessions)
        out["broker.sessions_online"] = sum(1 for s in broker.sessions.values() if s.online)
        out["broker.queued_messages"] = broker.queued()
        out["broker.queue_dropped"] = sum(s.dropped for s in broker.sessions.values())
        out["broker.retained"] = len(broker.retained)
        out["broker.connections"] = len(self._connections)
        out.update({f"storage.{k}": v for k, v in self._storage.stats.items()})
        replica = self._metadata.replica
        if replica is not None:
            out.update({f"metadata.{k}": v for k, v in replica.stats().items()})
        cluster = self._cluster
        if cluster is not None:
            out.update({f"cluster.{k}": v for k, v in cluster.stats().items()})
        registration = self._registration
        if registration is not None:
            out.update({f"registration.{k}": v for k, v in registration.stats().items()})
        for operation, count in sorted(self._policy.refused.items()):
            out[f"netsplit.refused_{operation}"] = count
        return out

    def _replica(self) -> Replica:
        replica = self._metadata.replica
        if replica is None:
            raise CommandError("the node is starting", 503)
        return replica

    def metadata_dump(self, prefix: str | None) -> list[Row]:
        dump = self._replica().dump()
        rows: list[Row] = []
        for row in _flatten_dump(dump):
            if prefix is None or row["Prefix"] == prefix:
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

    def set_setting(self, key: str, value: str) -> str:
        if key not in config_module.SCHEMA:
            raise CommandError(f"unknown setting {key!r}", 404)
        if key not in RUNTIME_SETTINGS:
            raise CommandError(f"{key} cannot be changed while the node runs; set it in the config file", 409)
        try:
            parsed = config_module.SCHEMA[key].parse(value)
        except ValueError as exc:
            raise CommandError(f"bad value for {key}: {exc}", 400) from None
        self._apply_setting(key, parsed)
        return self.get_setting(key)


def _flatten_dump(dump: dict[str, Any]) -> list[Row]:
    """The replica's data as rows: Prefix, Key, Values ([node, counter, value], sorted), Context (filled)."""
    rows: list[Row] = []
    for prefix, keys in dump["data"].items():
        for key, entry in keys.items():
            rows.append({
                "Prefix": prefix,
                "Key": _plain(list(key)),
                "Values": _plain(sorted(entry["values"], key=lambda v: (v[0], v[1]))),
                "Context": dict(sorted(entry["filled"].items())),
            })
    return rows


def _plain(value: Any) -> Any:
    """JSON-friendly: bytes as base64 text, tuples as lists."""
    if isinstance(value, bytes | bytearray):
        return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
