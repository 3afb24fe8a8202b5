"""The rows of `vmq-admin session show`, with VerneMQ's column names: which columns exist, which are shown by
default, how `--column=VALUE` filters rows, and how `--topic`/`--qos` turn a session into one row per
subscription.

A node answers with *full* rows (every column, and `subscriptions` as a list of [topic, qos]); the node filters
them with `select` before its row limit (so the limit counts matching rows), and the node that asked merges
every member's rows and keeps the asked-for columns with `project`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Row = dict[str, Any]

#: every column, in the order they are printed
COLUMNS = (
    "client_id", "is_online", "node", "peer_host", "peer_port", "user", "protocol", "mountpoint", "clean_session",
    "waiting_acks", "queued", "dropped", "topic", "qos",
)  # fmt: skip
#: VerneMQ's default columns, and the node that holds the session (the answer spans the cluster)
DEFAULT_COLUMNS = ("client_id", "is_online", "node", "peer_host", "peer_port", "user")
#: columns of a subscription: asking for one lists a row per subscription
SUBSCRIPTION_COLUMNS = ("topic", "qos")


def cell_text(value: Any) -> str:
    """How a filter sees a value: booleans as true/false, nothing as the empty text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def normalise_filter(column: str, text: str) -> str:
    """The filter text as `cell_text` writes values (`--is_online=on` keeps the rows that say true). Raises
    ValueError for a value the column can never hold."""
    if column in ("is_online", "clean_session"):
        lowered = text.lower()
        if lowered in _TRUE:
            return "true"
        if lowered in _FALSE:
            return "false"
        raise ValueError(f"{column} is true or false, not {text!r}")
    if column in ("peer_port", "qos", "protocol", "waiting_acks", "queued", "dropped"):
        if not text.isdigit():
            raise ValueError(f"{column} is a whole number, not {text!r}")
        return str(int(text))
    return text


def expand(row: Row) -> list[Row]:
    """One row per subscription of the session (none when it has none)."""
    base = {k: v for k, v in row.items() if k != "subscriptions"}
    return [{**base, "topic": topic, "qos": qos} for topic, qos in row.get("subscriptions", ())]


def select(rows: Iterable[Row], filters: Mapping[str, str], per_subscription: bool, limit: int) -> list[Row]:
    """The rows whose columns equal every filter (texts as `cell_text` writes them), at most `limit`; with
    `per_subscription`, the sessions are first turned into one row per subscription."""
    out: list[Row] = []
    for row in rows:
        for candidate in expand(row) if per_subscription else [row]:
            if all(cell_text(candidate.get(column)) == text for column, text in filters.items()):
                out.append(candidate)
                if len(out) >= limit:
                    return out
    return out


def project(rows: Iterable[Row], columns: Iterable[str]) -> list[Row]:
    """The rows with only `columns`, in that order."""
    wanted = tuple(columns)
    return [{column: row.get(column) for column in wanted} for row in rows]


def order(rows: Iterable[Row]) -> list[Row]:
    """Rows of several nodes in one stable order: by client id, then node, then topic."""
    return sorted(rows, key=lambda r: (str(r.get("client_id")), str(r.get("node")), str(r.get("topic") or "")))
