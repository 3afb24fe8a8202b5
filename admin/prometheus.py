"""The node's metrics under their published names: Prometheus's `/metrics` and `vmq-admin metrics show
--format=vernemq` (docs/operations.md, "Metrics").

`families(raw)` is the one place that names the metrics: it turns the node's live counters (`AdminNode.metrics()`,
dotted keys such as `broker.publish_received`, the same numbers the $SYS tree publishes) into metric families
with VerneMQ's names where VerneMQ has the metric (`mqtt_connect_received`, `queue_message_drop`, ...) and
`vmqpy_...` names for ours. Pure: a mapping in, a list of `Family` out. Every counter of the table is there from
the node's start: a key the node has not reported yet (a counter that never moved) is a 0, and a labelled
family has every label value it can take at 0 (the CONNACK return codes, the netsplit policy's operations), so
`increase()` and `rate()` see the first event; every histogram has its buckets at 0. A gauge the node does not
report (no cluster, a file not created yet) is left out, not faked.

Names as scraped (`sample_name`): a counter under VerneMQ's name is exposed as VerneMQ does, without a suffix
(`mqtt_publish_received{node="..."} 3`), typed `untyped` in the text format (the format's counter type asks for
the `_total` suffix, and promtool checks it; PromQL's `rate()`/`increase()` treat both alike); our `vmqpy_`
counters follow the OpenMetrics rule, `NAME_total`. `prometheus_namespace` (VerneMQ 2.x) prefixes every name of
the table: `vernemq_mqtt_publish_received`.

`NodeCollector` is a prometheus-client Collector over a live node: every scrape reads `metrics()` again and
labels every sample with `node`. `registry(...)` gives each HTTP app its own `CollectorRegistry` (never the
global default one, so two nodes in one process do not mix) holding it and prometheus-client's process, platform
and garbage-collector collectors (`process_resident_memory_bytes`, `process_open_fds`, `python_info`,
`python_gc_collections_total`, ...). `exposed_names(...)` lists the sample names a scrape can show, for the
Grafana dashboard's test.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from prometheus_client import GC_COLLECTOR, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from vmqpy.broker.client_metrics import CONNACK_LABELS
from vmqpy.cluster.policy import OPERATIONS

__all__ = [
    "HISTOGRAMS",
    "RUNTIME_NAMES",
    "SPECS",
    "Family",
    "HistogramSpec",
    "NodeCollector",
    "Spec",
    "exposed_names",
    "families",
    "histogram_family",
    "registry",
    "sample_name",
    "vernemq_lines",
    "vernemq_named",
]

Kind = Literal["counter", "gauge", "histogram"]
Labels = tuple[tuple[str, str], ...]
Raw = Mapping[str, int | float]


@dataclass(frozen=True, slots=True)
class Spec:
    """One published metric made of node keys: `sources` are summed (all must be absent for no sample)."""

    name: str
    kind: Kind
    help: str
    sources: tuple[str, ...]
    labels: Labels = ()


@dataclass(slots=True)
class Family:
    """A named metric and its samples ((labels, value) pairs; for a histogram: `buckets` (upper bound,
    cumulative count) with +Inf last, `count` and `sum`)."""

    name: str
    kind: Kind
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    buckets: list[tuple[str, float]] = field(default_factory=list)
    count: float = 0.0
    sum: float = 0.0


def _s(name: str, kind: Kind, help: str, *sources: str, labels: Labels = ()) -> Spec:
    return Spec(name, kind, help, sources, labels)


#: the fixed table: VerneMQ's names first, then ours (vmqpy_)
SPECS: Final[tuple[Spec, ...]] = (
    _s("mqtt_connect_received", "counter", "CONNECT packets received", "broker.mqtt_connect_received"),
    _s("mqtt_publish_received", "counter", "PUBLISH packets received from clients", "broker.publish_received"),
    _s("mqtt_publish_sent", "counter", "PUBLISH packets sent to clients", "broker.mqtt_publish_sent"),
    _s("mqtt_puback_received", "counter", "PUBACK packets received", "broker.mqtt_puback_received"),
    _s("mqtt_puback_sent", "counter", "PUBACK packets sent", "broker.mqtt_puback_sent"),
    _s("mqtt_subscribe_received", "counter", "SUBSCRIBE packets received", "broker.mqtt_subscribe_received"),
    _s("mqtt_pubrec_received", "counter", "PUBREC packets received", "broker.mqtt_pubrec_received"),
    _s("mqtt_pubrec_sent", "counter", "PUBREC packets sent", "broker.mqtt_pubrec_sent"),
    _s("mqtt_pubrel_received", "counter", "PUBREL packets received", "broker.mqtt_pubrel_received"),
    _s("mqtt_pubrel_sent", "counter", "PUBREL packets sent (resends included)", "broker.mqtt_pubrel_sent"),
    _s("mqtt_pubcomp_received", "counter", "PUBCOMP packets received", "broker.mqtt_pubcomp_received"),
    _s("mqtt_pubcomp_sent", "counter", "PUBCOMP packets sent", "broker.mqtt_pubcomp_sent"),
    _s("mqtt_suback_sent", "counter", "SUBACK packets sent", "broker.mqtt_suback_sent"),
    _s("mqtt_unsubscribe_received", "counter", "UNSUBSCRIBE packets received", "broker.mqtt_unsubscribe_received"),
    _s("mqtt_unsuback_sent", "counter", "UNSUBACK packets sent", "broker.mqtt_unsuback_sent"),
    _s("mqtt_pingreq_received", "counter", "PINGREQ packets received", "broker.mqtt_pingreq_received"),
    _s("mqtt_pingresp_sent", "counter", "PINGRESP packets sent", "broker.mqtt_pingresp_sent"),
    _s("mqtt_disconnect_received", "counter", "DISCONNECT packets received", "broker.mqtt_disconnect_received"),
    _s("mqtt_disconnect_sent", "counter", "DISCONNECT packets sent (MQTT 5.0 clients only)",
       "broker.mqtt_disconnect_sent"),
    _s("queue_message_in", "counter",
       "messages a session on this node took for its client (written at once or queued)",
       "broker.queue_message_direct", "broker.queue_message_queued"),
    _s("queue_message_out", "counter",
       "messages a session on this node wrote to its client, at once or from its queue (resends not counted)",
       "broker.queue_message_direct", "broker.queue_message_dequeued"),
    _s("queue_message_drop", "counter",
       "messages a session on this node dropped (queue full, larger than the client's maximum packet size, QoS 0 "
       "of a client gone, not resumable after a handover)", "broker.queue_message_drop"),
    _s("queue_message_expired", "counter",
       "messages a session on this node discarded because their message expiry interval passed before delivery",
       "broker.queue_message_expired"),
    _s("socket_open", "counter", "MQTT connections accepted", "broker.socket_open"),
    _s("socket_close", "counter", "MQTT connections closed", "broker.socket_close"),
    _s("vmqpy_loop_stalls", "counter", "times the node's event loop ran its 0.1 s tick more than 0.25 s late (one "
       "long turn kept heartbeats, clients and timers waiting; also logged as 'event loop stalled')",
       "broker.loop_stalls"),
    *(_s("vmqpy_gc_collections", "counter", "passes of the cyclic garbage collector over this generation",
         f"process.gc_collections_gen{g}", labels=(("generation", str(g)),)) for g in range(3)),
    *(_s("vmqpy_gc_seconds", "counter", "seconds the cyclic garbage collector held the node in passes over this "
         "generation (a pass of at least 0.25 s is also logged as 'garbage collection paused the node')",
         f"process.gc_seconds_gen{g}", labels=(("generation", str(g)),)) for g in range(3)),
    _s("vmqpy_gc_freezes", "counter", "times a slow pass over generation 2 made the node move what is alive out of "
       "the collector's sight (gc.freeze)", "process.gc_freezes"),
    _s("vmqpy_connect_refused", "counter", "connections closed before their CONNECT was whole: none within "
       "mqtt.connect_timeout", "broker.connect_timeout", labels=(("reason", "timeout"),)),
    _s("vmqpy_connect_refused", "counter", "connections closed before their CONNECT was whole: it announced more "
       "than mqtt.connect_max_size", "broker.connect_too_large", labels=(("reason", "too_large"),)),
    _s("vmqpy_connect_refused", "counter", "connections closed before their CONNECT was accepted: their bytes did "
       "not fit the node's pre-CONNECT budget (mqtt.connect_budget)", "broker.connect_budget_exceeded",
       labels=(("reason", "budget"),)),
    _s("vmqpy_connect_refused", "counter", "connections closed for a missing or invalid PROXY protocol header",
       "broker.proxy_protocol_refused", labels=(("reason", "proxy_header"),)),
    _s("vmqpy_connect_refused", "counter", "connections closed for a failed TLS handshake (ssl and wss listeners)",
       "broker.tls_handshake_failed", labels=(("reason", "tls_handshake"),)),
    _s("vmqpy_login_failed", "counter", "logins refused for their credentials (a wrong password, a user the password "
       "file does not have, a refused anonymous client); each counts towards its address's auth.failed_login_limit",
       "broker.login_failed"),
    _s("vmqpy_login_throttled", "counter", "CONNECTs refused at once, without a password check, because their address "
       "is over auth.failed_login_limit (0x9F Connection rate exceeded)", "broker.login_throttled"),
    _s("vmqpy_login_busy", "counter", "CONNECTs refused because auth.hash_queue password checks were already waiting "
       "(0x89 Server busy)", "broker.login_busy"),
    _s("vmqpy_login_password_checks", "counter", "passwords hashed in the login pool (a user the password file does "
       "not have is checked against a dummy hash, and counted too)", "broker.login_password_checks"),
    _s("vmqpy_connect_refused", "counter", "MQTT sockets closed at their accept: the listeners held every "
       "descriptor the node gives them (open files limit less the admin API's and the node's reserve)",
       "broker.connections_refused_descriptors", labels=(("reason", "descriptors"),)),
    _s("vmqpy_connect_refused", "counter", "MQTT sockets closed at their accept: their client address held "
       "listener.max_connections_per_address", "broker.connections_refused_address",
       labels=(("reason", "per_address"),)),
    _s("vmqpy_connect_refused", "counter", "MQTT sockets closed at their accept: their client address held "
       "listener.max_pending_per_address sockets before CONNECT", "broker.connections_refused_pending_address",
       labels=(("reason", "pending_per_address"),)),
    _s("vmqpy_cluster_connections_refused", "counter", "cluster-port sockets closed at their accept: the node held "
       "cluster.max_pending_links sockets that had not finished their handshake", "cluster.links.pending_refused",
       labels=(("reason", "pending"),)),
    _s("vmqpy_cluster_connections_refused", "counter", "cluster-port sockets closed at their accept: their client "
       "address held cluster.max_pending_links_per_address sockets that had not finished their handshake",
       "cluster.links.pending_refused_address", labels=(("reason", "pending_per_address"),)),
    _s("vmqpy_cluster_pending_links", "gauge", "cluster-port sockets accepted that have not finished their "
       "handshake", "cluster.links.pending_links"),
    _s("netsplit_detected", "counter", "times this node stopped reaching every member", "cluster.netsplit_detected"),
    _s("netsplit_resolved", "counter", "times this node reached every member again", "cluster.netsplit_resolved"),
    _s("cluster_bytes_sent", "counter", "bytes written to cluster links", "cluster.links.bytes_out"),
    _s("cluster_bytes_received", "counter", "bytes read from cluster links", "cluster.links.bytes_in"),
    _s("cluster_bytes_dropped", "counter", "bytes of cluster frames not sent: refused (a peer's buffer full, a "
       "frame too large) or buffered for a peer that was removed", "cluster.links.bytes_dropped"),
    _s("router_subscriptions", "gauge", "subscriptions of the sessions on this node", "broker.subscriptions"),
    _s("vmqpy_subscriptions_sweeping", "gauge", "subscriptions of ended sessions this node has yet to remove (a "
       "slice a loop turn; a CONNECT of their client id waits for them)", "broker.subscriptions_sweeping"),
    _s("retain_messages", "gauge", "retained messages", "broker.retained"),
    _s("active_sessions", "gauge", "sessions with a connected client on this node", "broker.sessions_online"),
    _s("queue_messages", "gauge", "messages waiting in the queues of this node's sessions", "broker.queued_messages"),
    _s("vmqpy_publish_dropped", "counter", "published messages that reached no queue (no subscriber, refused)",
       "broker.publish_dropped"),
    _s("vmqpy_connections", "gauge", "open MQTT connections", "broker.connections"),
    _s("vmqpy_publish_withheld", "counter", "messages not delivered to a subscriber because the ACL does not let it "
       "read their topic: routed messages withheld by a deny line its granted filter overlaps",
       "broker.publish_withheld_not_authorized", labels=(("delivery", "routed"),)),
    _s("vmqpy_publish_withheld", "counter", "messages not delivered to a subscriber because the ACL does not let it "
       "read their topic: retained messages its new subscription matched", "broker.retained_not_authorized",
       labels=(("delivery", "retained"),)),
    _s("vmqpy_connection_turn_yielded", "counter", "turns a connection gave up once its packets had taken the turn's "
       "budget (2 ms): the rest of what it sent waited for the next turn, after the other clients",
       "broker.connection_turn_yielded"),
    _s("vmqpy_socket_linger_cut", "counter", "lingering closes (after a DISCONNECT with a reason code) cut short: "
       "the client sent more than the linger budget before closing its side", "broker.socket_linger_cut"),
    _s("vmqpy_retain_quota_exceeded", "counter", "retained PUBLISHes refused: their client had used up "
       "retain.max_per_client or retain.max_bytes_per_client", "broker.retain_quota_exceeded"),
    _s("vmqpy_session_foreign_user", "counter", "CONNECTs with the client id of another user's session, by what "
       "session.foreign_user did", "broker.session_foreign_user_cleaned", labels=(("action", "clean"),)),
    _s("vmqpy_session_foreign_user", "counter", "CONNECTs with the client id of another user's session, by what "
       "session.foreign_user did", "broker.session_foreign_user_refused", labels=(("action", "refuse"),)),
    _s("vmqpy_cluster_members", "gauge", "members of the cluster this node knows", "cluster.members"),
    _s("vmqpy_cluster_reachable", "gauge", "members this node reaches (itself included)", "cluster.reachable"),
    _s("vmqpy_cluster_frames_dropped", "counter", "cluster frames refused because a peer's buffer was full",
       "cluster.links.overflows"),
    _s("vmqpy_metadata_puts", "counter", "writes to the metadata store on this node", "metadata.puts"),
    _s("vmqpy_metadata_broadcasts", "counter", "writes pushed to peers at once (before any exchange)",
       "metadata.pushes_sent"),
    _s("vmqpy_metadata_exchanges", "counter", "anti-entropy exchanges started", "metadata.exchanges_started",
       labels=(("outcome", "started"),)),
    _s("vmqpy_metadata_exchanges", "counter", "anti-entropy exchanges completed", "metadata.exchanges_completed",
       labels=(("outcome", "completed"),)),
    _s("vmqpy_metadata_exchanges", "counter", "anti-entropy exchanges failed", "metadata.exchanges_failed",
       labels=(("outcome", "failed"),)),
    _s("vmqpy_metadata_exchange_objects", "counter", "keys sent to peers in exchanges", "metadata.objects_served",
       labels=(("direction", "sent"),)),
    _s("vmqpy_metadata_exchange_objects", "counter", "keys received from peers in exchanges",
       "metadata.objects_received", labels=(("direction", "received"),)),
    _s("vmqpy_metadata_siblings_resolved", "counter", "keys with concurrent values resolved and written back",
       "metadata.writebacks"),
    _s("vmqpy_metadata_siblings", "gauge", "keys holding concurrent values now", "metadata.siblings"),
    _s("vmqpy_metadata_keys", "gauge", "keys in the metadata store", "metadata.keys"),
    _s("vmqpy_metadata_gap_dots", "gauge", "writes of peers known to exist and not yet received (watermark lag)",
       "metadata.gap_dots"),
    _s("vmqpy_registrations", "counter", "registrations served through this node's leader",
       "registration.registrations", labels=(("leader", "local"),)),
    _s("vmqpy_registrations", "counter", "registrations asked of another node's leader",
       "registration.registrations_remote_leader", labels=(("leader", "remote"),)),
    _s("vmqpy_registrations", "counter", "registrations made without a reachable leader",
       "registration.registrations_without_leader", labels=(("leader", "none"),)),
    _s("vmqpy_registrations_refused", "counter", "registrations refused", "registration.registrations_refused"),
    _s("vmqpy_takeovers", "counter", "takeovers: a CONNECT with the client id of a session whose client is "
       "connected to this node; side=local: the CONNECT came here, side=remote: to another node (a handover "
       "when a node leaves is not one)", "broker.session_takeover", labels=(("side", "local"),)),
    _s("vmqpy_takeovers", "counter", "takeovers: a CONNECT with the client id of a session whose client is "
       "connected to this node; side=local: the CONNECT came here, side=remote: to another node (a handover "
       "when a node leaves is not one)", "broker.session_taken_over_remote", labels=(("side", "remote"),)),
    _s("vmqpy_handover_duplicates_ignored", "counter", "handed-over messages already held (duplicates resolved)",
       "registration.handover_duplicates_ignored"),
    _s("vmqpy_handovers_in_progress", "gauge", "session handovers in progress", "registration.handovers_in_progress"),
    _s("vmqpy_forwards_unacknowledged", "gauge", "forwarded messages a peer has not acknowledged yet",
       "cluster.forwards_unacknowledged"),
    _s("vmqpy_forwarded", "counter", "messages forwarded to other nodes", "broker.forwarded"),
    _s("vmqpy_subscription_acks_waited", "counter",
       "SUBACK/UNSUBACK, takeover CONNACKs and hand-over acknowledgements that waited for other members to apply "
       "their routes (subscription.acknowledge = cluster)",
       "broker.subscription_acks_waited"),
    _s("vmqpy_subscription_acks_late", "counter",
       "of those, the ones sent after subscription.acknowledge_timeout with a member still to answer",
       "broker.subscription_acks_late"),
    _s("vmqpy_forward_received", "counter", "messages forwarded here by other nodes", "broker.forward_received"),
    _s("vmqpy_congestion_pauses", "counter", "times a client was paused because a peer was congested",
       "broker.congestion_signalled"),
    _s("vmqpy_queue_stalls_ended", "counter", "times a congested subscriber had held its publishers back for "
       "queue.max_stall seconds and stopped holding them (queue.overflow then applies to it alone)",
       "broker.queue_stall_ended"),
    _s("vmqpy_queue_overflow_dropped", "counter", "messages dropped by a subscriber past queue.max_stall: QoS 0 at "
       "once, QoS 1/2 beyond its limit (also in queue_message_drop)", "broker.queue_overflow_dropped"),
    _s("vmqpy_queue_overflow_kept", "counter", "QoS 1/2 messages a persistent subscriber past queue.max_stall kept "
       "beyond max_online_messages (on disk, up to max_offline_messages)", "broker.queue_overflow_kept"),
    _s("vmqpy_queue_overflow_disconnected", "counter", "subscribers disconnected past queue.max_stall "
       "(queue.overflow = disconnect)", "broker.queue_overflow_disconnected"),
    _s("vmqpy_queue_replica_operations_sent", "counter", "queue replica operations sent to replica nodes",
       "queue_replica.operations_sent"),
    _s("vmqpy_queue_replica_operations_acked", "counter", "queue replica operations a replica node has on disk",
       "queue_replica.operations_acked"),
    _s("vmqpy_queue_replica_operations_pending", "gauge", "queue replica writes some replica node has not acknowledged",
       "queue_replica.operations_pending"),
    _s("vmqpy_queue_replica_under_replicated", "gauge", "acknowledged queue writes still missing a replica's copy",
       "queue_replica.under_replicated"),
    _s("vmqpy_queue_replica_sessions_under_replicated", "gauge",
       "persistent sessions of this node not yet confirmed on all their replica nodes (rebalance)",
       "queue_replica.sessions_under_replicated"),
    _s("vmqpy_queue_replica_messages_under_replicated", "gauge",
       "messages of those sessions", "queue_replica.messages_under_replicated"),
    _s("vmqpy_queue_replica_messages_recovered", "counter", "messages adopted from queue replicas after an owner loss",
       "queue_replica.messages_recovered"),
    _s("vmqpy_replication_log_lines", "counter", "lines written to the replication log", "replication_log.lines"),
    _s("vmqpy_replication_log_file_bytes", "gauge", "size of the replication log file",
       "replication_log.file_bytes"),
    _s("vmqpy_replication_log_rotations", "counter", "times the replication log reached "
       "metadata.replication_log.max_size and was rotated", "replication_log.rotations"),
)

#: the families whose samples come from a key pattern: (name, help, pattern, label, the label's values) -> one
#: sample per value (0 until its key appears) and one per other match
PATTERNS: Final = (
    ("mqtt_connack_sent", "CONNACK packets sent, by return code", re.compile(r"broker\.mqtt_connack_(\w+)_sent"),
     "return_code", tuple(sorted({*CONNACK_LABELS.values(), "other"}))),
    ("vmqpy_netsplit_refused", "operations refused by the netsplit policy, by operation",
     re.compile(r"netsplit\.refused_(\w+)"), "operation", tuple(sorted(OPERATIONS))),
)
#: return codes under another spelling in older counters
_RETURN_CODE_ALIASES: Final = {"bad_credentials": "bad_username_or_password"}

@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One published histogram made of a node's bucket keys `<source>_le_<us>`, `<source>_le_inf` and
    `<source>_sum_us` (vmqpy.broker.client_metrics), with these bounds in microseconds; the count is the total of
    the buckets."""

    name: str
    help: str
    source: str
    bounds_us: tuple[int, ...]


