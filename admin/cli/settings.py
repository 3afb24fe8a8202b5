"""`vmq-admin show KEY ...` and `vmq-admin set KEY=VALUE ...` (HTTP `/api/v1/show`, `/api/v1/set`): the table
entries, their handlers and the examples for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import Args
from admin.results import Result, Table, Text


async def _show(ctx: Context, args: Args) -> Result:
    return Table([{"Setting": key, "Value": ctx.facade.get_setting(key)} for key in args.names])


async def _set(ctx: Context, args: Args) -> Result:
    for key, _ in args.pairs:  # every key must exist before anything changes
        ctx.facade.get_setting(key)
    lines = [f"{key} = {ctx.facade.set_setting(key, value)}" for key, value in args.pairs]
    return Text("\n".join(lines))


COMMANDS: tuple[Command, ...] = (
    Command(("show",), "GET", "the current value of run-time settings", _show,
            free="names", free_metavar="KEY"),
    Command(("set",), "POST", "change run-time settings", _set, free="pairs", free_metavar="KEY=VALUE"),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("show",): ["vmq-admin show allow_publish_during_netsplit max_inflight_messages"],
    ("set",): ["vmq-admin set allow_publish_during_netsplit=on"],
}

NOTES: dict[tuple[str, ...], str] = {}
