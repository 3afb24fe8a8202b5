"""The node's configuration: a vernemq.conf-style file, then environment variables, then flags.

`key = value` lines, `#` comments, key names as in vernemq.conf where they apply. Every key is declared once in
`SCHEMA` (vmqpy.config_schema; the listener keys in vmqpy.listener_keys) with its parser (vmqpy.config_values)
and default; an unknown key or a bad value is refused with the file name and line
number, every problem of the settings at once (`ConfigErrors`). The result is one frozen `Config`, validated
before anything starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from vmqpy import vernemq_conf
from vmqpy.config_schema import SCHEMA as SCHEMA
from vmqpy.config_values import PUBLIC_COOKIES, parse_connection_limit
from vmqpy.config_values import ConfigError as ConfigError
from vmqpy.config_values import ConfigErrors as ConfigErrors
from vmqpy.config_values import Key as Key
from vmqpy.listener_keys import (
    LISTENER_ADDRESS,
    ListenerOption,
    check_listener_options,
    check_tls_listeners,
    listener_key,
    listener_key_names,
    reference_rows,
)
from vmqpy.listener_keys import LISTENER_KINDS as LISTENER_KINDS
from vmqpy.listener_keys import LISTENER_OPTIONS as LISTENER_OPTIONS
from vmqpy.listener_keys import TLS_KINDS as TLS_KINDS

ENV_PREFIX = "VMQPY_"
# Environment variables under the prefix that are not settings: VMQPY_PURE picks the build of the core
# (vmqpy/native.py) when the package is imported, before any configuration is read.
ENV_NOT_SETTINGS: Final = frozenset({"VMQPY_PURE"})
DEFAULT_COOKIE = "vmqpy"  # distributed_cookie's default: public, in every copy of vmqpy

_INLINE_COMMENT = re.compile(r"\s+#.*$")  # `key = value  # note`; a '#' inside a value needs no space before it


@dataclass(frozen=True, slots=True)
class Config:
    """The validated configuration of one node."""

    nodename: str = "vmqpy@127.0.0.1"
    data_dir: Path = Path("./data")
    distributed_cookie: str = DEFAULT_COOKIE  # public: refused with a cluster listener (`default_cookie_refusal`)
    tcp_listeners: tuple[tuple[str, str, int], ...] = (("default", "127.0.0.1", 1883),)
    ssl_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.ssl.NAME: MQTT over TLS
    ws_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.ws.NAME: MQTT over WebSocket
    wss_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.wss.NAME: MQTT over WebSocket over TLS
    http_listener: tuple[str, int] | None = None
    https_listener: tuple[str, int] | None = None  # listener.https.default
    https_certfile: Path | None = None
    https_keyfile: Path | None = None
    cluster_listener: tuple[str, int] | None = None
    cluster_tls_cafile: Path | None = None  # cluster.tls.cafile (with certfile and keyfile: links over TLS)
    cluster_tls_certfile: Path | None = None
    cluster_tls_keyfile: Path | None = None
    allow_anonymous: bool = False
    password_file: Path | None = None
    max_inflight_messages: int = 20
    receive_max_broker: int | None = None
    receive_max_client: int = 65535
    topic_alias_max_client: int = 64
    topic_alias_max_broker: int = 64
    topic_max_depth: int = 10  # most levels of a topic or filter a client may use; 0: no limit
    max_online_messages: int = 1000
    max_offline_messages: int = 1000
    max_queued_bytes: int = 8 * 1024 * 1024  # bytes (payload and topic) a session's queue holds; 0: no bound
    queue_max_stall: float = 5.0  # queue.max_stall: seconds a congested subscriber may hold publishers back; 0: ever
    queue_overflow: str = "queue"  # queue.overflow: queue, drop or disconnect (vmqpy.broker.core.stalls)
    persistent_client_expiration: float | None = None
    max_message_size: int = 1024 * 1024  # 0: MQTT's own limit (256 MB)
    max_client_id_size: int = 65535
    max_keepalive: int = 0
    allow_register_during_netsplit: bool = False
    allow_publish_during_netsplit: bool = False
    allow_subscribe_during_netsplit: bool = False
    allow_unsubscribe_during_netsplit: bool = False
    trade_consistency: bool = False
    readiness: str = "all"
    shared_subscription_policy: str = "prefer_local"
    persistent_session_placement: str = "anywhere"  # or "assigned" (vmqpy.cluster.placement)
    detect_timeout: float = 1.0
    subscription_acknowledge: str = "cluster"  # subscription.acknowledge: cluster or local (docs/cluster.md)
    subscription_acknowledge_timeout: float = 5.0  # subscription.acknowledge_timeout
    cluster_handshake_timeout: float = 10.0  # cluster.handshake_timeout
    cluster_max_pending_links: int = 64  # cluster.max_pending_links (vmqpy.cluster.pending_links)
    cluster_max_pending_links_per_address: int = 8  # cluster.max_pending_links_per_address
    allow_default_cookie: bool = False  # cluster.allow_default_cookie
    cluster_discovery: tuple[str, ...] = ()  # cluster.discovery: NAME@HOST:PORT of peers to join at start-up
    cluster_discovery_interval: float = 1.0  # cluster.discovery_interval
    cluster_discovery_max_interval: float = 30.0  # cluster.discovery_max_interval
    queue_replicas: int = 2  # queue.replicas (vmqpy.replicas)
    queue_write_quorum: int | None = None  # queue.write_quorum; None: queue.replicas
    queue_failover_timeout: float = 30.0  # queue.failover_timeout
    queue_rebalance_rate: int = 1000  # queue.rebalance_rate: sessions per second (vmqpy.replicas.rebalance)
    outgoing_clustering_buffer_size: int = 10 * 1024 * 1024
    incoming_clustering_buffer_size: int = 64 * 1024 * 1024
    metadata_sync_interval: float = 1.0
    replication_log: Path | None = None
    replication_log_max_size: int = 64 << 20  # metadata.replication_log.max_size: rotate before; 0 never
    replication_log_count: int = 5  # metadata.replication_log.count: rotated (compressed) files kept
    replication_log_values: bool = False  # metadata.replication_log.values: values in clear, else size + digest
    systree_enabled: bool = True
    metrics_public: bool = False  # metrics.public
    status_public: bool = False  # status.public
    prometheus_namespace: str = ""  # prometheus_namespace: prefix of the broker's metric names ("" none)
    systree_interval: int = 20000  # milliseconds
    systree_allow_anonymous: bool = False  # anonymous clients may subscribe to $SYS topics
    log_format: str = "console"  # log.console (json also when log.console.console.format = json on the console)
    log_console_format: str = "text"  # log.console.console.format: VerneMQ 2.x's (json: log_format json)
    log_level: str = "info"
    log_file: Path = Path("./data/console.log")  # log.file, or log.console.file (default: DATA_DIR/console.log)
    log_file_max_size: int = 10 << 20  # log.file.max_size: rotate before this many bytes; 0 never
    log_file_count: int = 5  # log.file.count: rotated log files kept
    log_connections: bool = True  # log.connections: the client connected / disconnected lines
    passwd_enabled: bool = True  # plugins.vmq_passwd
    acl_enabled: bool = True  # plugins.vmq_acl
    acl_file: Path | None = None  # acl_file, alias vmq_acl.acl_file
    acl_reload_interval: float = 10.0  # vmq_acl.acl_reload_interval; 0: never
    password_reload_interval: float = 10.0  # vmq_passwd.password_reload_interval; 0: never
    failed_login_delay: float = 1.0  # auth.failed_login_delay
    failed_login_limit: int = 10  # auth.failed_login_limit; 0: no address is blocked
    failed_login_window: float = 60.0  # auth.failed_login_window
    failed_login_block: float = 60.0  # auth.failed_login_block
    failed_login_addresses: int = 10_000  # auth.failed_login_addresses
    hash_workers: int = 1  # auth.hash_workers
    hash_queue: int = 32  # auth.hash_queue
    connect_timeout: float = 10.0  # mqtt.connect_timeout
    connect_max_size: int = 64 * 1024  # mqtt.connect_max_size
    connect_budget: int = 16 * 1024 * 1024  # mqtt.connect_budget
    max_message_rate: int = 0
    max_subscriptions_per_client: int = 0
    session_foreign_user: str = "clean"  # session.foreign_user: clean or refuse (vmqpy.sessions.owners)
    session_client_id_prefix: str = ""  # session.client_id_prefix: "" any; %u the user name
    retain_max_per_client: int = 10_000  # retain.max_per_client; 0: no limit (vmqpy.broker.access.retain_quota)
    retain_max_bytes_per_client: int = 64 << 20  # retain.max_bytes_per_client; 0: no limit
    upgrade_outgoing_qos: bool = False
    retry_interval: float = 20.0
    max_connections: int | None = None  # listener.max_connections; None: no limit
    reuse_port: bool = False  # listener.reuse_port: SO_REUSEPORT on the MQTT listeners (vmqpy.workers)
    # listener.max_connections_per_address, listener.max_pending_per_address: "auto", a number or None (infinity)
    max_connections_per_address: int | str | None = "auto"
    max_pending_per_address: int | str | None = "auto"
    http_max_connections: int = 64  # listener.http.max_connections, each admin listener
    http_request_timeout: float = 10.0  # listener.http.request_timeout
    # (kind, listener name) -> option -> value, the listener options set in the configuration (`listener_option`)
    listener_options: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    # kind -> option -> value, the `listener.KIND.OPTION` keys set (options of every listener of that kind)
    kind_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # the keys with no meaning here, each with where it was set
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Setting:
    key: str
    raw: str
    where: str


def read_file(path: Path, problems: list[str] | None = None) -> list[_Setting]:
    """Read `key = value` lines; a line that is neither blank, a comment nor an assignment is refused: added to
    `problems` when given (the other lines are read), else raised."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the config file is not UTF-8") from None
    settings = []
    malformed = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        stripped = _INLINE_COMMENT.sub("", stripped)
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            malformed.append(f"{path}:{number}: expected 'key = value', got {stripped!r}")
            continue
        settings.append(_Setting(key.strip(), value.strip(), f"{path}:{number}"))
    if malformed and problems is None:
        raise ConfigErrors(malformed)
    if problems is not None:
        problems += malformed
    return settings