#: the node's histograms; the bounds are the node's (vmqpy.broker.client_metrics.BOUNDS_US: a unit test checks),
#: and every bound is exposed, with 0 for a bucket that never counted
HISTOGRAMS: Final[tuple[HistogramSpec, ...]] = (
    HistogramSpec("vmqpy_connect_latency_seconds", "time from a CONNECT read to its CONNACK written (accepted)",
                  "broker.connect_latency",
                  (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
                   5_000_000)),
    HistogramSpec("vmqpy_publish_delivery_seconds",
                  "time from a PUBLISH read from its publisher (for a message forwarded by another node: from its "
                  "arrival on this node) to the PUBLISH written to a subscriber on this node",
                  "broker.delivery_latency",
                  (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
                   2_500_000, 5_000_000)),
    HistogramSpec("vmqpy_handover_duration_seconds",
                  "time from asking another node to hand a session over (a takeover) to the session live here",
                  "registration.handover_duration",
                  (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
                   5_000_000, 10_000_000)),
)
#: the CONNECT-to-CONNACK histogram (name, help) and bounds, as earlier versions named them
LATENCY: Final = (HISTOGRAMS[0].name, HISTOGRAMS[0].help)
LATENCY_BOUNDS_US: Final = HISTOGRAMS[0].bounds_us


