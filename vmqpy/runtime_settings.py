"""Which settings `vmq-admin set` changes while the node runs, when each change takes effect, and why the others
cannot change without a restart. Pure: the node applies a change (vmqpy.node.Node.apply_setting), the facade
refuses the others with `why_not` (vmqpy.facade), `vmq-admin show` and `set --help` list them (admin.cli.settings,
docs/admin.md, "Settings at run time").
"""

from __future__ import annotations

__all__ = ["AT_ONCE", "NEW_CONNECTIONS", "RUNTIME", "SESSIONS", "why_not"]

AT_ONCE = "at once"
NEW_CONNECTIONS = "for connections made after the change"
SESSIONS = "for every session at once (a queue already longer is not cut)"

#: key -> when the change takes effect
RUNTIME: dict[str, str] = {
    "log.console.level": AT_ONCE,
    "log.connections": AT_ONCE,
    "allow_register_during_netsplit": AT_ONCE,
    "allow_publish_during_netsplit": AT_ONCE,
    "allow_subscribe_during_netsplit": AT_ONCE,
    "allow_unsubscribe_during_netsplit": AT_ONCE,
    "trade_consistency": AT_ONCE,
    "cluster.readiness": AT_ONCE,
    "shared_subscription_policy": AT_ONCE,
    "subscription.acknowledge": AT_ONCE,
    "subscription.acknowledge_timeout": AT_ONCE,
    "allow_anonymous": AT_ONCE + " for the next CONNECT (connected clients stay)",
    "upgrade_outgoing_qos": AT_ONCE,
    "max_online_messages": SESSIONS,
    "max_offline_messages": SESSIONS,
    "max_queued_bytes": SESSIONS,
    "max_inflight_messages": "for every session at its next connection (its window is set when a client connects)",
    "max_message_rate": NEW_CONNECTIONS,
    "retry_interval": NEW_CONNECTIONS,
    "persistent_client_expiration": NEW_CONNECTIONS + " (a session's expiry is set at its CONNECT)",
    "max_client_id_size": NEW_CONNECTIONS,
    "max_keepalive": NEW_CONNECTIONS,
    "max_subscriptions_per_client": NEW_CONNECTIONS,
    "receive_max_broker": NEW_CONNECTIONS,
    "topic_alias_max_client": NEW_CONNECTIONS,
    "topic_alias_max_broker": NEW_CONNECTIONS,
}

#: (key or key prefix, why it cannot change while the node runs); the first that fits answers
_WHY_NOT: tuple[tuple[str, str], ...] = (
    ("nodename", "it is the node's name in the cluster and in its data; a new name is a new node"),
    ("distributed_cookie", "every member must hold the same cookie: change it on all nodes and restart them"),
    ("platform_data_dir", "the node's stores are open in it"),
    ("listener.http", "the admin API's socket is bound at start"),
    ("listener.https", "the admin API's socket and certificate are set at start"),
    ("listener.vmq", "the cluster listener is bound at start"),
    ("listener.", "listeners and their options are set when they open: stop one with `vmq-admin listener stop`, "
                  "change the file and restart the node"),
    ("max_message_size", "the WebSocket listeners' frame limit and the pre-CONNECT budget are set when a listener "
                         "opens"),
    ("mqtt.", "the listeners' pre-CONNECT budgets are set when they open"),
    ("cluster.", "the cluster links and the discovery are set up at start; members must agree"),
    ("queue.", "queue replication and overload handling are set up at start and must agree across members"),
    ("metadata.", "the metadata store and its replication log are opened at start"),
    ("outgoing_clustering_buffer_size", "the cluster links' buffers are made at start"),
    ("incoming_clustering_buffer_size", "the cluster links' buffers are made at start"),
    ("persistent_session_placement", "every member must place sessions the same way"),
    ("log.", "the log files and handlers are opened at start (`log.console.level` and `log.connections` can "
             "change)"),
    ("auth.", "the login pool and failed-login throttle are made at start"),
    ("password_file", "read at start; `vmq-admin acl reload` takes a changed file again"),
    ("acl_file", "read at start; `vmq-admin acl reload` takes a changed file again"),
    ("plugins.", "the password and ACL checks are set up at start"),
    ("vmq_passwd.", "the reload watch is started with the node"),
    ("vmq_acl.", "the reload watch is started with the node"),
    ("systree", "the $SYS publisher is started with the node"),
    ("metrics.", "the admin API's access rules are set at start"),
    ("status.", "the admin API's access rules are set at start"),
    ("retain.", "the retained-message quotas are counted from start"),
    ("session.", "read when the broker starts"),
)


def why_not(key: str) -> str:
    """Why `key` (not in RUNTIME) cannot change while the node runs, for the operator."""
    for prefix, reason in _WHY_NOT:
        if key.startswith(prefix):
            return reason
    return "it is read once when the node starts"