def read_env(environ: Mapping[str, str]) -> list[_Setting]:
    """`VMQPY_LISTENER__TCP__DEFAULT=...` -> listener.tcp.default. Unknown names are refused like file keys."""
    settings = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in ENV_NOT_SETTINGS:
            continue
        key = name[len(ENV_PREFIX):].lower().replace("__", ".")
        settings.append(_Setting(key, environ[name], f"environment variable {name}"))
    return settings


def read_flags(assignments: Sequence[str]) -> list[_Setting]:
    """`--set KEY=VALUE` flags; one without `=` is refused."""
    settings = []
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        settings.append(_Setting(key.strip(), value.strip(), f"--set {key.strip()}"))
    return settings


def build(settings: Sequence[_Setting], problems: Sequence[str] = ()) -> Config:
    """Parse and validate settings in order (later ones win) into a Config. Every problem is found before any
    is raised: ConfigErrors names them all (`problems`, those found while reading, first), each with where."""
    found = list(problems)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    listeners: dict[tuple[str, str], tuple[str, int]] = {}
    options: dict[tuple[str, str], dict[str, Any]] = {}
    kind_options: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for setting in settings:
        key = vernemq_conf.ALIASES.get(setting.key, setting.key)
        spec: Key | ListenerOption | None = SCHEMA.get(key)
        listener = None
        try:
            if spec is None and _accept_foreign(setting, ignored):
                continue
        except ConfigError as exc:
            found.append(str(exc))
            continue
        if spec is None:
            listener = listener_key(key)
            if listener is None:
                found.append(str(_unknown_key(setting)))
                continue
            spec = LISTENER_ADDRESS if listener[2] is None else LISTENER_OPTIONS[listener[2]]
        try:
            parsed = spec.parse(vernemq_conf.vernemq_spelling(setting.key, setting.raw))
        except ValueError as exc:
            found.append(f"{setting.where}: bad value for {setting.key}: {exc}")
            continue
        if listener is None:
            values[key] = parsed
        elif listener[1] is None:
            kind_options.setdefault(listener[0], {})[str(listener[2])] = parsed
        elif listener[2] is None:
            listeners[(listener[0], listener[1])] = parsed
        else:
            options.setdefault((listener[0], listener[1]), {})[listener[2]] = parsed
        sources[key] = setting.where

    def get(key: str) -> Any:
        return values.get(key, SCHEMA[key].default)

    if not listeners:
        listeners[("tcp", "default")] = ("127.0.0.1", 1883)
    found += check_listener_options(listeners, options, sources)
    found += check_tls_listeners(listeners, options, kind_options, sources)
    if values.get("listener.https.default") is not None:
        for key in ("listener.https.certfile", "listener.https.keyfile"):
            if values.get(key) is None:
                found.append(f"{sources['listener.https.default']}: listener.https.default needs {key}")
    if values.get("cluster.discovery") and values.get("listener.vmq.clustering") is None:
        found.append(f"{sources['cluster.discovery']}: cluster.discovery needs listener.vmq.clustering (the node "
                     "joins its peers through its cluster listener)")
    log_file: Path | None = None
    log_format = get("log.console")
    try:
        log_file = _log_file(values, sources)
        log_format = _log_format(get("log.console"), get("log.console.console.format"), sources)
    except ConfigError as exc:
        found.append(str(exc))
    if found:
        raise ConfigErrors(sorted(found, key=_position))

    def of_kind(kind: str) -> tuple[tuple[str, str, int], ...]:
        return tuple((name, host, port) for (k, name), (host, port) in sorted(listeners.items()) if k == kind)

    config = Config(
        nodename=get("nodename"),
        data_dir=get("platform_data_dir"),
        distributed_cookie=get("distributed_cookie"),
        tcp_listeners=of_kind("tcp"),
        ssl_listeners=of_kind("ssl"),
        ws_listeners=of_kind("ws"),
        wss_listeners=of_kind("wss"),
        http_listener=get("listener.http.default"),
        https_listener=get("listener.https.default"),
        https_certfile=get("listener.https.certfile"),
        https_keyfile=get("listener.https.keyfile"),
        cluster_listener=get("listener.vmq.clustering"),
        cluster_tls_cafile=get("cluster.tls.cafile"),
        cluster_tls_certfile=get("cluster.tls.certfile"),
        cluster_tls_keyfile=get("cluster.tls.keyfile"),
        allow_anonymous=get("allow_anonymous"),
        password_file=get("password_file"),
        max_inflight_messages=get("max_inflight_messages"),
        receive_max_broker=get("receive_max_broker"),
        receive_max_client=get("receive_max_client"),
        topic_alias_max_client=get("topic_alias_max_client"),
        topic_alias_max_broker=get("topic_alias_max_broker"),
        topic_max_depth=get("topic_max_depth"),
        max_online_messages=get("max_online_messages"),
        max_offline_messages=get("max_offline_messages"),
        max_queued_bytes=get("max_queued_bytes"),
        queue_max_stall=get("queue.max_stall"),
        queue_overflow=get("queue.overflow"),
        persistent_client_expiration=get("persistent_client_expiration"),
        max_message_size=get("max_message_size"),
        max_client_id_size=get("max_client_id_size"),
        max_keepalive=get("max_keepalive"),
        allow_register_during_netsplit=get("allow_register_during_netsplit") or get("trade_consistency"),
        allow_publish_during_netsplit=get("allow_publish_during_netsplit") or get("trade_consistency"),
        allow_subscribe_during_netsplit=get("allow_subscribe_during_netsplit") or get("trade_consistency"),
        allow_unsubscribe_during_netsplit=get("allow_unsubscribe_during_netsplit") or get("trade_consistency"),
        trade_consistency=get("trade_consistency"),
        readiness=get("cluster.readiness"),
        shared_subscription_policy=get("shared_subscription_policy"),
        persistent_session_placement=get("persistent_session_placement"),
        detect_timeout=get("cluster.detect_timeout"),
        subscription_acknowledge=get("subscription.acknowledge"),
        subscription_acknowledge_timeout=get("subscription.acknowledge_timeout"),
        cluster_handshake_timeout=get("cluster.handshake_timeout"),
        cluster_max_pending_links=get("cluster.max_pending_links"),
        cluster_max_pending_links_per_address=get("cluster.max_pending_links_per_address"),
        allow_default_cookie=get("cluster.allow_default_cookie"),
        cluster_discovery=get("cluster.discovery") or (),
        cluster_discovery_interval=get("cluster.discovery_interval"),
        cluster_discovery_max_interval=get("cluster.discovery_max_interval"),
        queue_replicas=get("queue.replicas"),
        queue_write_quorum=get("queue.write_quorum"),
        queue_failover_timeout=get("queue.failover_timeout"),
        queue_rebalance_rate=get("queue.rebalance_rate"),
        outgoing_clustering_buffer_size=get("outgoing_clustering_buffer_size"),
        incoming_clustering_buffer_size=get("incoming_clustering_buffer_size"),
        metadata_sync_interval=get("metadata.sync_interval"),
        replication_log=get("metadata.replication_log"),
        replication_log_max_size=get("metadata.replication_log.max_size"),
        replication_log_count=get("metadata.replication_log.count"),
        replication_log_values=get("metadata.replication_log.values"),
        systree_enabled=get("systree_enabled"),
        metrics_public=get("metrics.public"),
        status_public=get("status.public"),
        prometheus_namespace=get("prometheus_namespace"),
        systree_interval=get("systree_interval"),
        systree_allow_anonymous=get("systree_allow_anonymous"),
        log_format=log_format,
        log_console_format=get("log.console.console.format"),
        log_level=get("log.console.level"),
        log_file=log_file or get("platform_data_dir") / "console.log",
        log_file_max_size=get("log.file.max_size"),
        log_file_count=get("log.file.count"),
        log_connections=get("log.connections"),
        passwd_enabled=get("plugins.vmq_passwd"),
        acl_enabled=get("plugins.vmq_acl"),
        acl_file=get("acl_file"),
        acl_reload_interval=get("vmq_acl.acl_reload_interval"),
        password_reload_interval=get("vmq_passwd.password_reload_interval"),
        failed_login_delay=get("auth.failed_login_delay"),
        failed_login_limit=get("auth.failed_login_limit"),
        failed_login_window=get("auth.failed_login_window"),
        failed_login_block=get("auth.failed_login_block"),
        failed_login_addresses=get("auth.failed_login_addresses"),
        hash_workers=get("auth.hash_workers"),
        hash_queue=get("auth.hash_queue"),
        connect_timeout=get("mqtt.connect_timeout"),
        connect_max_size=get("mqtt.connect_max_size"),
        connect_budget=get("mqtt.connect_budget"),
        max_message_rate=get("max_message_rate"),
        max_subscriptions_per_client=get("max_subscriptions_per_client"),
        session_foreign_user=get("session.foreign_user"),
        session_client_id_prefix=get("session.client_id_prefix"),
        retain_max_per_client=get("retain.max_per_client"),
        retain_max_bytes_per_client=get("retain.max_bytes_per_client"),
        upgrade_outgoing_qos=get("upgrade_outgoing_qos"),
        retry_interval=get("retry_interval"),
        max_connections=get("listener.max_connections"),
        reuse_port=get("listener.reuse_port"),
        max_connections_per_address=get("listener.max_connections_per_address"),
        max_pending_per_address=get("listener.max_pending_per_address"),
        http_max_connections=get("listener.http.max_connections"),
        http_request_timeout=get("listener.http.request_timeout"),
        listener_options=options,
        kind_options=kind_options,
        ignored=tuple(ignored),
        sources=sources,
    )
    return config