def _num(value: float) -> float:
    return float(value)


def families(raw: Raw) -> list[Family]:
    """The published metric families of a node's counters `raw`: every counter and histogram (0 for a key not
    reported yet), the gauges the node reports."""
    out: dict[str, Family] = {}

    def family(name: str, kind: Kind, help: str) -> Family:
        if name not in out:
            out[name] = Family(name, kind, help)
        return out[name]

    for spec in SPECS:
        present = [raw[key] for key in spec.sources if key in raw]
        if present or spec.kind == "counter":
            family(spec.name, spec.kind, spec.help).samples.append((spec.labels, _num(sum(present))))
    inactive = [raw[key] for key in ("broker.sessions", "broker.sessions_online") if key in raw]
    if len(inactive) == 2:
        family("inactive_sessions", "gauge", "sessions on this node without a connected client (offline)").samples \
            .append(((), _num(inactive[0] - inactive[1])))
    for name, help, pattern, label, declared in PATTERNS:
        values = dict.fromkeys(declared, 0.0)
        for key in sorted(raw):
            match = pattern.fullmatch(key)
            if match is not None:
                value = _RETURN_CODE_ALIASES.get(match.group(1), match.group(1))
                values[value] = values.get(value, 0.0) + _num(raw[key])
        family(name, "counter", help).samples.extend(
            (((label, value),), count) for value, count in sorted(values.items()))
    for histogram_spec in HISTOGRAMS:
        out[histogram_spec.name] = histogram_family(histogram_spec, raw)
    return list(out.values())


