"""The node's metric table: every published name, its type, its help and the node keys it is made of, declared
once. `SPECS` (one row per family and label set; VerneMQ's names where VerneMQ has the metric, `vmqpy_...` for
ours), `PATTERNS` (families whose label values come from the keys' names) and `HISTOGRAMS` are read by
admin.prometheus for `/metrics` and `vmq-admin metrics show`, and by the Grafana dashboard's test.

Keys are the dotted keys of `AdminNode.metrics()` (vmqpy/facade.py: `broker.`, `cluster.`, `cluster.links.`,
`registration.`, `metadata.`, `queue_replica.`, `storage.`, `process.`, `replication_log.`, `netsplit.`). A counter
the node keeps under a key no row reads would never be exported: tests/unit/admin/test_metric_table.py reads vmqpy
for every counter key written and fails, naming its file and line, for one this table does not read. Every counter
row is exported at 0 from the node's start (admin.prometheus). Pure data: admin imports nothing of vmqpy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CONNACK_RETURN_CODES",
    "HISTOGRAMS",
    "INACTIVE_SESSIONS",
    "LATENCY",
    "LATENCY_BOUNDS_US",
    "NETSPLIT_OPERATIONS",
    "PATTERNS",
    "RETURN_CODE_ALIASES",
    "SPECS",
    "HistogramSpec",
    "Kind",
    "Labels",
    "Spec",
]

Kind = Literal["counter", "gauge", "histogram"]
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Spec:
    """One published metric made of node keys: `sources` are summed (all must be absent for no sample)."""

    name: str
    kind: Kind
    help: str
    sources: tuple[str, ...]
    labels: Labels = ()



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
    _s("mqtt_publish_auth_error", "counter", "PUBLISHes refused because the ACL does not let their client write "
       "their topic (not routed; a 5.0 QoS 1/2 one answered with 0x87)", "broker.mqtt_publish_auth_error"),
    _s("mqtt_subscribe_auth_error", "counter", "topic filters of SUBSCRIBEs refused because the ACL does not let "
       "their client read them (or a $SYS filter the client may not have)", "broker.mqtt_subscribe_auth_error"),
    _s("client_expired", "counter", "sessions discarded because their client stayed away past their expiry "
       "(persistent_client_expiration, a 5.0 session expiry interval)", "broker.session_expired"),
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
    _s("vmqpy_connect_refused", "counter", "MQTT sockets closed at their accept: their listener held its "
       "max_connections", "broker.connections_refused_max", labels=(("reason", "listener_max"),)),
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
    _s("vmqpy_forward_received", "counter", "messages forwarded here by other nodes and delivered to this node's "
       "subscribers (routed here)", "broker.forward_delivered"),
    _s("vmqpy_forward_refused", "counter", "messages not forwarded: the link to their node refused them (no link, its "
       "buffer full)", "broker.forward_refused"),
    _s("vmqpy_forward_malformed", "counter", "messages forwarded here that could not be decoded (skipped, logged)",
       "broker.forward_malformed"),
    _s("vmqpy_forwards_passed_on", "counter", "messages forwarded here for a subscriber whose session had moved on, "
       "passed on to its new node", "broker.forwards_passed_on"),
    _s("vmqpy_forwards_passed_on_lost", "counter", "of those, QoS 1/2 ones the new node's link failed (logged)",
       "broker.forwards_passed_on_lost"),
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
    # the broker's other events (prefix broker.)
    _s("vmqpy_client_connected", "counter", "CONNECTs accepted: a session registered here for its client",
       "broker.client_connected"),
    _s("vmqpy_publish_sys_dropped", "counter", "PUBLISHes of clients to $SYS topics, dropped (the node's own tree; "
       "QoS 1/2 acknowledged all the same)", "broker.publish_sys_dropped"),
    _s("vmqpy_will_dropped", "counter", "wills not published: the ACL does not let their client write their topic",
       "broker.will_not_authorized", labels=(("reason", "not_authorized"),)),
    _s("vmqpy_will_dropped", "counter", "wills not published: the netsplit policy refused publishing then",
       "broker.will_dropped_netsplit", labels=(("reason", "netsplit"),)),
    _s("vmqpy_access_reloads", "counter", "access files taken again after a change (vmq-admin reload, the file "
       "watch)", "broker.acl_reloaded", labels=(("file", "acl"),)),
    _s("vmqpy_access_reloads", "counter", "access files taken again after a change (vmq-admin reload, the file "
       "watch)", "broker.password_file_reloaded", labels=(("file", "password_file"),)),
    _s("vmqpy_access_reload_failed", "counter", "reloads of the ACL or password file refused (unreadable, not UTF-8, "
       "a syntax error): the files in force stay", "broker.access_reload_failed"),
    _s("vmqpy_subscriptions_revoked", "counter", "subscriptions removed from sessions because a reloaded ACL no "
       "longer lets their client read them", "broker.subscription_revoked"),
    _s("vmqpy_placement_redirects", "counter", "CONNECTs of a client assigned to another node "
       "(persistent_session_placement = assigned): redirected (CONNACK 0x9C Use another server, 5.0) or served here "
       "(3.1.1 cannot be redirected)", "broker.placement_redirected", labels=(("outcome", "redirected"),)),
    _s("vmqpy_placement_redirects", "counter", "CONNECTs of a client assigned to another node "
       "(persistent_session_placement = assigned): redirected (CONNACK 0x9C Use another server, 5.0) or served here "
       "(3.1.1 cannot be redirected)", "broker.placement_not_redirected", labels=(("outcome", "served_here"),)),
    _s("vmqpy_sessions_disconnected_by_operator", "counter", "sessions whose client was disconnected by "
       "vmq-admin session disconnect (or a drain)", "broker.session_disconnected_by_operator"),
    _s("vmqpy_session_migrations", "counter", "sessions handed over to another node (a client id registered there, "
       "a move): started, and done (the new owner holds it)", "broker.session_migrations_started",
       labels=(("stage", "started"),)),
    _s("vmqpy_session_migrations", "counter", "sessions handed over to another node (a client id registered there, "
       "a move): started, and done (the new owner holds it)", "broker.session_migrations_done",
       labels=(("stage", "done"),)),
    _s("vmqpy_sessions_recreated", "counter", "sessions of a node that left, recreated here from the store",
       "broker.sessions_recreated"),
    _s("vmqpy_handover_messages", "counter", "messages of handed-over sessions: handed over (the new owner holds "
       "them, forgotten here), adopted here, dropped here (the session's queue could not take them)",
       "broker.messages_handed_over", labels=(("event", "handed_over"),)),
    _s("vmqpy_handover_messages", "counter", "messages of handed-over sessions: handed over (the new owner holds "
       "them, forgotten here), adopted here, dropped here (the session's queue could not take them)",
       "broker.messages_adopted", labels=(("event", "adopted"),)),
    _s("vmqpy_handover_messages", "counter", "messages of handed-over sessions: handed over (the new owner holds "
       "them, forgotten here), adopted here, dropped here (the session's queue could not take them)",
       "broker.handover_dropped", labels=(("event", "dropped"),)),
    _s("vmqpy_handover_images_ignored", "counter", "handed-over sessions ignored: an older owner's image of a "
       "session recovered here from copies (divergent copies)", "broker.handover_image_ignored"),
    _s("vmqpy_handover_messages_skipped", "counter", "messages already held, skipped when adopted: from a lost "
       "owner's copies (origin=recovery) or in an older owner's handover (origin=handover)",
       "broker.recovered_already_adopted", labels=(("origin", "recovery"),)),
    _s("vmqpy_handover_messages_skipped", "counter", "messages already held, skipped when adopted: from a lost "
       "owner's copies (origin=recovery) or in an older owner's handover (origin=handover)",
       "broker.handover_already_recovered", labels=(("origin", "handover"),)),
    _s("vmqpy_lineage_inherited", "counter", "lineage entries of a lost owner taken over with its copies (so an "
       "older owner's later handover skips what it had taken)", "broker.lineage_inherited"),
    # the forwarding drivers (vmqpy.cluster.forward_driver): the publishes' (prefix cluster.) and the queue
    # replicas' (prefix queue_replica.transport_)
    *(row for driver, prefix in (("publishes", "cluster."), ("queue_replicas", "queue_replica.transport_")) for row in (
        _s("vmqpy_cluster_forward_entries_received", "counter", "entries of FORWARD frames received from other "
           "nodes (duplicates included)", prefix + "forward_entries_received", labels=(("driver", driver),)),
        _s("vmqpy_cluster_forward_duplicates", "counter", "entries received again (a resend after a lost "
           "acknowledgement): delivered once", prefix + "forward_duplicates", labels=(("driver", driver),)),
        _s("vmqpy_cluster_forwards_resent", "counter", "unacknowledged entries sent again on a new link",
           prefix + "forwards_resent", labels=(("driver", driver),)),
        _s("vmqpy_cluster_forwards_refused", "counter", "entries not sent: the outgoing buffer to their node was "
           "full", prefix + "forwards_refused", labels=(("driver", driver),)),
        _s("vmqpy_cluster_forward_frames_malformed", "counter", "FORWARD frames received that could not be decoded "
           "(dropped, logged)", prefix + "forward_malformed", labels=(("driver", driver),)),
    )),
    # the cluster's links (prefix cluster.links.: vmqpy.cluster.link_counters and the networks' stats())
    _s("vmqpy_cluster_frames", "counter", "data frames read from and written to cluster links (handshake, heartbeat "
       "and BYE frames not counted)", "cluster.links.frames_in", labels=(("direction", "in"),)),
    _s("vmqpy_cluster_frames", "counter", "data frames read from and written to cluster links (handshake, heartbeat "
       "and BYE frames not counted)", "cluster.links.frames_out", labels=(("direction", "out"),)),
    _s("vmqpy_cluster_frames_refused", "counter", "cluster frames refused: larger than the maximum frame size, for a "
       "peer not known, or a METADATA frame before the store listened", "cluster.links.oversized",
       labels=(("reason", "oversized"),)),
    _s("vmqpy_cluster_frames_refused", "counter", "cluster frames refused: larger than the maximum frame size, for a "
       "peer not known, or a METADATA frame before the store listened", "cluster.links.unknown_peer",
       labels=(("reason", "unknown_peer"),)),
    _s("vmqpy_cluster_frames_refused", "counter", "cluster frames refused: larger than the maximum frame size, for a "
       "peer not known, or a METADATA frame before the store listened", "cluster.links.metadata_dropped",
       labels=(("reason", "metadata_early"),)),
    _s("vmqpy_cluster_handshakes_refused", "counter", "cluster handshakes refused, by this node or its peer (wrong "
       "cookie, name mismatch, a connection to itself, ...)", "cluster.links.handshakes_refused"),
    _s("vmqpy_cluster_duplicate_links", "counter", "cluster connections refused to keep one link per pair of nodes",
       "cluster.links.duplicate_links"),
    _s("vmqpy_cluster_links_closed", "counter", "cluster links closed: a protocol error of the peer (length, "
       "msgpack, version, frame type or body), or a peer silent for cluster.detect_timeout",
       "cluster.links.malformed_frames", labels=(("reason", "protocol_error"),)),
    _s("vmqpy_cluster_links_closed", "counter", "cluster links closed: a protocol error of the peer (length, "
       "msgpack, version, frame type or body), or a peer silent for cluster.detect_timeout",
       "cluster.links.silent_peers", labels=(("reason", "silent_peer"),)),
    _s("vmqpy_cluster_links_up", "counter", "cluster links established", "cluster.links.links_up"),
    _s("vmqpy_cluster_links_down", "counter", "cluster links lost", "cluster.links.links_down"),
    _s("vmqpy_cluster_reconnects", "counter", "dials after a failed one or a lost link", "cluster.links.reconnects"),
    _s("vmqpy_cluster_dial_attempts", "counter", "TCP connects to peers tried", "cluster.links.dial_attempts"),
    _s("vmqpy_cluster_dial_failures", "counter", "TCP connects to peers failed", "cluster.links.dial_failures"),
    _s("vmqpy_cluster_link_connections", "gauge", "open cluster sockets", "cluster.links.connections"),
    _s("vmqpy_cluster_peers_linked", "gauge", "peers this node has a link to", "cluster.links.reachable"),
    _s("vmqpy_cluster_buffered_frames", "gauge", "frames waiting in the outgoing buffers of cluster links",
       "cluster.links.buffered_frames"),
    _s("vmqpy_cluster_buffered_bytes", "gauge", "bytes waiting in the outgoing buffers of cluster links",
       "cluster.links.buffered_bytes"),
    # registration and handovers (prefix registration.)
    _s("vmqpy_handovers_requested", "counter", "session handovers this node asked of another node (takeovers)",
       "registration.handovers_requested"),
    _s("vmqpy_handover_timeouts", "counter", "handovers asked of another node that did not finish in time",
       "registration.handover_timeouts"),
    _s("vmqpy_handover_batches", "counter", "batches of a handed-over session's messages sent and received",
       "registration.handover_batches_sent", labels=(("direction", "sent"),)),
    _s("vmqpy_handover_batches", "counter", "batches of a handed-over session's messages sent and received",
       "registration.handover_batches_received", labels=(("direction", "received"),)),
    _s("vmqpy_registration_locks_held", "gauge", "client ids whose registration this node's leader holds now",
       "registration.locks_held"),
    _s("vmqpy_registration_locks_expired", "counter", "registration locks the leader let go when they expired",
       "registration.locks_expired"),
    # the metadata store (prefix metadata.)
    _s("vmqpy_metadata_pushes", "counter", "writes pushed here by peers: received, acknowledged, refused (a key "
       "not valid, a peer not a member)", "metadata.pushes_received", labels=(("event", "received"),)),
    _s("vmqpy_metadata_pushes", "counter", "writes pushed here by peers: received, acknowledged, refused (a key "
       "not valid, a peer not a member)", "metadata.pushes_acknowledged", labels=(("event", "acknowledged"),)),
    _s("vmqpy_metadata_pushes", "counter", "writes pushed here by peers: received, acknowledged, refused (a key "
       "not valid, a peer not a member)", "metadata.pushes_refused", labels=(("event", "refused"),)),
    _s("vmqpy_metadata_implausible_refused", "counter", "pushes and exchange replies refused: their dots are too far "
       "ahead of what this node knows of their writer", "metadata.implausible_refused"),
    _s("vmqpy_metadata_stale_replies", "counter", "exchange replies for an exchange no longer running (ignored)",
       "metadata.stale_replies"),
    _s("vmqpy_metadata_sync_requests", "counter", "exchange requests of peers: served, or rejected (not a member, "
       "a reused node id)", "metadata.requests_served", labels=(("outcome", "served"),)),
    _s("vmqpy_metadata_sync_requests", "counter", "exchange requests of peers: served, or rejected (not a member, "
       "a reused node id)", "metadata.requests_rejected", labels=(("outcome", "rejected"),)),
    _s("vmqpy_metadata_views_differ", "counter", "peer reports made with another membership view (garbage "
       "collection waits for agreed views)", "metadata.views_differ"),
    _s("vmqpy_metadata_objects_repaired", "counter", "keys an exchange brought that this node lacked",
       "metadata.objects_repaired"),
    _s("vmqpy_metadata_objects_applied", "counter", "versions of peers applied to the store (pushes and exchanges)",
       "metadata.objects_applied"),
    _s("vmqpy_metadata_deletes", "counter", "deletes in the metadata store on this node", "metadata.deletes"),
    _s("vmqpy_metadata_gc_runs", "counter", "garbage collection passes of the metadata store", "metadata.gc_runs"),
    _s("vmqpy_metadata_gc_dots_pruned", "counter", "dots every member holds, forgotten by garbage collection",
       "metadata.gc_dots_pruned"),
    _s("vmqpy_metadata_gc_keys_deleted", "counter", "rows of deletes every member has seen, dropped by garbage "
       "collection", "metadata.gc_keys_deleted"),
    _s("vmqpy_metadata_tombstones", "gauge", "rows of deletes kept until every member has seen them",
       "metadata.tombstone_rows"),
    _s("vmqpy_metadata_live_keys", "gauge", "keys with a value (deletes left out)", "metadata.live_keys"),
    _s("vmqpy_metadata_indexed_dots", "gauge", "dots in the dot index (live and not yet collected)",
       "metadata.indexed_dots"),
    _s("vmqpy_metadata_gc_pending_dots", "gauge", "dots waiting for garbage collection", "metadata.gc_pending_dots"),
    _s("vmqpy_metadata_contexts_at_rest", "gauge", "stored objects that still carry a causal context",
       "metadata.contexts_at_rest"),
    _s("vmqpy_metadata_peers", "gauge", "peers of the metadata store", "metadata.peers"),
    _s("vmqpy_metadata_peers_usable", "gauge", "peers the metadata store exchanges with now", "metadata.reachable"),
    _s("vmqpy_metadata_exchanges_active", "gauge", "anti-entropy exchanges running", "metadata.exchange_active"),
    _s("vmqpy_metadata_writebacks_pending", "gauge", "resolved siblings waiting to be written back",
       "metadata.writebacks_pending"),
    _s("vmqpy_metadata_own_holes", "gauge", "gaps in this node's own dots (writes lost in a crash, filled by "
       "exchanges)", "metadata.own_holes"),
    # the queue replicas (prefix queue_replica.)
    _s("vmqpy_queue_replica_operations_failed", "counter", "queue replica operations a replica node did not take "
       "(link lost, refused)", "queue_replica.operations_failed"),
    _s("vmqpy_queue_replica_operations_backlog", "gauge", "queue replica operations waiting to be sent",
       "queue_replica.operations_backlog"),
    _s("vmqpy_queue_replica_barriers_waiting", "gauge", "acknowledgements to clients waiting for their replica "
       "copies", "queue_replica.barriers_waiting"),
    _s("vmqpy_queue_replica_copy_operations", "counter", "operations of other owners on the copies this node "
       "keeps: applied, superseded (a later state already held), malformed (skipped)",
       "queue_replica.operations_applied", labels=(("outcome", "applied"),)),
    _s("vmqpy_queue_replica_copy_operations", "counter", "operations of other owners on the copies this node "
       "keeps: applied, superseded (a later state already held), malformed (skipped)",
       "queue_replica.operations_superseded", labels=(("outcome", "superseded"),)),
    _s("vmqpy_queue_replica_copy_operations", "counter", "operations of other owners on the copies this node "
       "keeps: applied, superseded (a later state already held), malformed (skipped)",
       "queue_replica.operations_malformed", labels=(("outcome", "malformed"),)),
    _s("vmqpy_queue_replica_copies", "gauge", "copies this node keeps for other owners: sessions, messages, lineage "
       "batches", "queue_replica.copies_sessions", labels=(("kind", "sessions"),)),
    _s("vmqpy_queue_replica_copies", "gauge", "copies this node keeps for other owners: sessions, messages, lineage "
       "batches", "queue_replica.copies_messages", labels=(("kind", "messages"),)),
    _s("vmqpy_queue_replica_copies", "gauge", "copies this node keeps for other owners: sessions, messages, lineage "
       "batches", "queue_replica.copies_lineage", labels=(("kind", "lineage"),)),
    _s("vmqpy_queue_replica_recoveries", "counter", "sessions of a lost owner recovered here from their copies",
       "queue_replica.recoveries"),
    _s("vmqpy_queue_replica_fetches_answered", "counter", "requests of other nodes for the copies this node keeps, "
       "answered", "queue_replica.fetches_answered"),
    _s("vmqpy_queue_replica_rebalances", "counter", "rebalances of this node's sessions' replica nodes",
       "queue_replica.rebalances"),
    _s("vmqpy_queue_replica_rebalance_copies", "counter", "replica copies a rebalance made (synced to a new replica "
       "node), dropped, or deferred (a replica node not reachable)", "queue_replica.rebalance_syncs",
       labels=(("action", "synced"),)),
    _s("vmqpy_queue_replica_rebalance_copies", "counter", "replica copies a rebalance made (synced to a new replica "
       "node), dropped, or deferred (a replica node not reachable)", "queue_replica.rebalance_drops",
       labels=(("action", "dropped"),)),
    _s("vmqpy_queue_replica_rebalance_copies", "counter", "replica copies a rebalance made (synced to a new replica "
       "node), dropped, or deferred (a replica node not reachable)", "queue_replica.rebalance_deferred",
       labels=(("action", "deferred"),)),
    _s("vmqpy_queue_replica_rebalance_failed", "counter", "session syncs of a rebalance that failed",
       "queue_replica.rebalance_failed"),
    _s("vmqpy_queue_replica_rebalance_syncing", "gauge", "sessions a rebalance is syncing now",
       "queue_replica.rebalance_syncing"),
    # the SQLite store of sessions and queues (prefix storage.)
    _s("vmqpy_storage_commits", "counter", "transactions the storage writer committed", "storage.commits"),
    _s("vmqpy_storage_operations", "counter", "operations the storage writer committed", "storage.ops"),
    _s("vmqpy_storage_max_batch", "gauge", "the largest batch of operations one commit held since start",
       "storage.max_batch_seen"),
    _s("vmqpy_storage_checkpoints", "counter", "WAL checkpoints of the store", "storage.checkpoints"),
    _s("vmqpy_storage_vacuumed_pages", "counter", "free pages the store gave back to the file system",
       "storage.vacuumed_pages"),
    _s("vmqpy_storage_maintenance_errors", "counter", "failed maintenance passes of the store (checkpoint, vacuum; "
       "logged)", "storage.maintenance_errors"),
)

#: the CONNACK return codes the node counts (VerneMQ's names: vmqpy.client_metrics.connack_label, "other" included)
#: and the operations the netsplit policy refuses (vmqpy.cluster.policy.OPERATIONS), sorted: admin imports nothing of
#: vmqpy, so they are written here, and tests/unit/admin/test_prometheus.py checks they are the node's
CONNACK_RETURN_CODES: Final = (
    "bad_username_or_password", "client_identifier_not_valid", "not_authorized", "other", "server_unavailable",
    "success", "unsupported_protocol_version",
)
NETSPLIT_OPERATIONS: Final = ("publish", "register", "subscribe", "unsubscribe")

#: the families whose samples come from a key pattern: (name, help, pattern, label, the label's values) -> one
#: sample per value (0 until its key appears) and one per other match
PATTERNS: Final = (
    ("mqtt_connack_sent", "CONNACK packets sent, by return code", re.compile(r"broker\.mqtt_connack_(\w+)_sent"),
     "return_code", CONNACK_RETURN_CODES),
    ("vmqpy_netsplit_refused", "operations refused by the netsplit policy, by operation",
     re.compile(r"netsplit\.refused_(\w+)"), "operation", NETSPLIT_OPERATIONS),
)
#: a gauge made of two keys: (name, help, the sessions, the sessions with a connected client) -> their difference,
#: left out unless the node reports both
INACTIVE_SESSIONS: Final = ("inactive_sessions", "sessions on this node without a connected client (offline)",
                            "broker.sessions", "broker.sessions_online")
#: return codes under another spelling in older counters
RETURN_CODE_ALIASES: Final = {"bad_credentials": "bad_username_or_password"}

@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One published histogram made of a node's bucket keys `<source>_le_<us>`, `<source>_le_inf` and
    `<source>_sum_us` (vmqpy.client_metrics), with these bounds in microseconds; the count is the total of
    the buckets."""

    name: str
    help: str
    source: str
    bounds_us: tuple[int, ...]


#: the node's histograms; the bounds are the node's (vmqpy.client_metrics.BOUNDS_US: a unit test checks),
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
