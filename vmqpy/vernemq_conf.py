"""What a stock vernemq.conf holds that vmqpy reads differently from its own keys.

Four tables, consulted by vmqpy.config for a key that is not in its SCHEMA:

- `ALIASES`: VerneMQ's spelling of one of our keys, read as that key (`VALUE_SPELLINGS`: the values VerneMQ
  spells differently, such as `infinity` for our `0`).
- `ONLY_VALUE`: VerneMQ keys (fnmatch patterns) accepted at the one value that is vmqpy's behaviour (the value
  a stock file has); any other value is refused, since vmqpy cannot do what it asks.
- `IGNORED`: keys with no meaning in vmqpy (Erlang VM tuning, VerneMQ's plugins and log files). They are
  accepted, and the node names them in one warning line when it starts.
- `LISTENER_OPTION_NAMES`: the options VerneMQ has for its MQTT listeners, so that `listener.ssl.pskfile` is
  read as an option of every ssl listener (one of the tables above decides about it), never as a listener.

Anything else that vmqpy does not know is refused with its file and line, and a misspelling of a known key
is refused even when it looks like an ignored one (`plugins.vmq_paswd`): see `near_miss`. The "did you mean"
of an unknown key (`suggestion`) names only a known key a typing slip away from it, or one it abbreviates.
No I/O here, and no import of vmqpy.config (which imports this module).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

ALIASES: Mapping[str, str] = {
    "vmq_passwd.password_file": "password_file",
    "vmq_acl.acl_file": "acl_file",
    # VerneMQ 2.x rotates its console log file by these; vmqpy's log file rotates by log.file.*
    "log.console.rotation.size": "log.file.max_size",
    "log.console.rotation.keep": "log.file.count",
}

# key (as written) -> VerneMQ's spelling of a value -> ours, before our key's parser reads it
VALUE_SPELLINGS: Mapping[str, Mapping[str, str]] = {
    "log.console.rotation.size": {"infinity": "0"},  # lager's "never rotate" is our 0
}

_ON = frozenset({"on", "true", "yes", "1"})
_OFF = frozenset({"off", "false", "no", "0"})


@dataclass(frozen=True, slots=True)
class OnlyValue:
    """VerneMQ keys matching `pattern` (fnmatch) that vmqpy accepts at one `value` (in any of the `accepted`
    spellings, lower case, without blanks), which is what vmqpy does: `behaviour`."""

    pattern: str
    value: str
    accepted: frozenset[str]
    behaviour: str


_ALL_VERSIONS = frozenset({"3,4,5", "3,5,4", "4,3,5", "4,5,3", "5,3,4", "5,4,3"})
_NO_LIFETIME = "a connection lasts until its client or the node ends it: there is no lifetime limit"

ONLY_VALUE: tuple[OnlyValue, ...] = (
    OnlyValue("allow_multiple_sessions", "off", _OFF,
              "a client id has one connection at a time (a newer connection takes the session over)"),
    OnlyValue("coordinate_registrations", "on", _ON, "a CONNECT is always registered through the client id's leader"),
    OnlyValue("listener.mountpoint", "off", _OFF | {""}, "no mountpoints: a topic is the same on every listener"),
    OnlyValue("listener.*.mountpoint", "off", _OFF | {""}, "no mountpoints: a topic is the same on every listener"),
    OnlyValue("graphite_enabled", "off", _OFF,
              "no Graphite reporter (metrics: vmq-admin metrics show, the HTTP API)"),
    OnlyValue("listener.max_connection_lifetime", "0", frozenset({"0"}), _NO_LIFETIME),
    OnlyValue("listener.*.max_connection_lifetime", "0", frozenset({"0"}), _NO_LIFETIME),
    OnlyValue("listener.*.allow_anonymous_override", "off", _OFF,
              "allow_anonymous holds on every listener alike: no listener lets anonymous clients in on its own"),
    OnlyValue("listener.*.allowed_protocol_versions", "3,4,5", _ALL_VERSIONS,
              "every MQTT listener speaks MQTT 3.1 (3), 3.1.1 (4) and 5.0 (5)"),
    OnlyValue("listener.*.psk_support", "off", _OFF,
              "TLS listeners authenticate with certificates: no pre-shared keys"),
    OnlyValue("log.console.file.format", "text", frozenset({"text"}),
              "the log file holds text lines (JSON lines: log.console = json, on stderr)"),
    OnlyValue("log.console.rotation.compress_on_rotate", "off", _OFF,
              "rotated log files are kept as they are, uncompressed (log.file.count of them)"),
)


@dataclass(frozen=True, slots=True)
class Ignored:
    """Keys matching `pattern` (fnmatch: `*` matches any characters, dots included) mean nothing here: `why`."""

    pattern: str
    why: str


_ACCEPTORS = "Erlang acceptor processes per listener: one asyncio server accepts a listener's connections"
_CRASH = "Erlang crash reports and their file: a Python node has none (tracebacks go to the log)"
_ERROR = "VerneMQ's separate error log file: errors go to the log.console output with everything else"
_SASL = "Erlang SASL progress reports and their file: a Python node has none"
_PSK = "the pre-shared key file of TLS-PSK, which vmqpy does not have (listener.ssl.psk_support must be off)"
_SOCKET = "Erlang socket tuning (messages read per wake-up, buffer sizes): asyncio reads as data arrives"

IGNORED: tuple[Ignored, ...] = (
    Ignored("erlang.*", "Erlang VM tuning (schedulers, ports, distribution buffers): vmqpy is a Python process"),
    Ignored("leveldb.*", "VerneMQ's LevelDB message store: vmqpy keeps messages in SQLite in platform_data_dir"),
    Ignored("metadata_plugin", "VerneMQ's choice of metadata store (vmq_swc, vmq_plumtree): vmqpy has one store"),
    Ignored("listener.nr_of_acceptors", _ACCEPTORS),
    Ignored("listener.*.nr_of_acceptors", _ACCEPTORS),
    Ignored("listener.*.pskfile", _PSK),
    Ignored("listener.*.pskfile_separator", _PSK),
    Ignored("listener.*.active_n", _SOCKET),
    Ignored("listener.*.buffer_sizes", _SOCKET),
    Ignored("plugins.*", "VerneMQ plugins (vmq_diversity, vmq_webhooks, vmq_bridge, ...) and their path and "
                         "priority: vmqpy loads no plugins (plugins.vmq_passwd and plugins.vmq_acl are read)"),
    Ignored("vmq_*", "settings of VerneMQ plugins vmqpy does not have (the vmq_passwd and vmq_acl keys vmqpy has "
                     "are read: a key of the schema is never ignored)"),
    Ignored("override_max_online_messages",
            "vmqpy never drops queued messages when an offline session comes back: its whole offline queue "
            "(up to max_offline_messages) is delivered, as VerneMQ does with this key on"),
    Ignored("max_ws_frame_size",
            "a WebSocket frame may hold the largest MQTT packet the node accepts (twice max_message_size, or "
            "twice 256 MB when it is 0): max_message_size is the limit to set"),
    Ignored("logging.keepalive_as_warning",
            "vmqpy logs a keepalive expiry as an info line ('keepalive expired'), with the connection's lines"),
    Ignored("logging.obfuscation_secret",
            "VerneMQ's secret for hashing credentials in its log lines: vmqpy writes no passwords into its log"),
    Ignored("log.syslog", "syslog output: not implemented (log.console = file or both writes a file)"),
    Ignored("log.syslog.*", "syslog output: not implemented (log.console = file or both writes a file)"),
    Ignored("log.crash", _CRASH),
    Ignored("log.crash.*", _CRASH),
    Ignored("log.error", _ERROR),
    Ignored("log.error.*", _ERROR),
    Ignored("log.sasl", _SASL),
    Ignored("log.sasl.*", _SASL),
    Ignored("graphite_*", "the Graphite reporter's address and period: there is no Graphite reporter "
                          "(graphite_enabled must be off)"),
)

# The options VerneMQ's MQTT listeners have (listener.KIND.OPTION, listener.KIND.NAME.OPTION) that vmqpy's do not
# (vmqpy.listener_keys has ours): never the name of a listener. Those not matched above are refused as unknown.
LISTENER_OPTION_NAMES: frozenset[str] = frozenset({
    "active_n", "allow_anonymous_override", "allowed_protocol_versions", "auth_plugins", "authz_plugins",
    "buffer_sizes", "ciphers", "crlfile", "depth", "eccs", "forward_connection_opts", "keypasswd",
    "max_connection_lifetime", "max_header_value_length", "max_request_line_length", "mountpoint",
    "nr_of_acceptors", "proxy_protocol_use_cn_as_username", "proxy_xff_cn_header", "proxy_xff_support",
    "proxy_xff_trusted_intermediate", "proxy_xff_use_cn_as_username", "psk_identity_hint", "psk_support",
    "pskfile", "pskfile_separator", "tls_handshake_timeout",
})


def ignored_because(key: str) -> str | None:
    """Why `key` means nothing in vmqpy, or None when it is not an ignored key."""
    for rule in IGNORED:
        if fnmatchcase(key, rule.pattern):
            return rule.why
    return None


def only_value_rule(key: str) -> OnlyValue | None:
    """The ONLY_VALUE rule of `key`, or None when it has none."""
    return next((rule for rule in ONLY_VALUE if fnmatchcase(key, rule.pattern)), None)


def only_value_refusal(key: str, raw: str) -> str | None:
    """None when `raw` is the value of `key` (a key with an ONLY_VALUE rule) that vmqpy's behaviour matches,
    else why not."""
    rule = only_value_rule(key)
    assert rule is not None, f"{key} has no ONLY_VALUE rule"
    if "".join(raw.split()).lower() in rule.accepted:
        return None
    return f"vmqpy supports only {key} = {rule.value}: {rule.behaviour}"


def vernemq_spelling(key: str, raw: str) -> str:
    """`raw` in our spelling, for a key of VALUE_SPELLINGS (any other value or key: unchanged)."""
    return VALUE_SPELLINGS.get(key, {}).get(raw.strip().lower(), raw)


def typing_distance(a: str, b: str) -> int:
    """The edit distance of two keys, counting a swap of two neighbouring characters as one edit (optimal
    string alignment): the slips of typing (a character missed, doubled, replaced or swapped)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def slips_allowed(key: str) -> int:
    """How many slips a key of this length may carry and still be taken for a misspelling: 1 up to 8
    characters, 2 up to 20, 3 beyond (a longer key has room for more slips and fewer neighbours)."""
    return 1 if len(key) <= 8 else 2 if len(key) <= 20 else 3


def near_miss(key: str, known: Iterable[str]) -> str | None:
    """The known key that `key` is a misspelling of: within `slips_allowed` edits (None: none is that close)."""
    best = min(((typing_distance(key, name), name) for name in set(known) if name != key), default=None)
    return best[1] if best is not None and best[0] <= slips_allowed(key) else None


def _abbreviates(key: str, name: str) -> bool:
    """Whether `key` is the start of `name`, cut at a word boundary (`max_inflight` of max_inflight_messages),
    and at least half of it."""
    return (len(name) > len(key) >= max(6, len(name) // 2) and name.startswith(key)
            and name[len(key)] in "._")


def suggestion(key: str, known: Iterable[str]) -> str | None:
    """The known key an unknown `key` most likely meant, for a "did you mean": a misspelling of it
    (`near_miss`) or the start of it (`max_inflight`); None when no known key is that close, rather than a
    far one (`topic_max_depth` is not `topic_alias_max_client`)."""
    names = list(known)
    close = near_miss(key, names)
    if close is not None:
        return close
    return min((name for name in names if _abbreviates(key, name)), key=len, default=None)
