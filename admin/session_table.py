"""The rows of `vmq-admin session show`, with the column names of VerneMQ's `vmq_info` table: which columns
exist, which are shown by default, how `--column=VALUE` and `--column=~REGEX` filter rows, and how the columns of
a subscription (`--topic`, `--qos`, ...) or of a queued message (`--msg_ref`, `--payload`, ...) turn a session
into one row per subscription or per message.

A node answers with *full* rows (every session column; `subscriptions` as a list of [topic, qos, rap, no_local]
and, when asked for, `messages` as a list of [msg_ref, msg_qos, routing_key, dup, payload]); the node filters
them with `select` before its row limit (so the limit counts matching rows), and the node that asked merges
every member's rows and keeps the asked-for columns with `project`.

Filters travel between nodes as `[column, op, value]` triples (`Filter`), op "=" or "=~".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

Row = dict[str, Any]
Filter = tuple[str, str, str]  # (column, "=" or "=~", value as the operator wrote it)

#: the columns of the session itself (VerneMQ's `queues` and `sessions` tables, and vmqpy's own), printed in
#: this order
SESSION_COLUMNS = (
    "client_id", "is_online", "node", "peer_host", "peer_port", "user", "protocol", "mountpoint", "clean_session",
    "waiting_acks", "queued", "dropped", "queue_size", "offline_messages", "online_messages", "is_offline",
    "statename", "deliver_mode", "num_sessions", "is_plugin", "queue_started_at", "session_started_at",
    "session_expiry_interval",
)  # fmt: skip
#: columns of a subscription: asking for one lists a row per subscription (VerneMQ's `subscriptions` table)
SUBSCRIPTION_COLUMNS = ("topic", "qos", "rap", "no_local")
#: columns of a message in the session's queue: asking for one lists a row per message (VerneMQ's `message_refs`
#: and `messages` tables)
MESSAGE_COLUMNS = ("msg_ref", "msg_qos", "routing_key", "dup", "payload")
#: every column, in the order they are printed
COLUMNS = SESSION_COLUMNS + SUBSCRIPTION_COLUMNS + MESSAGE_COLUMNS
#: VerneMQ's default columns (`vmq-admin session show` without flags), and the node that holds the session (the
#: answer spans the cluster)
DEFAULT_COLUMNS = ("client_id", "is_online", "mountpoint", "peer_host", "peer_port", "user", "node")
#: VerneMQ's columns that name Erlang processes: vmqpy has none to show (docs/admin.md, "Coming from VerneMQ")
ERLANG_COLUMNS = ("queue_pid", "session_pid")

_BOOLEAN = frozenset({"is_online", "is_offline", "clean_session", "is_plugin", "rap", "no_local", "dup"})
_NUMBER = frozenset({
    "peer_port", "qos", "protocol", "waiting_acks", "queued", "dropped", "queue_size", "offline_messages",
    "online_messages", "num_sessions", "queue_started_at", "session_started_at", "session_expiry_interval",
    "msg_ref", "msg_qos",
})  # fmt: skip


def cell_text(value: Any) -> str:
    """How a filter sees a value: booleans as true/false, nothing as the empty text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def normalise_filter(column: str, text: str) -> str:
    """The text of an equality filter as `cell_text` writes values (`--is_online=on` keeps the rows that say
    true). Raises ValueError for a value the column can never hold."""
    if column in _BOOLEAN:
        lowered = text.lower()
        if lowered in _TRUE:
            return "true"
        if lowered in _FALSE:
            return "false"
        raise ValueError(f"{column} is true or false, not {text!r}")
    if column in _NUMBER:
        if not text.isdigit():
            raise ValueError(f"{column} is a whole number, not {text!r}")
        return str(int(text))
    return text


def make_filter(column: str, op: str, value: str) -> Filter:
    """A checked filter: an equality's value normalised, a regular expression compiled once to check it. Raises
    ValueError naming what is wrong."""
    if column not in COLUMNS:
        raise ValueError(f"no column {column!r}")
    if op == "=":
        return (column, op, normalise_filter(column, value))
    if op == "=~":
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return (column, op, value)
    raise ValueError(f"no filter operator {op!r} (= or =~)")


def matches(row: Row, filters: Sequence[Filter]) -> bool:
    """Whether the row passes every filter: "=" compares `cell_text`, "=~" searches it with the expression."""
    for column, op, value in filters:
        text = cell_text(row.get(column))
        if op == "=~":
            if _compiled(value).search(text) is None:
                return False
        elif text != value:
            return False
    return True


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        if len(_PATTERNS) > 256:  # bounded: one listing uses a few
            _PATTERNS.clear()
        compiled = _PATTERNS[pattern] = re.compile(pattern)
    return compiled


def expand(row: Row, per_subscription: bool, per_message: bool) -> list[Row]:
    """The row of a session as the rows asked for: one per subscription and/or one per queued message (none when
    it has none); the session's own row otherwise."""
    base = {k: v for k, v in row.items() if k not in ("subscriptions", "messages")}
    rows = [base]
    if per_subscription:  # [topic, qos, rap, no_local]; a member of an older version sends [topic, qos]
        rows = [{**r, "topic": sub[0], "qos": sub[1], "rap": _at(sub, 2), "no_local": _at(sub, 3)}
                for r in rows for sub in row.get("subscriptions", ())]
    if per_message:
        rows = [{**r, "msg_ref": ref, "msg_qos": qos, "routing_key": topic, "dup": dup, "payload": payload}
                for r in rows for ref, qos, topic, dup, payload in row.get("messages", ())]
    return rows


def _at(items: Sequence[Any], index: int) -> Any:
    return items[index] if index < len(items) else None


def select(
    rows: Iterable[Row], filters: Sequence[Filter], per_subscription: bool, limit: int, per_message: bool = False
) -> list[Row]:
    """The rows that pass every filter, at most `limit`; with `per_subscription` / `per_message`, the sessions
    are first turned into one row per subscription / queued message."""
    out: list[Row] = []
    for row in rows:
        for candidate in expand(row, per_subscription, per_message):
            if matches(candidate, filters):
                out.append(candidate)
                if len(out) >= limit:
                    return out
    return out


def filters_of(wire: Any) -> list[Filter]:
    """Filters as another node sent them: a list of [column, op, value]; an older node's {column: value} means
    equality. Raises ValueError for anything else."""
    if isinstance(wire, dict):
        return [make_filter(str(column), "=", str(value)) for column, value in wire.items()]
    if not isinstance(wire, list):
        raise ValueError("filters are a list of [column, op, value]")
    out = []
    for item in wire:
        if not (isinstance(item, list | tuple) and len(item) == 3 and all(isinstance(x, str) for x in item)):
            raise ValueError(f"a filter is [column, op, value], not {item!r}")
        out.append(make_filter(item[0], item[1], item[2]))
    return out


def project(rows: Iterable[Row], columns: Iterable[str]) -> list[Row]:
    """The rows with only `columns`, in that order."""
    wanted = tuple(columns)
    return [{column: row.get(column) for column in wanted} for row in rows]


def order(rows: Iterable[Row]) -> list[Row]:
    """Rows of several nodes in one stable order: by client id, then node, then topic, then message."""
    return sorted(rows, key=lambda r: (str(r.get("client_id")), str(r.get("node")), str(r.get("topic") or ""),
                                       int(r.get("msg_ref") or 0)))
