"""`vmq-admin retain show`, `retain delete` and `retain delete-expired` (HTTP `/api/v1/retain/...`): the table
entries, their handlers and the examples for the help.

`retain show` takes VerneMQ's column flags: `--topic --payload` (the default columns), `--qos`, `--mountpoint`
(always empty: vmqpy has no mountpoints); a flag written alone shows its column, with a value it also filters:
`--topic=FILTER` (or `topic=FILTER`) keeps the topics the MQTT filter matches, `--payload=TEXT` the messages with
that payload (`--payload=~REGEX`: whose payload the regular expression matches somewhere, as VerneMQ's),
`--qos=N` those of that QoS.
"""

from __future__ import annotations

import re

from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import FILTER_COLUMN, FILTERABLE, LIMIT, ROWTIMEOUT, TEXT, Args, ColumnFilter, Param
from admin.results import Result, Table, Text

COLUMNS = ("topic", "payload", "qos", "mountpoint")
DEFAULT_COLUMNS = ("topic", "payload")  # VerneMQ's


async def _show(ctx: Context, args: Args) -> Result:
    given = {column: args.values[column] for column in COLUMNS if args.values[column] is not None}
    chosen = [column for column in COLUMNS if given.get(column) == ""]
    columns = [c for c in COLUMNS if c in given] if chosen else list(DEFAULT_COLUMNS)
    topic_filter = given.get("topic") or None
    wanted = [(column, value) for column in ("payload", "qos", "mountpoint")
              if isinstance(value := given.get(column), ColumnFilter)]
    for column, value in wanted:
        if column == "qos" and value.op == "=" and value.value not in ("0", "1", "2"):
            raise CommandError(f"bad value for '--qos' of 'retain show': a QoS is 0, 1 or 2, not {value.value!r}")
    limit = args.integer("limit")
    rows = ctx.facade.retain_show(str(topic_filter) if topic_filter else None, limit if not wanted else 1 << 30)
    kept = [row for row in rows if all(_holds(str(row.get(column, "")), value) for column, value in wanted)]
    return Table([{column: row.get(column) for column in columns} for row in kept[:limit]])


def _holds(text: str, wanted: ColumnFilter) -> bool:
    """`--payload=X`: the value is X; `--payload=~RE`: the regular expression matches it somewhere (VerneMQ's)."""
    return re.search(wanted.value, text) is not None if wanted.op == "=~" else text == wanted.value


async def _delete_expired(ctx: Context, args: Args) -> Result:
    """VerneMQ answers a table of one row: how many expired retained messages were removed."""
    return Table([{"expired": ctx.facade.retain_delete_expired()}])


async def _delete(ctx: Context, args: Args) -> Result:
    return Text(ctx.facade.retain_delete(args.text("topic")))


COMMANDS: tuple[Command, ...] = (
    Command(("retain", "show"), "GET", "retained messages", _show,
            params=(Param("topic", FILTER_COLUMN, help="the topic column; =FILTER: only the topics it matches"),
                    Param("payload", FILTERABLE,
                          help="the payload column (text, or base64:... when not UTF-8); =~REGEX: those it matches"),
                    Param("qos", FILTERABLE, help="the QoS column"),
                    Param("mountpoint", FILTERABLE, help="always empty: vmqpy has no mountpoints"),
                    LIMIT, ROWTIMEOUT)),
    Command(("retain", "delete"), "POST", "delete a retained message, cluster-wide", _delete,
            params=(Param("topic", TEXT, required=True, help="the topic (a topic name, not a filter)"),)),
    Command(("retain", "delete-expired"), "POST",
            "delete, cluster-wide, the retained messages whose message expiry interval passed", _delete_expired),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("retain", "show"): [
        "vmq-admin retain show",
        "vmq-admin retain show --topic=sensors/+/temp --payload --qos limit=10",
    ],
    ("retain", "delete"): ["vmq-admin retain delete topic=sensors/17/temp"],
    ("retain", "delete-expired"): ["vmq-admin retain delete-expired"],
}

NOTES: dict[tuple[str, ...], str] = {}