_WHERE = re.compile(r"^(.*?):(\d+): ")


def _position(problem: str) -> tuple[int, str, int]:
    """Where a problem was found, to report a file's problems in the order of its lines (the environment's and
    the flags' after them, in the order found: the sort is stable)."""
    match = _WHERE.match(problem)
    return (0, match.group(1), int(match.group(2))) if match is not None else (1, "", 0)


def _log_format(where: str, console_format: str, sources: Mapping[str, str]) -> str:
    """log.console, with VerneMQ 2.x's `log.console.console.format = json` read as our `json` (JSON lines on
    stderr). With log.console = both the one format of vmqpy's lines (text) would have to differ between
    stderr and the file: refused."""
    if console_format == "text" or where in ("json", "file", "off"):
        return where
    if where == "console":
        return "json"
    raise ConfigError(f"{sources['log.console.console.format']}: log.console.console.format = json with "
                      f"log.console = both: vmqpy writes the same text lines to stderr and to the file; for JSON "
                      f"lines on stderr set log.console = json")


def _log_file(values: dict[str, Any], sources: dict[str, str]) -> Path | None:
    """`log.file`, or its older name `log.console.file`; both naming different files is refused."""
    new, old = values.get("log.file"), values.get("log.console.file")
    if new is not None and old is not None and Path(new) != Path(old):
        raise ConfigError(f"{sources['log.file']}: log.file = {new} and log.console.file = {old} "
                          f"({sources['log.console.file']}) name two files: give one of them (log.console.file "
                          f"is the older name of log.file)")
    return new if new is not None else old


