"""The keys of the MQTT listeners: `listener.KIND.NAME = IP:PORT` for the kinds tcp, ssl (TLS), ws (WebSocket)
and wss (WebSocket over TLS), as VerneMQ names them, and their options `listener.KIND.NAME.OPTION` (or
`listener.KIND.OPTION` for every listener of a kind, or a node-wide key).

vmqpy.config reads them with the rest of the file: `listener_key` recognises a key, `check_listener_options`
and `check_tls_listeners` validate what was set, `listener_key_names` lists the keys a misspelling may have
meant and `reference_rows` documents them. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vmqpy.config_values import (
    Key,
    parse_address,
    parse_advertised_address,
    parse_bool,
    parse_choice,
    parse_connection_limit,
    parse_path,
)
from vmqpy.vernemq_conf import LISTENER_OPTION_NAMES

__all__ = [
    "LISTENER_ADDRESS",
    "LISTENER_KINDS",
    "LISTENER_OPTIONS",
    "TLS_KINDS",
    "ListenerOption",
    "check_listener_options",
    "check_tls_listeners",
    "listener_key",
    "listener_key_names",
    "reference_rows",
]

# MQTT listeners: plain TCP, TLS (ssl), WebSocket (ws) and WebSocket over TLS (wss), as VerneMQ names them
LISTENER_KINDS = ("tcp", "ssl", "ws", "wss")
TLS_KINDS = ("ssl", "wss")
_LISTENER = re.compile(r"^listener\.(tcp|ssl|ws|wss)\.([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?$")  # KIND, NAME, OPTION
LISTENER_ADDRESS = Key(parse_address, ("127.0.0.1", 1883), "MQTT listener")


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
        parse_connection_limit,
        "connections this listener holds at once (infinity: only the node's MQTT socket budget)",
        node_wide="listener.max_connections",
    ),
    "advertise": ListenerOption(
        parse_advertised_address,
        "HOST:PORT clients reach this listener at (Server Reference of a redirect; default: its bind address)",
    ),
    "proxy_protocol": ListenerOption(
        parse_bool, "on: every connection starts with a PROXY protocol v1/v2 header, before TLS and HTTP "
        "(docs/load-balancing.md)", default=False, kind_wide=True,
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


def listener_key(key: str) -> tuple[str, str | None, str | None] | None:
    """`listener.KIND.NAME` -> (KIND, NAME, None); `listener.KIND.NAME.OPTION` -> (KIND, NAME, OPTION) for an
    option of LISTENER_OPTIONS that listeners of KIND have; `listener.KIND.OPTION` -> (KIND, None, OPTION) for a
    `kind_wide` one; None for anything else (an option's name is no listener's name)."""
    match = _LISTENER.match(key)
    if match is None:
        return None
    kind, name, option = match.group(1), match.group(2), match.group(3)
    if name in LISTENER_OPTION_NAMES or option in LISTENER_OPTION_NAMES:
        return None  # a VerneMQ listener option vmqpy has not (vmqpy.vernemq_conf), never a listener's name
    if option is None and name in LISTENER_OPTIONS:
        spec = LISTENER_OPTIONS[name]
        return (kind, None, name) if spec.kind_wide and kind in spec.kinds else None
    if option is not None and (option not in LISTENER_OPTIONS or kind not in LISTENER_OPTIONS[option].kinds):
        return None
    return kind, name, option


def listener_key_names(key: str) -> list[str]:
    """The listener keys a misspelled `key` may have meant (with its kind and name when it has them)."""
    parts = key.split(".")
    kind = parts[1] if len(parts) >= 3 and parts[0] == "listener" and parts[1] in LISTENER_KINDS else "tcp"
    name = parts[2] if len(parts) >= 4 else "NAME"
    known = ["listener.tcp.default"]
    known += [f"listener.{kind}.{name}.{option}" for option, spec in LISTENER_OPTIONS.items() if kind in spec.kinds]
    known += [f"listener.{kind}.{option}" for option, spec in LISTENER_OPTIONS.items()
              if spec.kind_wide and kind in spec.kinds]
    return known


def check_listener_options(
    listeners: Mapping[tuple[str, str], tuple[str, int]], options: Mapping[tuple[str, str], Mapping[str, Any]],
    sources: Mapping[str, str],
) -> list[str]:
    """The problems of the options set: each `listener.KIND.NAME.OPTION` belongs to a listener
    `listener.KIND.NAME` (or to the default one)."""
    problems = []
    for (kind, name), set_options in options.items():
        if (kind, name) not in listeners:
            for option in set_options:
                key = f"listener.{kind}.{name}.{option}"
                problems.append(f"{sources[key]}: {key} is set, but there is no listener.{kind}.{name}")
    return problems


def check_tls_listeners(
    listeners: Mapping[tuple[str, str], tuple[str, int]], options: Mapping[tuple[str, str], Mapping[str, Any]],
    kind_options: Mapping[str, Mapping[str, Any]], sources: Mapping[str, str],
) -> list[str]:
    """The problems of the TLS listeners (ssl, wss): each has a certificate and its key, its own or its kind's."""
    problems = []
    for kind, name in sorted(listeners):
        if kind not in TLS_KINDS:
            continue
        where = sources.get(f"listener.{kind}.{name}")
        for option in ("certfile", "keyfile"):
            if option not in options.get((kind, name), {}) and option not in kind_options.get(kind, {}):
                problems.append(f"{where + ': ' if where else ''}listener.{kind}.{name} needs listener.{kind}.{option} "
                                f"(or listener.{kind}.{name}.{option})")
    return problems


def reference_rows() -> list[str]:
    """The rows of the listener keys in the markdown table of `vmqpy config-reference`."""
    lines = ["| listener.tcp.NAME | 127.0.0.1:1883 | MQTT listener |",
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
    return lines
