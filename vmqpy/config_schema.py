"""The key table: every configuration key of a node (listener keys apart: vmqpy.listener_keys) with its parser,
its default (already parsed) and one line of documentation, VerneMQ's names where VerneMQ has the key.
vmqpy.config reads files, environment and flags against it; `vmqpy config-reference` prints it as the table
of docs/configuration.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from vmqpy.cluster.discovery_plan import parse_peers
from vmqpy.config_values import (
    Key,
    parse_address,
    parse_address_limit,
    parse_bool,
    parse_choice,
    parse_connection_limit,
    parse_cookie,
    parse_duration,
    parse_duration_or_never,
    parse_int,
    parse_milliseconds,
    parse_nodename,
    parse_path,
    parse_positive_duration,
    parse_positive_size,
    parse_size,
    parse_text,
)

__all__ = ["SCHEMA", "parse_prometheus_namespace"]


def parse_prometheus_namespace(text: str) -> str:
    """A prefix for the names GET /metrics gives (VerneMQ 2.x's `prometheus_namespace`): empty (no prefix) or a
    Prometheus metric name start, letters, digits and underscores, not starting with a digit; `vernemq` gives
    `vernemq_mqtt_publish_received`."""
    name = text.strip()
    if name and not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name):
        raise ValueError(f"{name!r} is not a Prometheus name prefix: letters, digits and _, not starting with a digit")
    return name.rstrip("_")

SCHEMA: Mapping[str, Key] = {
    "nodename": Key(parse_nodename, "vmqpy@127.0.0.1", "the node's name, NAME@HOST"),
    "platform_data_dir": Key(parse_path, Path("./data"), "the node's data directory (SQLite files, logs)"),
    "distributed_cookie": Key(
        parse_cookie, "vmqpy",
        "shared secret of the cluster's node links, at least 10 characters; the public defaults (vmqpy, VerneMQ's "
        "vmq) are refused by `vmqpy start` on a node with listener.vmq.clustering unless "
        "cluster.allow_default_cookie = on",
    ),
    "cluster.allow_default_cookie": Key(
        parse_bool, False,
        "let a node with listener.vmq.clustering start with the public default distributed_cookie (a throwaway "
        "test cluster on loopback); it still logs a warning",
    ),
    "cluster.handshake_timeout": Key(
        parse_positive_duration, 10.0,
        "a cluster link's handshake (TLS and the cookie's challenge-response) must finish this long after it "
        "starts, independent of cluster.detect_timeout",
    ),
    "cluster.max_pending_links": Key(
        parse_int(1), 64, "sockets accepted on the cluster port that have not finished their handshake, node-wide; "
        "more are closed at once (a socket of an address holding fewer than the address holding the most takes "
        "that one's oldest place). Kept out of the MQTT listeners' descriptors",
    ),
    "cluster.max_pending_links_per_address": Key(
        parse_int(1), 8, "of those, sockets of one client address; more are closed at once",
    ),
    "cluster.discovery": Key(
        parse_peers, None,
        "peers to join at start-up, NAME@HOST[:PORT] separated by commas (as `cluster join discovery-node=` takes "
        "them; the port of their cluster listener, 44053 when omitted); tried until this node is in a cluster with "
        "the lowest-named of them; nothing after a `cluster leave` (docs/cluster.md, 'Joining at start-up')",
    ),
    "cluster.discovery_interval": Key(
        parse_positive_duration, 1.0,
        "cluster.discovery: the wait after a first failed round, doubling with every failed round",
    ),
    "cluster.discovery_max_interval": Key(
        parse_positive_duration, 30.0,
        "cluster.discovery: the longest wait between rounds, and how often a peer that keeps failing for the same "
        "reason is logged again as a warning",
    ),
    "listener.http.default": Key(parse_address, None, "HTTP admin API address (no API when unset)"),
    "listener.https.default": Key(
        parse_address, None, "HTTPS admin API address (with listener.https.certfile and keyfile; docs/security.md)"
    ),
    "listener.https.certfile": Key(parse_path, None, "certificate chain (PEM) of the HTTPS admin API"),
    "listener.https.keyfile": Key(parse_path, None, "private key (PEM) of listener.https.certfile"),
    "listener.vmq.clustering": Key(parse_address, None, "cluster listener address (a single node when unset)"),
    "cluster.tls.cafile": Key(
        parse_path, None, "CA (PEM) both ends of a cluster link are verified against; with certfile, keyfile: TLS links"
    ),
    "cluster.tls.certfile": Key(parse_path, None, "this node's certificate chain (PEM) on the cluster links"),
    "cluster.tls.keyfile": Key(parse_path, None, "private key (PEM) of cluster.tls.certfile"),
    "allow_anonymous": Key(
        parse_bool, False, "accept clients without a user name (off: CONNACK 0x87 / 5, as VerneMQ's default)"
    ),
    "password_file": Key(parse_path, None, "user:hash lines checked at CONNECT (create with vmqpy passwd)"),
    "plugins.vmq_passwd": Key(
        parse_bool, True, "on: password_file (vmq_passwd.password_file) is checked; off: only allow_anonymous decides"
    ),
    "vmq_passwd.password_reload_interval": Key(
        parse_duration, 10.0, "seconds between looks at password_file for changes (reloaded when it changed); 0: never"
    ),
    "plugins.vmq_acl": Key(parse_bool, True, "on: acl_file (vmq_acl.acl_file) is enforced; off: it is not read"),
    "acl_file": Key(
        parse_path, None, "the ACL file: who may publish and subscribe to what (docs/security.md); unset: anything"
    ),
    "vmq_acl.acl_reload_interval": Key(
        parse_duration, 10.0, "seconds between looks at acl_file for changes (reloaded when it changed); 0: never"
    ),
    "auth.failed_login_delay": Key(
        parse_duration, 1.0, "wait before the CONNACK refusing bad credentials or an anonymous client (slows guessing)"
    ),
    "auth.failed_login_limit": Key(
        parse_int(0, 1_000_000), 10,
        "failed logins from one address within auth.failed_login_window that block it for auth.failed_login_block "
        "(its CONNECTs with a password are refused at once, 0x9F); 0: never blocked"
    ),
    "auth.failed_login_window": Key(
        parse_positive_duration, 60.0, "seconds over which an address's failed logins are counted"
    ),
    "auth.failed_login_block": Key(
        parse_duration, 60.0, "seconds an address over auth.failed_login_limit is refused without a password check"
    ),
    "auth.failed_login_addresses": Key(
        parse_int(1, 10_000_000), 10_000,
        "peer addresses whose failed logins are remembered (the least recently seen is forgotten first)"
    ),
    "auth.hash_workers": Key(
        parse_int(1, 64), 1, "threads that check passwords (PBKDF2), off the event loop"
    ),
    "auth.hash_queue": Key(
        parse_int(0, 100_000), 32,
        "password checks that may wait for a worker; a CONNECT beyond is refused Server busy (0x89, 3.1.1: 3)"
    ),
    "max_inflight_messages": Key(parse_int(1, 65535), 20, "QoS 1/2 messages in flight per client"),
    "receive_max_broker": Key(
        parse_int(1, 65535), None,
        "Receive Maximum announced to 5.0 clients (unacknowledged QoS 1/2 PUBLISHes); unset: max_inflight_messages"
    ),
    "receive_max_client": Key(
        parse_int(1, 65535), 65535,
        "largest Receive Maximum of a 5.0 client the node honours (with max_inflight_messages)"
    ),
    "topic_alias_max_client": Key(
        parse_int(0, 65535), 64, "Topic Alias Maximum announced to 5.0 clients (aliases they may use); 0: none"
    ),
    "topic_alias_max_broker": Key(
        parse_int(0, 65535), 64, "topic aliases the node uses towards a 5.0 client that allows them; 0: none"
    ),
    "topic_max_depth": Key(
        parse_int(0, 65535), 10, "most levels of a PUBLISH topic or SUBSCRIBE filter (5.0: DISCONNECT 0x90, SUBACK "
        "0x8F); 0: no limit",
    ),
    "max_online_messages": Key(parse_int(1), 1000, "queued messages of an online client beyond the window"),
    "max_offline_messages": Key(parse_int(0), 1000, "queued messages of an offline persistent session"),
    "max_queued_bytes": Key(
        parse_size, 8 * 1024 * 1024,
        "bytes (payloads and topics) a session's queue holds, online or offline (Mosquitto's name); beyond it a "
        "subscriber is congested (QoS 1/2) or a message dropped (QoS 0, offline, after queue.max_stall); 0: no bound",
    ),
    "queue.max_stall": Key(
        parse_duration, 5.0,
        "seconds a congested online subscriber may hold back the publishers of its topics; then queue.overflow "
        "applies to it alone and they go on; 0: for as long as it stays congested",
    ),
    "queue.overflow": Key(
        parse_choice("queue", "drop", "disconnect"), "queue",
        "a subscriber congested for queue.max_stall: queue (drops QoS 0; a persistent session keeps QoS 1/2 up to "
        "max_offline_messages, a clean one drops them), drop (drops beyond max_online_messages) or disconnect",
    ),
    "persistent_client_expiration": Key(
        parse_duration_or_never, None, "how long an offline 3.1.1 persistent session is kept (never, 1h, 1d, ...)"
    ),
    "max_message_size": Key(
        parse_int(0), 1024 * 1024,
        "largest packet accepted, bytes (announced to 5.0 clients); 0: MQTT's own limit, 256 MB (docs/broker.md)",
    ),
    "mqtt.connect_max_size": Key(
        parse_positive_size, 64 * 1024,
        "largest CONNECT accepted, bytes (max_message_size wins when smaller); raise it for clients with larger "
        "wills (vmqpy extension)",
    ),
    "mqtt.connect_budget": Key(
        parse_positive_size, 16 * 1024 * 1024,
        "bytes all connections still before their CONNECT may hold together (partial CONNECTs, WebSocket "
        "upgrades); a socket whose bytes do not fit is closed (vmqpy extension, docs/security.md)",
    ),
    "mqtt.connect_timeout": Key(
        parse_positive_duration, 10.0,
        "a new connection that has not sent its whole CONNECT (WebSocket: upgrade request) this long is closed "
        "(tcp/ssl: at a random point of the following fifth, so a burst of sockets is not closed in one burst)",
    ),
    "max_client_id_size": Key(
        parse_int(23, 65535), 65535, "longest client id accepted (at least 23: every server must accept those)"
    ),
    "max_keepalive": Key(parse_int(0, 65535), 0, "largest keepalive granted, seconds; 0 is no limit"),
    "max_message_rate": Key(
        parse_int(0), 0, "PUBLISHes per second a client may send; above it, its socket is not read for a while; 0: any"
    ),
    "max_subscriptions_per_client": Key(
        parse_int(0), 0, "subscriptions a client may hold; more are refused (0x97, 3.1.1: 0x80); 0 is no limit"
    ),
    "session.foreign_user": Key(
        parse_choice("clean", "refuse"), "clean",
        "another user connecting with the client id of a user's session: clean (the old session is discarded, the new "
        "client starts clean) or refuse (CONNACK not authorized; a live owner stays connected); docs/security.md",
    ),
    "session.client_id_prefix": Key(
        parse_text, "",
        "a client id must start with this (%u: the user name, e.g. %u/), else CONNACK Client Identifier not valid; "
        "empty: any client id (vmqpy extension)",
    ),
    "retain.max_per_client": Key(
        parse_int(0), 10_000,
        "retained messages one client id may keep set through a node; a retained PUBLISH beyond is refused (5.0: "
        "0x97; 3.1.1: acknowledged, not stored); deleting always works; 0: no limit (vmqpy extension)",
    ),
    "retain.max_bytes_per_client": Key(
        parse_size, 64 << 20,
        "bytes (topic and payload) of the retained messages one client id may keep set through a node; as "
        "retain.max_per_client; 0: no limit (vmqpy extension)",
    ),
    "upgrade_outgoing_qos": Key(
        parse_bool, False, "on: a message goes out at the subscription's QoS even when published at a lower one"
    ),
    "retry_interval": Key(
        parse_duration, 20.0, "3.1.1: an unacknowledged QoS 1/2 PUBLISH or PUBREL is resent after this long; 0: never"
    ),
    "listener.max_connections": Key(
        parse_connection_limit, None, "connections each MQTT listener holds at once; more are closed at once "
        "(unset or infinity: the MQTT sockets the open files limit allows, docs/security.md)"
    ),
    "listener.reuse_port": Key(
        parse_bool, False, "on: the MQTT listeners share their ports with other processes that set it too "
        "(SO_REUSEPORT; the kernel spreads new connections over them): what `vmqpy start --workers N` sets for its "
        "workers (docs/scaling.md)"
    ),
    "listener.max_connections_per_address": Key(
        parse_address_limit, "auto", "MQTT connections one client address (the PROXY header's with proxy_protocol) "
        "holds at once, every listener together; more are closed at once. auto: half the node's MQTT sockets; "
        "infinity: no limit"
    ),
    "listener.max_pending_per_address": Key(
        parse_address_limit, "auto", "of those, sockets still before their CONNECT (tcp, ssl); more are closed at "
        "once. auto: an eighth of the node's MQTT sockets; infinity: no limit"
    ),
    "listener.http.max_connections": Key(
        parse_int(1), 64, "connections each admin API listener (http, https) holds at once; more get 503 and are "
        "closed. Kept out of the MQTT listeners' descriptors"
    ),
    "listener.http.request_timeout": Key(
        parse_positive_duration, 10.0, "an admin API connection is closed when no whole request head arrived this "
        "long after it opened or after its last answer (idle keep-alive, trickled headers)"
    ),
    "allow_register_during_netsplit": Key(parse_bool, False, "accept CONNECT while the cluster is not ready"),
    "allow_publish_during_netsplit": Key(parse_bool, False, "accept PUBLISH while the cluster is not ready"),
    "allow_subscribe_during_netsplit": Key(parse_bool, False, "accept SUBSCRIBE while the cluster is not ready"),
    "allow_unsubscribe_during_netsplit": Key(parse_bool, False, "accept UNSUBSCRIBE while the cluster is not ready"),
    "trade_consistency": Key(parse_bool, False, "on: all four allow_*_during_netsplit on"),
    "cluster.readiness": Key(
        parse_choice("all", "majority"), "all", "ready when every member is reachable (all) or a strict majority"
    ),
    "persistent_session_placement": Key(
        parse_choice("anywhere", "assigned"), "anywhere",
        "assigned: a 5.0 client asking for a persistent session at another node than its client id's assigned "
        "one is sent there (CONNACK 0x9C + Server Reference; docs/deployment.md)",
    ),
    "shared_subscription_policy": Key(
        parse_choice("prefer_local", "local_only", "random"), "prefer_local",
        "which member of a $share group gets a message: prefer_local, local_only or random (docs/cluster.md)",
    ),
    "cluster.detect_timeout": Key(parse_duration, 1.0, "a peer without a heartbeat for this long is unreachable"),
    "subscription.acknowledge": Key(
        parse_choice("cluster", "local"), "cluster",
        "cluster: a SUBACK/UNSUBACK leaves once every reachable member routes by it (or after "
        "subscription.acknowledge_timeout); local: once this node does (vmqpy extension; docs/cluster.md)",
    ),
    "subscription.acknowledge_timeout": Key(
        parse_duration, 5.0,
        "the longest a SUBACK/UNSUBACK waits for the other members to apply its routes; then it leaves anyway",
    ),
    "queue.replicas": Key(
        parse_int(1, 9), 2,
        "nodes holding each persistent session's queue, its owner included; 1: only the owner (docs/replication.md)",
    ),
    "queue.failover_timeout": Key(
        parse_duration, 30.0,
        "a session recreated while its old owner is still a member takes the replicas' copies once that owner has "
        "been unreachable this long (docs/replication.md)",
    ),
    "queue.rebalance_rate": Key(
        parse_int(1, 1_000_000), 1000,
        "persistent sessions per second the queue replicas' rebalancer looks at after a membership change or a "
        "start (vmqpy extension; docs/replication.md)",
    ),
    "queue.write_quorum": Key(
        parse_int(1, 9), None,
        "copies a message needs before its publisher is acknowledged in the consistency modes (default and "
        "maximum: queue.replicas)",
    ),
    "outgoing_clustering_buffer_size": Key(
        parse_int(1024), 10 * 1024 * 1024, "bytes buffered per unreachable peer before forwards are refused"
    ),
    "incoming_clustering_buffer_size": Key(parse_int(1024), 64 * 1024 * 1024, "largest cluster frame accepted, bytes"),
    "metadata.sync_interval": Key(parse_duration, 1.0, "anti-entropy period of the metadata store (with jitter)"),
    "metadata.replication_log": Key(parse_path, None, "replication log file (default: DATA_DIR/replication.log)"),
    "metadata.replication_log.max_size": Key(
        parse_size, 64 << 20,
        "rotate the replication log before it reaches this size (bytes, or 64MB, 1GB); 0: never (docs/operations.md)",
    ),
    "metadata.replication_log.count": Key(
        parse_int(0, 1000), 5,
        "rotated replication logs kept, gzip-compressed (FILE.N.gz, the highest N the newest); 0: none",
    ),
    "metadata.replication_log.values": Key(
        parse_bool, False,
        "log the values of metadata writes (payloads of retained messages); off: their size and sha256 prefix",
    ),
    "systree_enabled": Key(parse_bool, True, "publish the node's metrics as retained messages under $SYS/NODENAME/"),
    "metrics.public": Key(parse_bool, False, "serve GET /metrics (Prometheus) on the admin listener without a key"),
    "status.public": Key(parse_bool, False, "serve the status page's data (/status.json) without an API key"),
    "prometheus_namespace": Key(
        parse_prometheus_namespace, "",
        "prefix of every broker metric GET /metrics gives, joined with _ (vernemq: vernemq_mqtt_publish_received, "
        "as VerneMQ 2.x's default); empty: no prefix, the names of VerneMQ 1.x (docs/operations.md)",
    ),
    "systree_interval": Key(
        parse_milliseconds, 20000, "$SYS publication period, milliseconds as in VerneMQ (or 20s, 500ms); 0: none"
    ),
    "systree_allow_anonymous": Key(
        parse_bool, False, "let clients without a user name subscribe to $SYS topics (off: SUBACK 0x87 / 0x80)"
    ),
    "log.console": Key(
        parse_choice("console", "json", "file", "both", "off"), "console",
        "where log lines go: console (text on stderr), json (on stderr), file (log.file), both, off",
    ),
    "log.console.file": Key(parse_path, None, "the older name of log.file (give one of the two)"),
    "log.console.console.format": Key(
        parse_choice("text", "json"), "text", "VerneMQ 2.x's format of the lines on stderr: json is log.console = json",
    ),
    "log.file": Key(
        parse_path, None, "the log file of log.console = file or both (default: DATA_DIR/console.log)"
    ),
    "log.file.max_size": Key(
        parse_size, 10 << 20, "rotate the log file before it reaches this size (bytes, or 10MB, 1GB); 0: never"
    ),
    "log.file.count": Key(parse_int(1, 1000), 5, "rotated log files kept (FILE.1 the newest .. FILE.<count>)"),
    "log.console.level": Key(
        parse_choice("debug", "info", "warning", "error"), "info", "lowest level logged"
    ),
    "log.connections": Key(
        parse_bool, True,
        "one info line per client connect and disconnect (client connected / client disconnected); off: none",
    ),
}