def _accept_foreign(setting: _Setting, ignored: list[str]) -> bool:
    """Whether `setting` is a VerneMQ key vmqpy takes without having it (vmqpy.vernemq_conf): a key with no
    meaning here (added to `ignored`, with where it was set) or a key at the one value that is vmqpy's behaviour
    (any other value is refused). A near miss of a known key is not taken, however like an ignored one it is."""
    key = setting.key
    if vernemq_conf.only_value_rule(key) is not None:
        refusal = vernemq_conf.only_value_refusal(key, setting.raw)
        if refusal is not None:
            raise ConfigError(f"{setting.where}: bad value for {key}: {refusal}")
        return True
    if vernemq_conf.ignored_because(key) is None or vernemq_conf.near_miss(key, _known_keys(key)) is not None:
        return False
    ignored.append(f"{key} ({setting.where})")
    return True


def _known_keys(key: str) -> list[str]:
    """Every key a misspelled `key` may have meant: SCHEMA's, the VerneMQ ones taken, and the listener keys."""
    exact = [rule.pattern for rule in vernemq_conf.ONLY_VALUE if "*" not in rule.pattern]
    return [*SCHEMA, *vernemq_conf.ALIASES, *exact, *listener_key_names(key)]


def _unknown_key(setting: _Setting) -> ConfigError:
    """The refusal of an unknown key, naming the known key nearest to it."""
    option = setting.key.rpartition(".")[2]
    if setting.key.startswith("listener.") and option in vernemq_conf.LISTENER_OPTION_NAMES:
        return ConfigError(f"{setting.where}: unknown key {setting.key!r}: VerneMQ's listener option {option} is "
                           f"not supported by vmqpy (docs/configuration.md, 'Starting from a vernemq.conf')")
    near = vernemq_conf.suggestion(setting.key, _known_keys(setting.key))
    hint = f" (did you mean {near!r}?)" if near is not None else ""
    return ConfigError(f"{setting.where}: unknown key {setting.key!r}{hint}")


