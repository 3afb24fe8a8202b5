"""The node's configuration: a vernemq.conf-style file, then environment variables, then flags.

`key = value` lines, `#` comments, key names as in vernemq.conf where they apply. Every key is declared once in
`SCHEMA` with its parser and default; an unknown key or a bad value is refused with the file name and line
number. The result is one frozen `Config`, validated before anything starts.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vmqpy import vernemq_conf

ENV_PREFIX = "VMQPY_"


class ConfigError(Exception):
    """A configuration that cannot be used; the message names where (file:line, env var or flag)."""


# ---------------------------------------------------------------------------------------------- value parsers


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


def parse_int(minimum: int = 0, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            upper = "" if maximum is None else f" and {maximum}"
            raise ValueError(f"expected a number between {minimum}{upper}, got {value}")
        return value

    return parse


_DURATION = re.compile(r"^(\d+)\s*(ms|s|m|h|d|w)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration_or_never(text: str) -> float | None:
    """`never` -> None; `10s`, `30m`, `1h`, `1d`, `1w`, `250ms` or a bare number of seconds -> seconds."""
    stripped = text.strip().lower()
    if stripped == "never":
        return None
    return parse_duration(stripped)


def parse_duration(text: str) -> float:
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise ValueError(f"expected a duration like 10s, 30m, 1h, 1d or 1w, got {text!r}")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def parse_milliseconds(text: str) -> int:
    """A bare number of milliseconds (VerneMQ's `systree_interval = 20000`), or a duration with its unit
    (`20s`, `250ms`) -> whole milliseconds."""
    stripped = text.strip().lower()
    if stripped.isdigit():
        return int(stripped)
    return round(parse_duration(stripped) * 1000)


def parse_address(text: str) -> tuple[str, int]:
    """`127.0.0.1:1883` -> ("127.0.0.1", 1883). IPv4 or [IPv6]:port."""
    stripped = text.strip()
    match = re.match(r"^\[([^\]]+)\]:(\d+)$", stripped) or re.match(r"^([^:]+):(\d+)$", stripped)
    if not match:
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:1883, got {text!r}")
    host, port_text = match.group(1), match.group(2)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError(f"expected an IP address (or localhost) before the port, got {host!r}") from None
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be between 0 and 65535, got {port}")
    return host, port


def parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def parse_nodename(text: str) -> str:
    value = text.strip()
    if not re.match(r"^[A-Za-z0-9_.-]+@[A-Za-z0-9_.:-]+$", value):
        raise ValueError(f"expected NAME@HOST such as vmqpy@127.0.0.1, got {text!r}")
    return value


def parse_text(text: str) -> str:
    return text.strip()


def parse_path(text: str) -> Path:
    if not text.strip():
        raise ValueError("expected a path, got nothing")
    return Path(text.strip())


def parse_connection_limit(text: str) -> int | None:
    """`infinity` -> None (no limit); otherwise a whole number of connections, at least 1."""
    if text.strip().lower() == "infinity":
        return None
    return parse_int(1)(text)


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: how to parse it, its default (already parsed) and a line of documentation."""

    parse: Callable[[str], Any]
    default: Any
    doc: str


SCHEMA: Mapping[str, Key] = {
    "nodename": Key(parse_nodename, "vmqpy@127.0.0.1", "the node's name, NAME@HOST"),
    "platform_data_dir": Key(parse_path, Path("./data"), "the node's data directory (SQLite files, logs)"),
    "distributed_cookie": Key(parse_text, "vmqpy", "shared secret of the cluster's node links"),
    "listener.http.default": Key(parse_address, None, "HTTP admin API address (no API when unset)"),
    "listener.https.default": Key(
        parse_address, None, "HTTPS admin API address (with listener.https.certfile and keyfile; docs/security.md)"
    ),
    "listener.https.certfile": Key(parse_path, None, "certificate chain (PEM) of the HTTPS admin API"),
    "listener.https.keyfile": Key(parse_path, None, "private key (PEM) of listener.https.certfile"),
    "listener.vmq.clustering": Key(parse_address, None, "cluster listener address (a single node when unset)"),
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
    "max_online_messages": Key(parse_int(1), 1000, "queued messages of an online client beyond the window"),
    "max_offline_messages": Key(parse_int(0), 1000, "queued messages of an offline persistent session"),
    "persistent_client_expiration": Key(
        parse_duration_or_never, None, "how long an offline 3.1.1 persistent session is kept (never, 1h, 1d, ...)"
    ),
    "max_message_size": Key(parse_int(0), 0, "largest packet accepted, bytes; 0 is unlimited"),
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
    "upgrade_outgoing_qos": Key(
        parse_bool, False, "on: a message goes out at the subscription's QoS even when published at a lower one"
    ),
    "retry_interval": Key(
        parse_duration, 20.0, "3.1.1: an unacknowledged QoS 1/2 PUBLISH or PUBREL is resent after this long; 0: never"
    ),
    "listener.max_connections": Key(
        parse_connection_limit, None, "connections each MQTT listener holds at once; more are closed at once"
    ),
    "allow_register_during_netsplit": Key(parse_bool, False, "accept CONNECT while the cluster is not ready"),
    "allow_publish_during_netsplit": Key(parse_bool, False, "accept PUBLISH while the cluster is not ready"),
    "allow_subscribe_during_netsplit": Key(parse_bool, False, "accept SUBSCRIBE while the cluster is not ready"),
    "allow_unsubscribe_during_netsplit": Key(parse_bool, False, "accept UNSUBSCRIBE while the cluster is not ready"),
    "trade_consistency": Key(parse_bool, False, "on: all four allow_*_during_netsplit on"),
    "cluster.readiness": Key(
        parse_choice("all", "majority"), "all", "ready when every member is reachable (all) or a strict majority"
    ),
    "shared_subscription_policy": Key(
        parse_choice("prefer_local", "local_only", "random"), "prefer_local",
        "which member of a $share group gets a message: prefer_local, local_only or random (docs/cluster.md)",
    ),
    "cluster.detect_timeout": Key(parse_duration, 1.0, "a peer without a heartbeat for this long is unreachable"),
    "outgoing_clustering_buffer_size": Key(
        parse_int(1024), 10 * 1024 * 1024, "bytes buffered per unreachable peer before forwards are refused"
    ),
    "incoming_clustering_buffer_size": Key(parse_int(1024), 64 * 1024 * 1024, "largest cluster frame accepted, bytes"),
    "metadata.sync_interval": Key(parse_duration, 1.0, "anti-entropy period of the metadata store (with jitter)"),
    "metadata.replication_log": Key(parse_path, None, "replication log file (default: DATA_DIR/replication.log)"),
    "systree_enabled": Key(parse_bool, True, "publish the node's metrics as retained messages under $SYS/NODENAME/"),
    "metrics.public": Key(parse_bool, False, "serve GET /metrics (Prometheus) on the admin listener without a key"),
    "status.public": Key(parse_bool, False, "serve the status page's data (/status.json) without an API key"),
    "systree_interval": Key(
        parse_milliseconds, 20000, "$SYS publication period, milliseconds as in VerneMQ (or 20s, 500ms); 0: none"
    ),
    "log.console": Key(
        parse_choice("console", "json", "file", "both", "off"), "console",
        "where log lines go: console (text on stderr), json (on stderr), file (log.console.file), both, off",
    ),
    "log.console.file": Key(
        parse_path, None, "the log file of log.console = file or both (default: DATA_DIR/console.log)"
    ),
    "log.console.level": Key(
        parse_choice("debug", "info", "warning", "error"), "info", "lowest level logged"
    ),
}

_INLINE_COMMENT = re.compile(r"\s+#.*$")  # `key = value  # note`; a '#' inside a value needs no space before it
# MQTT listeners: plain TCP, TLS (ssl), WebSocket (ws) and WebSocket over TLS (wss), as VerneMQ names them
LISTENER_KINDS = ("tcp", "ssl", "ws", "wss")
TLS_KINDS = ("ssl", "wss")
_LISTENER = re.compile(r"^listener\.(tcp|ssl|ws|wss)\.([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?$")  # KIND, NAME, OPTION
_LISTENER_ADDRESS = Key(parse_address, ("127.0.0.1", 1883), "MQTT listener")


@dataclass(frozen=True, slots=True)
class ListenerOption:
    """A key `listener.KIND.NAME.OPTION` of one MQTT listener of a kind in `kinds`. Unset, the listener has the
    value of `listener.KIND.OPTION` when the option is `kind_wide` and that key is set, else of the node-wide key
    `node_wide` when there is one, else `default`."""

    parse: Callable[[str], Any]
    doc: str
    node_wide: str | None = None
    default: Any = None
    kinds: tuple[str, ...] = LISTENER_KINDS
    kind_wide: bool = False


LISTENER_OPTIONS: Mapping[str, ListenerOption] = {
    "max_connections": ListenerOption(
        parse_connection_limit, "connections this listener holds at once (infinity: no limit)",
        node_wide="listener.max_connections",
    ),
    "proxy_protocol": ListenerOption(
        parse_bool, "on: every connection starts with a PROXY protocol v1/v2 header (docs/load-balancing.md)",
        default=False, kinds=("tcp",), kind_wide=True,
    ),
    "cafile": ListenerOption(
        parse_path, "CA certificates (PEM) that client certificates are verified against", kinds=TLS_KINDS,
        kind_wide=True,
    ),
    "certfile": ListenerOption(
        parse_path, "the listener's certificate chain (PEM), required", kinds=TLS_KINDS, kind_wide=True
    ),
    "keyfile": ListenerOption(parse_path, "the private key of certfile (PEM), required", kinds=TLS_KINDS,
                              kind_wide=True),
    "require_certificate": ListenerOption(
        parse_bool, "on: a client without a certificate signed by cafile is refused (mutual TLS)", default=False,
        kinds=TLS_KINDS, kind_wide=True,
    ),
    "use_identity_as_username": ListenerOption(
        parse_bool, "on: the CN of the client certificate is the user name (the certificate authenticates)",
        default=False, kinds=TLS_KINDS, kind_wide=True,
    ),
    "tls_version": ListenerOption(
        parse_choice("tlsv1.2", "tlsv1.3"), "the lowest TLS version accepted", default="tlsv1.2",
        kinds=TLS_KINDS, kind_wide=True,
    ),
}


@dataclass(frozen=True, slots=True)
class Config:
    """The validated configuration of one node."""

    nodename: str = "vmqpy@127.0.0.1"
    data_dir: Path = Path("./data")
    distributed_cookie: str = "vmqpy"
    tcp_listeners: tuple[tuple[str, str, int], ...] = (("default", "127.0.0.1", 1883),)
    ssl_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.ssl.NAME: MQTT over TLS
    ws_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.ws.NAME: MQTT over WebSocket
    wss_listeners: tuple[tuple[str, str, int], ...] = ()  # listener.wss.NAME: MQTT over WebSocket over TLS
    http_listener: tuple[str, int] | None = None
    https_listener: tuple[str, int] | None = None  # listener.https.default
    https_certfile: Path | None = None
    https_keyfile: Path | None = None
    cluster_listener: tuple[str, int] | None = None
    allow_anonymous: bool = False
    password_file: Path | None = None
    max_inflight_messages: int = 20
    receive_max_broker: int | None = None
    receive_max_client: int = 65535
    topic_alias_max_client: int = 64
    topic_alias_max_broker: int = 64
    max_online_messages: int = 1000
    max_offline_messages: int = 1000
    persistent_client_expiration: float | None = None
    max_message_size: int = 0
    max_client_id_size: int = 65535
    max_keepalive: int = 0
    allow_register_during_netsplit: bool = False
    allow_publish_during_netsplit: bool = False
    allow_subscribe_during_netsplit: bool = False
    allow_unsubscribe_during_netsplit: bool = False
    trade_consistency: bool = False
    readiness: str = "all"
    shared_subscription_policy: str = "prefer_local"
    detect_timeout: float = 1.0
    outgoing_clustering_buffer_size: int = 10 * 1024 * 1024
    incoming_clustering_buffer_size: int = 64 * 1024 * 1024
    metadata_sync_interval: float = 1.0
    replication_log: Path | None = None
    systree_enabled: bool = True
    metrics_public: bool = False  # metrics.public
    status_public: bool = False  # status.public
    systree_interval: int = 20000  # milliseconds
    log_format: str = "console"
    log_level: str = "info"
    log_file: Path = Path("./data/console.log")  # log.console.file (default: DATA_DIR/console.log)
    passwd_enabled: bool = True  # plugins.vmq_passwd
    acl_enabled: bool = True  # plugins.vmq_acl
    acl_file: Path | None = None  # acl_file, alias vmq_acl.acl_file
    acl_reload_interval: float = 10.0  # vmq_acl.acl_reload_interval; 0: never
    password_reload_interval: float = 10.0  # vmq_passwd.password_reload_interval; 0: never
    failed_login_delay: float = 1.0  # auth.failed_login_delay
    max_message_rate: int = 0
    max_subscriptions_per_client: int = 0
    upgrade_outgoing_qos: bool = False
    retry_interval: float = 20.0
    max_connections: int | None = None  # listener.max_connections; None: no limit
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


def read_file(path: Path) -> list[_Setting]:
    """Read `key = value` lines; a line that is neither blank, a comment nor an assignment is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the config file is not UTF-8") from None
    settings = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        stripped = _INLINE_COMMENT.sub("", stripped)
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{path}:{number}: expected 'key = value', got {stripped!r}")
        settings.append(_Setting(key.strip(), value.strip(), f"{path}:{number}"))
    return settings


def read_env(environ: Mapping[str, str]) -> list[_Setting]:
    """`VMQPY_LISTENER__TCP__DEFAULT=...` -> listener.tcp.default. Unknown names are refused like file keys."""
    settings = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX):].lower().replace("__", ".")
        settings.append(_Setting(key, environ[name], f"environment variable {name}"))
    return settings


def read_flags(assignments: Sequence[str]) -> list[_Setting]:
    settings = []
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        settings.append(_Setting(key.strip(), value.strip(), f"--set {key.strip()}"))
    return settings


def build(settings: Sequence[_Setting]) -> Config:
    """Parse and validate settings in order (later ones win) into a Config."""
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
        if spec is None and _accept_foreign(setting, ignored):
            continue
        if spec is None:
            listener = _listener_key(key)
            if listener is None:
                raise _unknown_key(setting)
            spec = _LISTENER_ADDRESS if listener[2] is None else LISTENER_OPTIONS[listener[2]]
        try:
            parsed = spec.parse(setting.raw)
        except ValueError as exc:
            raise ConfigError(f"{setting.where}: bad value for {setting.key}: {exc}") from None
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
    _check_listener_options(listeners, options, sources)
    _check_tls_listeners(listeners, options, kind_options)
    if values.get("listener.https.default") is not None:
        for key in ("listener.https.certfile", "listener.https.keyfile"):
            if values.get(key) is None:
                raise ConfigError(f"{sources['listener.https.default']}: listener.https.default needs {key}")

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
        allow_anonymous=get("allow_anonymous"),
        password_file=get("password_file"),
        max_inflight_messages=get("max_inflight_messages"),
        receive_max_broker=get("receive_max_broker"),
        receive_max_client=get("receive_max_client"),
        topic_alias_max_client=get("topic_alias_max_client"),
        topic_alias_max_broker=get("topic_alias_max_broker"),
        max_online_messages=get("max_online_messages"),
        max_offline_messages=get("max_offline_messages"),
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
        detect_timeout=get("cluster.detect_timeout"),
        outgoing_clustering_buffer_size=get("outgoing_clustering_buffer_size"),
        incoming_clustering_buffer_size=get("incoming_clustering_buffer_size"),
        metadata_sync_interval=get("metadata.sync_interval"),
        replication_log=get("metadata.replication_log"),
        systree_enabled=get("systree_enabled"),
        metrics_public=get("metrics.public"),
        status_public=get("status.public"),
        systree_interval=get("systree_interval"),
        log_format=get("log.console"),
        log_level=get("log.console.level"),
        log_file=get("log.console.file") or get("platform_data_dir") / "console.log",
        passwd_enabled=get("plugins.vmq_passwd"),
        acl_enabled=get("plugins.vmq_acl"),
        acl_file=get("acl_file"),
        acl_reload_interval=get("vmq_acl.acl_reload_interval"),
        password_reload_interval=get("vmq_passwd.password_reload_interval"),
        failed_login_delay=get("auth.failed_login_delay"),
        max_message_rate=get("max_message_rate"),
        max_subscriptions_per_client=get("max_subscriptions_per_client"),
        upgrade_outgoing_qos=get("upgrade_outgoing_qos"),
        retry_interval=get("retry_interval"),
        max_connections=get("listener.max_connections"),
        listener_options=options,
        kind_options=kind_options,
        ignored=tuple(ignored),
        sources=sources,
    )
    return config


def _accept_foreign(setting: _Setting, ignored: list[str]) -> bool:
    """Whether `setting` is a VerneMQ key vmqpy takes without having it (vmqpy.vernemq_conf): a key with no
    meaning here (added to `ignored`, with where it was set) or a key at the one value that is vmqpy's behaviour
    (any other value is refused). A near miss of a known key is not taken, however like an ignored one it is."""
    key = setting.key
    if key in vernemq_conf.ONLY_VALUE:
        refusal = vernemq_conf.only_value_refusal(key, setting.raw)
        if refusal is not None:
            raise ConfigError(f"{setting.where}: bad value for {key}: {refusal}")
        return True
    if vernemq_conf.ignored_because(key) is None or vernemq_conf.near_miss(key, _known_keys(key)) is not None:
        return False
    ignored.append(f"{key} ({setting.where})")
    return True


def _listener_key(key: str) -> tuple[str, str | None, str | None] | None:
    """`listener.KIND.NAME` -> (KIND, NAME, None); `listener.KIND.NAME.OPTION` -> (KIND, NAME, OPTION) for an
    option of LISTENER_OPTIONS that listeners of KIND have; `listener.KIND.OPTION` -> (KIND, None, OPTION) for a
    `kind_wide` one; None for anything else (an option's name is no listener's name)."""
    match = _LISTENER.match(key)
    if match is None:
        return None
    kind, name, option = match.group(1), match.group(2), match.group(3)
    if option is None and name in LISTENER_OPTIONS:
        spec = LISTENER_OPTIONS[name]
        return (kind, None, name) if spec.kind_wide and kind in spec.kinds else None
    if option is not None and (option not in LISTENER_OPTIONS or kind not in LISTENER_OPTIONS[option].kinds):
        return None
    return kind, name, option


def _known_keys(key: str) -> list[str]:
    """Every key a misspelled `key` may have meant: SCHEMA's, the VerneMQ ones taken, and the listener keys."""
    known = [*SCHEMA, *vernemq_conf.ALIASES, *vernemq_conf.ONLY_VALUE, "listener.tcp.default"]
    parts = key.split(".")
    kind = parts[1] if len(parts) >= 3 and parts[0] == "listener" and parts[1] in LISTENER_KINDS else "tcp"
    name = parts[2] if len(parts) >= 4 else "NAME"
    known += [f"listener.{kind}.{name}.{option}" for option, spec in LISTENER_OPTIONS.items() if kind in spec.kinds]
    known += [f"listener.{kind}.{option}" for option, spec in LISTENER_OPTIONS.items()
              if spec.kind_wide and kind in spec.kinds]
    return known


def _unknown_key(setting: _Setting) -> ConfigError:
    """The refusal of an unknown key, naming the known key nearest to it."""
    near = vernemq_conf.suggestion(setting.key, _known_keys(setting.key))
    hint = f" (did you mean {near!r}?)" if near is not None else ""
    return ConfigError(f"{setting.where}: unknown key {setting.key!r}{hint}")


def _check_listener_options(
    listeners: Mapping[tuple[str, str], tuple[str, int]], options: Mapping[tuple[str, str], Mapping[str, Any]],
    sources: Mapping[str, str],
) -> None:
    """Every `listener.KIND.NAME.OPTION` belongs to a listener `listener.KIND.NAME` (or to the default one)."""
    for (kind, name), set_options in options.items():
        if (kind, name) not in listeners:
            key = f"listener.{kind}.{name}.{next(iter(set_options))}"
            raise ConfigError(f"{sources[key]}: {key} is set, but there is no listener.{kind}.{name}")


def _check_tls_listeners(
    listeners: Mapping[tuple[str, str], tuple[str, int]], options: Mapping[tuple[str, str], Mapping[str, Any]],
    kind_options: Mapping[str, Mapping[str, Any]],
) -> None:
    """A TLS listener (ssl, wss) has a certificate and its key: its own, or its kind's."""
    for kind, name in sorted(listeners):
        if kind not in TLS_KINDS:
            continue
        for option in ("certfile", "keyfile"):
            if option not in options.get((kind, name), {}) and option not in kind_options.get(kind, {}):
                raise ConfigError(f"listener.{kind}.{name} needs listener.{kind}.{option} "
                                  f"(or listener.{kind}.{name}.{option})")


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
    if path is not None:
        settings += read_file(path)
    settings += read_env(os.environ if environ is None else environ)
    settings += read_flags(flags)
    return build(settings)


_FIELD_OF = {
    "platform_data_dir": "data_dir", "listener.http.default": "http_listener",
    "listener.https.default": "https_listener", "listener.https.certfile": "https_certfile",
    "listener.https.keyfile": "https_keyfile",
    "listener.vmq.clustering": "cluster_listener", "cluster.detect_timeout": "detect_timeout",
    "cluster.readiness": "readiness",
    "metadata.sync_interval": "metadata_sync_interval", "metadata.replication_log": "replication_log",
    "metrics.public": "metrics_public", "status.public": "status_public",
    "log.console": "log_format", "log.console.level": "log_level", "log.console.file": "log_file",
    "plugins.vmq_passwd": "passwd_enabled", "plugins.vmq_acl": "acl_enabled",
    "vmq_acl.acl_reload_interval": "acl_reload_interval",
    "vmq_passwd.password_reload_interval": "password_reload_interval", "auth.failed_login_delay": "failed_login_delay",
    "listener.max_connections": "max_connections",
}


def field_of(key: str) -> str:
    """The Config field that holds a configuration key."""
    return _FIELD_OF.get(key, key)


SECRET_KEYS = frozenset({"distributed_cookie"})


def value_of(config: Config, key: str) -> Any:
    """The value in force for a configuration key (secrets are masked)."""
    if key in SECRET_KEYS:
        return "********"
    value = getattr(config, field_of(key))
    if isinstance(value, tuple) and len(value) == 2:
        return f"{value[0]}:{value[1]}"
    return value


def reference() -> str:
    """A markdown table of every key, for docs and `vmqpy config-reference`."""
    lines = ["| key | default | meaning |", "|---|---|---|", "| listener.tcp.NAME | 127.0.0.1:1883 | MQTT listener |",
             "| listener.ssl.NAME |  | MQTT over TLS listener (docs/security.md) |",
             "| listener.ws.NAME |  | MQTT over WebSocket listener, path /mqtt (docs/security.md) |",
             "| listener.wss.NAME |  | MQTT over WebSocket over TLS listener, path /mqtt |"]
    for option, listener_spec in LISTENER_OPTIONS.items():
        default = listener_spec.node_wide or listener_spec.default
        if isinstance(default, bool):
            default = "on" if default else "off"
        kinds = listener_spec.kinds[0] if len(listener_spec.kinds) == 1 else "{" + ",".join(listener_spec.kinds) + "}"
        kinds = "KIND" if listener_spec.kinds == LISTENER_KINDS else kinds
        key = f"listener.{kinds}.NAME.{option}"
        if listener_spec.kind_wide:
            key = f"listener.{kinds}.{option}, {key}"
        lines.append(f"| {key} | {'' if default is None else default} | {listener_spec.doc} |")
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