def histogram_family(spec: HistogramSpec, raw: Raw) -> Family:
    """The histogram `spec` of the node's counters `raw`: cumulative buckets in seconds (every bound of the spec,
    then +Inf = the count, the total of every bucket key); all 0 when the node never observed one. A bucket key
    of a bound the spec does not know (a node of another version) adds to the next larger bound, or only to
    +Inf."""
    source = spec.source
    counts = [0.0] * len(spec.bounds_us)
    prefix = source + "_le_"
    total = 0.0
    for key, value in raw.items():
        if key.startswith(prefix):
            bound = key[len(prefix):]
            if bound.isdigit():
                total += _num(value)
                index = bisect_left(spec.bounds_us, int(bound))
                if index < len(counts):
                    counts[index] += _num(value)
            elif bound == "inf":
                total += _num(value)
    buckets, running = [], 0.0
    for us, count in zip(spec.bounds_us, counts, strict=True):
        running += count
        buckets.append((repr(us / 1_000_000), running))
    buckets.append(("+Inf", _num(total)))
    return Family(spec.name, "histogram", spec.help, buckets=buckets, count=_num(total),
                  sum=_num(raw.get(source + "_sum_us", 0)) / 1_000_000)


def vernemq_named(name: str) -> bool:
    """Whether the family `name` of the table carries VerneMQ's name (ours start with `vmqpy_`)."""
    return not name.startswith("vmqpy_")