def listener_option(config: Config, listener: str, option: str, kind: str = "tcp") -> Any:
    """The value in force of `listener.KIND.LISTENER.OPTION`: the listener's own, else its kind's
    (`listener.KIND.OPTION`), else the node-wide key's, else the option's default."""
    own = config.listener_options.get((kind, listener), {})
    if option in own:
        return own[option]
    spec = LISTENER_OPTIONS[option]
    of_kind = config.kind_options.get(kind, {})
    if spec.kind_wide and option in of_kind:
        return of_kind[option]
    return spec.default if spec.node_wide is None else getattr(config, field_of(spec.node_wide))


def mqtt_listeners(config: Config) -> list[tuple[str, str, str, int]]:
    """Every MQTT listener as (kind, name, host, port), kinds in LISTENER_KINDS order."""
    by_kind = {"tcp": config.tcp_listeners, "ssl": config.ssl_listeners, "ws": config.ws_listeners,
               "wss": config.wss_listeners}
    return [(kind, name, host, port) for kind in LISTENER_KINDS for name, host, port in by_kind[kind]]


def password_file_in_force(config: Config) -> Path | None:
    """The password file CONNECTs are checked against: none when plugins.vmq_passwd is off."""
    return config.password_file if config.passwd_enabled else None


def acl_file_in_force(config: Config) -> Path | None:
    """The ACL file enforced: none when plugins.vmq_acl is off (or no acl_file is set)."""
    return config.acl_file if config.acl_enabled else None


