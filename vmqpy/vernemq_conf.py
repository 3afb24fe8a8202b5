"""What a stock vernemq.conf holds that vmqpy reads differently from its own keys.

Three tables, consulted by vmqpy.config for a key that is not in its SCHEMA:

- `ALIASES`: VerneMQ's spelling of one of our keys, read as that key.
- `ONLY_VALUE`: a VerneMQ key accepted at the one value that is vmqpy's behaviour (the value a stock file has);
  any other value is refused, since vmqpy cannot do what it asks.
- `IGNORED`: keys with no meaning in vmqpy (Erlang VM tuning, VerneMQ's plugins and log files). They are
  accepted, and the node names them in one warning line when it starts.

Anything else that vmqpy does not know is refused with its file and line, and a misspelling of a known key
is refused even when it looks like an ignored one (`plugins.vmq_paswd`): see `near_miss`.
No I/O here, and no import of vmqpy.config (which imports this module).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

ALIASES: Mapping[str, str] = {
    "vmq_passwd.password_file": "password_file",
    "vmq_acl.acl_file": "acl_file",
}

_ON = frozenset({"on", "true", "yes", "1"})
_OFF = frozenset({"off", "false", "no", "0"})


@dataclass(frozen=True, slots=True)
class OnlyValue:
    """A VerneMQ key vmqpy accepts at one `value` (in any of the `accepted` spellings, lower case), which is what
    vmqpy does: `behaviour`."""

    value: str
    accepted: frozenset[str]
    behaviour: str


ONLY_VALUE: Mapping[str, OnlyValue] = {
    "allow_multiple_sessions": OnlyValue(
        "off", _OFF, "a client id has one connection at a time (a newer connection takes the session over)"),
    "coordinate_registrations": OnlyValue("on", _ON, "a CONNECT is always registered through the client id's leader"),
    "listener.mountpoint": OnlyValue("off", _OFF | {""}, "no mountpoints: a topic is the same on every listener"),
    "graphite_enabled": OnlyValue("off", _OFF, "no Graphite reporter (metrics: vmq-admin metrics show, the HTTP API)"),
}


@dataclass(frozen=True, slots=True)
class Ignored:
    """Keys matching `pattern` (fnmatch: `*` matches any characters, dots included) mean nothing here: `why`."""

    pattern: str
    why: str


_ACCEPTORS = "Erlang acceptor processes per listener: one asyncio server accepts a listener's connections"
_CRASH = "Erlang crash reports and their file: a Python node has none (tracebacks go to the log)"
_ERROR = "VerneMQ's separate error log file: errors go to the log.console output with everything else"

IGNORED: tuple[Ignored, ...] = (
    Ignored("erlang.*", "Erlang VM tuning (schedulers, ports, distribution buffers): vmqpy is a Python process"),
    Ignored("leveldb.*", "VerneMQ's LevelDB message store: vmqpy keeps messages in SQLite in platform_data_dir"),
    Ignored("metadata_plugin", "VerneMQ's choice of metadata store (vmq_swc, vmq_plumtree): vmqpy has one store"),
    Ignored("listener.nr_of_acceptors", _ACCEPTORS),
    Ignored("listener.*.nr_of_acceptors", _ACCEPTORS),
    Ignored("plugins.*", "VerneMQ plugins (vmq_diversity, vmq_webhooks, vmq_bridge, ...) and their path and "
                         "priority: vmqpy loads no plugins (plugins.vmq_passwd and plugins.vmq_acl are read)"),
    Ignored("vmq_*", "settings of VerneMQ plugins vmqpy does not have (the vmq_passwd and vmq_acl keys vmqpy has "
                     "are read: a key of the schema is never ignored)"),
    Ignored("log.syslog", "syslog output: not implemented (log.console = file or both writes a file)"),
    Ignored("log.syslog.*", "syslog output: not implemented (log.console = file or both writes a file)"),
    Ignored("log.crash", _CRASH),
    Ignored("log.crash.*", _CRASH),
    Ignored("log.error", _ERROR),
    Ignored("log.error.*", _ERROR),
    Ignored("log.sasl", "Erlang SASL progress reports: a Python node has none"),
    Ignored("log.sasl.*", "Erlang SASL progress reports: a Python node has none"),
    Ignored("graphite_*", "the Graphite reporter's address and period: there is no Graphite reporter "
                          "(graphite_enabled must be off)"),
)

NEAR_MISS_CUTOFF = 0.9  # how alike a key must be to a known one to be taken for its misspelling (difflib ratio)


def ignored_because(key: str) -> str | None:
    """Why `key` means nothing in vmqpy, or None when it is not an ignored key."""
    for rule in IGNORED:
        if fnmatchcase(key, rule.pattern):
            return rule.why
    return None


def only_value_refusal(key: str, raw: str) -> str | None:
    """None when `raw` is the value of `key` (an ONLY_VALUE key) that vmqpy's behaviour matches, else why not."""
    rule = ONLY_VALUE[key]
    if raw.strip().lower() in rule.accepted:
        return None
    return f"vmqpy supports only {key} = {rule.value}: {rule.behaviour}"


def near_miss(key: str, known: Iterable[str]) -> str | None:
    """The known key that `key` is almost certainly a misspelling of (None: none is that close)."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=NEAR_MISS_CUTOFF)
    return close[0] if close and close[0] != key else None


def suggestion(key: str, known: Iterable[str]) -> str | None:
    """The known key nearest to an unknown `key`, for a "did you mean" (None: nothing is near)."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return close[0] if close else None