def _prefixed(name: str, namespace: str) -> str:
    return f"{namespace}_{name}" if namespace else name


def sample_name(fam: Family, namespace: str = "") -> str:
    """The name of `fam`'s samples in a scrape: VerneMQ's counters without a suffix, ours with `_total`, a
    histogram's base name (its samples add `_bucket`, `_count`, `_sum`); prefixed by `namespace` and `_`."""
    suffix = "_total" if fam.kind == "counter" and not vernemq_named(fam.name) else ""
    return _prefixed(fam.name, namespace) + suffix


def _metric(fam: Family, node: str, namespace: str) -> Metric:
    name = _prefixed(fam.name, namespace)
    if fam.kind == "histogram":
        histogram = HistogramMetricFamily(name, fam.help, labels=["node"])
        histogram.add_metric([node], fam.buckets, fam.sum)
        return histogram
    label_names = ["node", *(label for label, _ in fam.samples[0][0])]
    if fam.kind == "counter" and vernemq_named(fam.name):
        # VerneMQ's exposition: the sample carries the family's name, no `_total`; see the module's docstring
        untyped = Metric(name, fam.help, "unknown")
        for labels, value in fam.samples:
            untyped.add_sample(name, dict(zip(label_names, [node, *(v for _, v in labels)], strict=True)), value)
        return untyped
    metric: CounterMetricFamily | GaugeMetricFamily
    if fam.kind == "counter":
        metric = CounterMetricFamily(name, fam.help, labels=label_names)
    else:
        metric = GaugeMetricFamily(name, fam.help, labels=label_names)
    for labels, value in fam.samples:
        metric.add_metric([node, *(v for _, v in labels)], value)
    return metric