def load(path: Path | None, environ: Mapping[str, str] | None = None, flags: Sequence[str] = ()) -> Config:
    """The node's Config: the file (if any), then `VMQPY_*` environment variables, then `--set` flags."""
    settings: list[_Setting] = []
    problems: list[str] = []
    if path is not None:
        settings += read_file(path, problems)
    settings += read_env(os.environ if environ is None else environ)
    settings += read_flags(flags)
    return build(settings, problems)


_FIELD_OF = {
    "platform_data_dir": "data_dir", "listener.http.default": "http_listener",
    "listener.https.default": "https_listener", "listener.https.certfile": "https_certfile",
    "listener.https.keyfile": "https_keyfile",
    "listener.vmq.clustering": "cluster_listener", "cluster.detect_timeout": "detect_timeout",
    "cluster.readiness": "readiness",
    "subscription.acknowledge": "subscription_acknowledge",
    "subscription.acknowledge_timeout": "subscription_acknowledge_timeout",
    "queue.replicas": "queue_replicas", "queue.write_quorum": "queue_write_quorum",
    "queue.failover_timeout": "queue_failover_timeout", "queue.rebalance_rate": "queue_rebalance_rate",
    "queue.max_stall": "queue_max_stall", "queue.overflow": "queue_overflow",
    "metadata.sync_interval": "metadata_sync_interval", "metadata.replication_log": "replication_log",
    "metadata.replication_log.max_size": "replication_log_max_size",
    "metadata.replication_log.count": "replication_log_count",
    "metadata.replication_log.values": "replication_log_values",
    "metrics.public": "metrics_public", "status.public": "status_public",
    "prometheus_namespace": "prometheus_namespace",
    "log.console": "log_format", "log.console.level": "log_level", "log.console.file": "log_file",
    "log.console.console.format": "log_console_format",
    "log.file": "log_file", "log.file.max_size": "log_file_max_size", "log.file.count": "log_file_count",
    "log.connections": "log_connections",
    "plugins.vmq_passwd": "passwd_enabled", "plugins.vmq_acl": "acl_enabled",
    "vmq_acl.acl_reload_interval": "acl_reload_interval",
    "vmq_passwd.password_reload_interval": "password_reload_interval", "auth.failed_login_delay": "failed_login_delay",
    "auth.failed_login_limit": "failed_login_limit", "auth.failed_login_window": "failed_login_window",
    "auth.failed_login_block": "failed_login_block", "auth.failed_login_addresses": "failed_login_addresses",
    "auth.hash_workers": "hash_workers", "auth.hash_queue": "hash_queue",
    "listener.max_connections": "max_connections", "mqtt.connect_timeout": "connect_timeout",
    "listener.reuse_port": "reuse_port",
    "listener.max_connections_per_address": "max_connections_per_address",
    "listener.max_pending_per_address": "max_pending_per_address",
    "listener.http.max_connections": "http_max_connections", "listener.http.request_timeout": "http_request_timeout",
    "cluster.tls.cafile": "cluster_tls_cafile", "cluster.tls.certfile": "cluster_tls_certfile",
    "cluster.tls.keyfile": "cluster_tls_keyfile",
    "session.foreign_user": "session_foreign_user", "session.client_id_prefix": "session_client_id_prefix",
    "retain.max_per_client": "retain_max_per_client", "retain.max_bytes_per_client": "retain_max_bytes_per_client",
    "cluster.handshake_timeout": "cluster_handshake_timeout", "cluster.allow_default_cookie": "allow_default_cookie",
    "cluster.max_pending_links": "cluster_max_pending_links",
    "cluster.max_pending_links_per_address": "cluster_max_pending_links_per_address",
    "cluster.discovery": "cluster_discovery", "cluster.discovery_interval": "cluster_discovery_interval",
    "cluster.discovery_max_interval": "cluster_discovery_max_interval",
    "mqtt.connect_max_size": "connect_max_size", "mqtt.connect_budget": "connect_budget",
}


