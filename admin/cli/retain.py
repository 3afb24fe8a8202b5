"""`vmq-admin retain show` and `retain delete` (HTTP `/api/v1/retain/...`): the table entries, their handlers and
the examples for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import LIMIT, TEXT, TOPIC_FILTER, Args, Param
from admin.results import Result, Table, Text


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.retain_show(args.opt_text("topic"), args.integer("limit")))


async def _delete(ctx: Context, args: Args) -> Result:
    return Text(ctx.facade.retain_delete(args.text("topic")))


COMMANDS: tuple[Command, ...] = (
    Command(("retain", "show"), "GET", "retained messages", _show,
            params=(Param("topic", TOPIC_FILTER, help="only the topics matching this MQTT filter"), LIMIT)),
    Command(("retain", "delete"), "POST", "delete a retained message, cluster-wide", _delete,
            params=(Param("topic", TEXT, required=True, help="the topic (a topic name, not a filter)"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("retain", "show"): ["vmq-admin retain show", "vmq-admin retain show topic=sensors/+/temp limit=10"],
    ("retain", "delete"): ["vmq-admin retain delete topic=sensors/17/temp"],
}

NOTES: dict[tuple[str, ...], str] = {}
