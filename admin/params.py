"""Typed command parameters: how the text of `name=value` becomes a value (node names, counts, seconds, on/off,
MQTT topic filters), the declaration of a parameter, and `Args`, the parsed parameters of one invocation."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ParamType:
    """How a parameter's text becomes a value: `parse` raises ValueError with the expectation."""

    metavar: str
    parse: Callable[[str], object]
    column: bool = False  # a column of a table (`COLUMN`): written alone it shows the column, with =VALUE it filters


def _parse_text(text: str) -> str:
    if not text:
        raise ValueError("expected a non-empty value")
    return text


_NODE_PART = re.compile(r"^[A-Za-z0-9_.-]+$")


def _parse_port(text: str) -> None:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError("the port must be a number from 1 to 65535")


def _parse_node(text: str) -> str:
    """NAME@HOST[:PORT]; HOST is a name, an IPv4 address, an IPv6 address in brackets ([::1]:44053) or a bare IPv6
    address without port."""
    value = text.strip()
    name, at, host = value.partition("@")
    expected = "expected NAME@HOST[:PORT] such as vmq2@127.0.0.1 or vmq2@127.0.0.1:44053"
    if not at or not _NODE_PART.match(name) or not host:
        raise ValueError(expected)
    if host.startswith("["):
        inner, bracket, rest = host[1:].partition("]")
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"{expected}; '[{inner}]' is not an IPv6 address") from None
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(expected)
        if rest:
            _parse_port(rest[1:])
    elif host.count(":") >= 2:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{expected}; write an IPv6 address with a port as [ADDRESS]:PORT") from None
    else:
        hostname, colon, port = host.partition(":")
        if not _NODE_PART.match(hostname):
            raise ValueError(expected)
        if colon:
            _parse_port(port)
    return value


def _parse_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError("expected a whole number of at least 1") from None
    if value < 1:
        raise ValueError("expected a whole number of at least 1")
    return value


def _parse_seconds(text: str) -> float:
    body, scale = text.strip().lower(), 1.0
    if body.endswith("ms"):
        body, scale = body[:-2], 0.001
    elif body.endswith("s"):
        body = body[:-1]
    try:
        value = float(body) * scale
    except ValueError:
        raise ValueError("expected seconds such as 5, 2.5, 5s or 250ms") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("expected a finite number of seconds, 0 or more")
    return value


_TRUE = {"on", "true", "yes", "1"}
_FALSE = {"off", "false", "no", "0"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("expected on/off (true/false, yes/no, 1/0)")


def _parse_topic_filter(text: str) -> str:
    if not text:
        raise ValueError("expected an MQTT topic filter such as a/+/c or a/#")
    if "\x00" in text or len(text.encode("utf-8")) > 65535:
        raise ValueError("a topic filter has no NUL character and at most 65535 bytes")
    levels = text.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ValueError("'#' must be a whole level and the last one")
        if "+" in level and level != "+":
            raise ValueError("'+' must be a whole level")
    return text


TEXT = ParamType("TEXT", _parse_text)
NODE = ParamType("NAME@HOST[:PORT]", _parse_node)
COUNT = ParamType("N", _parse_count)
SECONDS = ParamType("SECONDS", _parse_seconds)
BOOL = ParamType("on|off", _parse_bool)
TOPIC_FILTER = ParamType("FILTER", _parse_topic_filter)
#: a column of a table, as VerneMQ's `session show` takes it: `--client_id` alone shows the column,
#: `--client_id=X` (or `client_id=X`) also keeps only the rows whose value is X
COLUMN = ParamType("VALUE", _parse_text, column=True)
@dataclass(frozen=True, slots=True)
class ColumnFilter:
    """A row filter on one column, as VerneMQ's listing commands write it: `--client_id=X` keeps the rows whose
    value is X (`op` "="), `--client_id=~RE` those whose value the regular expression RE matches anywhere
    (`op` "=~", Python's `re.search`, as VerneMQ's `re:run`)."""

    op: str
    value: str

    def __str__(self) -> str:
        return f"~{self.value}" if self.op == "=~" else self.value


def _parse_column_filter(text: str) -> ColumnFilter:
    if text.startswith("~"):
        pattern = text[1:]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression after '=~': {exc}") from None
        return ColumnFilter("=~", pattern)
    return ColumnFilter("=", _parse_text(text))


#: a column that filters as VerneMQ's `session show` does: `--client_id=X` (equal) or `--client_id=~RE` (a
#: regular expression that matches the value somewhere); `--client_id` alone shows the column
FILTERABLE = ParamType("VALUE|~REGEX", _parse_column_filter, column=True)
#: a column holding topics: `--topic` alone shows it, `--topic=FILTER` keeps the topics an MQTT filter matches
FILTER_COLUMN = ParamType("FILTER", _parse_topic_filter, column=True)
#: what a COLUMN parameter holds when it was written alone: show the column, keep every row
SHOW_COLUMN = ""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter. `flag`: shown as `--name` (and `-short`) in the usage instead of `name=value`. `secret`: its
    value is never repeated in error messages (API keys)."""

    name: str
    type: ParamType
    required: bool = False
    default: object = None
    help: str = ""
    flag: bool = False
    short: str | None = None
    secret: bool = False

    def usage(self) -> str:
        if self.type.column:
            return f"[--{self.name}[={self.type.metavar}]]"
        if self.flag:
            long = f"--{self.name}" if self.type is BOOL else f"--{self.name}={self.type.metavar}"
            text = f"-{self.short}|{long}" if self.short else long
        else:
            text = f"{self.name}={self.type.metavar}"
        return text if self.required else f"[{text}]"


#: the row limit of the commands that list sessions, subscriptions and retained messages
LIMIT = Param("limit", COUNT, default=100, help="at most this many rows")
#: VerneMQ's per-row time limit of its listing commands: accepted so that its command lines run as written; a
#: vmqpy node answers within the admin call deadline instead (docs/admin.md)
ROWTIMEOUT = Param("rowtimeout", COUNT, default=100, flag=True,
                   help="accepted for VerneMQ's command lines (milliseconds); vmqpy answers within its deadline")


class Args:
    """Parsed parameters of one invocation: typed values (defaults filled in), the raw text of the parameters that
    were given, and the free words (`show KEY ...`) or pairs (`set KEY=VALUE ...`)."""

    def __init__(
        self,
        values: dict[str, object],
        raw: dict[str, str],
        names: Sequence[str] = (),
        pairs: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.values = values
        self.raw = raw
        self.names = tuple(names)
        self.pairs = tuple(pairs)

    def __repr__(self) -> str:
        return f"Args({self.values!r}, names={self.names!r}, pairs={self.pairs!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Args):
            return NotImplemented
        return (self.values, self.names, self.pairs) == (other.values, other.names, other.pairs)

    __hash__ = None  # type: ignore[assignment]

    def _get(self, name: str, kind: type[Any]) -> Any:
        value = self.values[name]
        if not isinstance(value, kind) or (kind is float and isinstance(value, bool)):
            raise TypeError(f"parameter {name} is {type(value).__name__}, not {kind.__name__}")
        return value

    def text(self, name: str) -> str:
        return str(self._get(name, str))

    def opt_text(self, name: str) -> str | None:
        return None if self.values.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        return int(self._get(name, int))

    def number(self, name: str) -> float:
        return float(self._get(name, (int, float)))  # type: ignore[arg-type]

    def flag(self, name: str) -> bool:
        return bool(self._get(name, bool))