def public_cookie(config: Config) -> bool:
    """Whether the cookie in force is a public default (vmqpy's or VerneMQ's)."""
    return config.distributed_cookie in PUBLIC_COOKIES


def default_cookie_refusal(config: Config) -> str | None:
    """Why `vmqpy start` refuses `config`: a node with a cluster listener and the public default cookie, unless
    cluster.allow_default_cookie says so (None: it starts)."""
    if config.cluster_listener is None or not public_cookie(config) or config.allow_default_cookie:
        return None
    return (f"listener.vmq.clustering is set but distributed_cookie is the public default "
            f"{config.distributed_cookie!r}: anyone who can reach "
            "the cluster port could join; set distributed_cookie to a long random secret shared by the cluster "
            "(at least 10 characters), or cluster.allow_default_cookie = on for a throwaway test cluster")


def field_of(key: str) -> str:
    """The Config field that holds a configuration key."""
    return _FIELD_OF.get(key, key)


SECRET_KEYS = frozenset({"distributed_cookie"})


def value_of(config: Config, key: str) -> Any:
    """The value in force for a configuration key (secrets are masked)."""
    if key in SECRET_KEYS:
        return "********"
    value = getattr(config, field_of(key))
    if key == "cluster.discovery":  # a list of peers, as the file writes it (not an address pair)
        return ",".join(value)
    if isinstance(value, tuple) and len(value) == 2:
        return f"{value[0]}:{value[1]}"
    return value


def reference() -> str:
    """A markdown table of every key, for docs and `vmqpy config-reference`."""
    lines = ["| key | default | meaning |", "|---|---|---|", *reference_rows()]
    for key, spec in SCHEMA.items():
        default = "never" if spec.default is None and "expiration" in key else spec.default
        if default is None and spec.parse is parse_connection_limit:
            default = "infinity"
        if isinstance(default, bool):
            default = "on" if default else "off"
        if isinstance(default, tuple):
            default = f"{default[0]}:{default[1]}"
        lines.append(f"| {key} | {'' if default is None else default} | {spec.doc} |")
    return "\n".join(lines)