class NodeCollector(Collector):
    """Reads the node's counters at every scrape (`metrics()`), labelled with `node()`, names prefixed with
    `namespace()` (the node's `prometheus_namespace`)."""

    def __init__(self, node: Callable[[], str], metrics: Callable[[], Raw],
                 namespace: Callable[[], str] = lambda: "") -> None:
        self._node = node
        self._metrics = metrics
        self._namespace = namespace

    def collect(self) -> Iterator[Metric]:
        node, namespace = self._node(), self._namespace()
        for fam in families(self._metrics()):
            yield _metric(fam, node, namespace)


#: the families prometheus-client's own collectors add (process: Linux /proc; python_gc_*: `gc.get_stats`)
RUNTIME_NAMES: Final = frozenset({
    "process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
    "process_cpu_seconds_total", "process_open_fds", "process_max_fds", "python_info",
    "python_gc_objects_collected_total", "python_gc_objects_uncollectable_total", "python_gc_collections_total"})


def registry(node: Callable[[], str], metrics: Callable[[], Raw],
             namespace: Callable[[], str] = lambda: "") -> CollectorRegistry:
    """A registry of its own (not prometheus-client's global one) holding one `NodeCollector` and the process,
    platform and garbage-collector collectors (their names are the client library's, never prefixed)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node, metrics, namespace))
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    if GC_COLLECTOR is not None:  # None where the interpreter has no gc.get_stats
        GCCollector(registry=reg)
    return reg


def exposed_names(raw: Raw, namespace: str = "") -> set[str]:
    """The sample names of the node's own families a scrape of a node with counters `raw` shows (VerneMQ's
    counters as named, ours with `_total`, histograms with `_bucket`, `_count`, `_sum`); `RUNTIME_NAMES` apart."""
    names: set[str] = set()
    for fam in families(raw):
        name = sample_name(fam, namespace)
        if fam.kind == "histogram":
            names.update({name + "_bucket", name + "_count", name + "_sum"})
        else:
            names.add(name)
    return names


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def vernemq_lines(fams: list[Family]) -> list[str]:
    """`vmq-admin metrics show` in VerneMQ's form: `counter.mqtt_connect_received = 3`, `gauge.NAME = N`,
    labelled samples as `counter.mqtt_connack_sent{return_code="success"} = 3`; a histogram as its
    `_bucket{le=...}`, `_count` and `_sum` lines. Sorted by name."""
    lines: list[str] = []
    for fam in sorted(fams, key=lambda f: f.name):
        if fam.kind == "histogram":
            for bound, count in fam.buckets:
                lines.append(f'histogram.{fam.name}_bucket{{le="{bound}"}} = {_number(count)}')
            lines.append(f"histogram.{fam.name}_count = {_number(fam.count)}")
            lines.append(f"histogram.{fam.name}_sum = {fam.sum:.6f}")
            continue
        for labels, value in fam.samples:
            lines.append(f"{fam.kind}.{fam.name}{_labels(labels)} = {_number(value)}")
    return lines
