"""`vmq-admin retain show` (HTTP `/api/v1/retain/show`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import LIMIT, TOPIC_FILTER, Args, Param
from admin.results import Result, Table


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.retain_show(args.opt_text("topic"), args.integer("limit")))


COMMANDS: tuple[Command, ...] = (
    Command(("retain", "show"), "GET", "retained messages", _show,
            params=(Param("topic", TOPIC_FILTER, help="only the topics matching this MQTT filter"), LIMIT)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("retain", "show"): ["vmq-admin retain show", "vmq-admin retain show topic=sensors/+/temp limit=10"],
}

NOTES: dict[tuple[str, ...], str] = {}
