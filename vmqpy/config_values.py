"""The value parsers of configuration keys and the `Key` record that pairs a key with its parser, default and
documentation line (vmqpy.config's SCHEMA and vmqpy.listener_keys' options are made of them).

Each parser takes the raw text of a `key = value` line and returns the parsed value or raises ValueError with
what it expected; the caller adds the file, line and key to the message (ConfigError).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "Key",
    "parse_address",
    "parse_advertised_address",
    "parse_bool",
    "parse_choice",
    "parse_connection_limit",
    "parse_duration",
    "parse_duration_or_never",
    "parse_int",
    "parse_milliseconds",
    "parse_nodename",
    "parse_path",
    "parse_size",
    "parse_text",
]


class ConfigError(Exception):
    """A configuration that cannot be used; the message names where (file:line, env var or flag)."""


class ConfigErrors(ConfigError):
    """Every problem of a configuration at once (`problems`, each naming where), one per line of the message."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


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


_SIZE = re.compile(r"^(\d+)\s*(b|kb|mb|gb)?$", re.IGNORECASE)
_UNIT_BYTES = {None: 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


def parse_size(text: str) -> int:
    """A size in bytes: a whole number, or with a unit KB, MB or GB (powers of 1024, as VerneMQ's sizes)."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"expected a size in bytes such as 1048576 or 10MB (units B, KB, MB, GB), got {text!r}")
    unit = match.group(2)
    return int(match.group(1)) * _UNIT_BYTES[unit.lower() if unit else None]


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


def parse_positive_duration(text: str) -> float:
    """A duration (`parse_duration`) that is not zero."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"expected a duration above zero, like 10s or 500ms, got {text!r}")
    return seconds


def parse_milliseconds(text: str) -> int:
    """A bare number of milliseconds (VerneMQ's `systree_interval = 20000`), or a duration with its unit
    (`20s`, `250ms`) -> whole milliseconds."""
    stripped = text.strip().lower()
    if stripped.isdigit():
        return int(stripped)
    return round(parse_duration(stripped) * 1000)


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one label of a DNS name (RFC 1123)
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def parse_advertised_address(text: str) -> tuple[str, int]:
    """`broker-1.example.net:1883` -> ("broker-1.example.net", 1883): what clients are told to connect to, so a
    DNS name as well as an IP address (IPv6 in brackets); the port 1-65535."""
    bracketed = re.match(r"^\[([^\]]+)\]:(\d+)$", text.strip())
    match = bracketed or re.match(r"^([^:]+):(\d+)$", text.strip())
    if not match:
        raise ValueError(f"expected HOST:PORT such as broker-1.example.net:1883, got {text!r}")
    host, port = match.group(1), int(match.group(2))
    if bracketed or _HOSTNAME.match(host) is None:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"expected a host name or an IP address before the port, got {host!r}") from None
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be between 1 and 65535, got {port}")
    return host, port


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


def parse_positive_size(text: str) -> int:
    """A size in bytes (`parse_size`) that is not zero."""
    size = parse_size(text)
    if size <= 0:
        raise ValueError(f"expected a size above zero, like 65536 or 64KB, got {text!r}")
    return size


#: The fewest characters a distributed_cookie may have.
COOKIE_MIN_LENGTH = 10
#: The public default cookies, vmqpy's and VerneMQ's (a stock vernemq.conf has `distributed_cookie = vmq`):
#: accepted here so that such a file still starts a single node; a node with a cluster listener refuses them
#: (vmqpy.config.default_cookie_refusal) and every start with one logs a warning.
PUBLIC_COOKIES = frozenset({"vmqpy", "vmq"})


def parse_cookie(text: str) -> str:
    """A distributed_cookie: text of at least COOKIE_MIN_LENGTH characters, or one of the PUBLIC_COOKIES."""
    cookie = text.strip()
    if len(cookie) < COOKIE_MIN_LENGTH and cookie not in PUBLIC_COOKIES:
        raise ValueError(f"a cookie needs at least {COOKIE_MIN_LENGTH} characters (a long random secret, the same "
                         f"on every node), got {len(cookie)}")
    return cookie


def parse_path(text: str) -> Path:
    if not text.strip():
        raise ValueError("expected a path, got nothing")
    return Path(text.strip())


def parse_connection_limit(text: str) -> int | None:
    """`infinity` -> None (no limit); otherwise a whole number of connections, at least 1."""
    if text.strip().lower() == "infinity":
        return None
    return parse_int(1)(text)


def parse_address_limit(text: str) -> int | str | None:
    """A per-address connection limit: `auto` (derived from the node's descriptors, vmqpy.descriptors),
    `infinity` -> None (no limit), or a whole number of connections, at least 1."""
    if text.strip().lower() == "auto":
        return "auto"
    return parse_connection_limit(text)


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: how to parse it, its default (already parsed) and a line of documentation."""

    parse: Callable[[str], Any]
    default: Any
    doc: str
