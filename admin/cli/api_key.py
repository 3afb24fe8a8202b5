"""`vmq-admin api-key create|show|delete` (HTTP `/api/v1/api-key/...`): the table entries, their handlers, the
examples for the help and the note printed after `create`."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import TEXT, Args, Param
from admin.results import Result, Table, Text


async def _create(ctx: Context, args: Args) -> Result:
    return Text(ctx.keys.create())


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.keys.list())


async def _delete(ctx: Context, args: Args) -> Result:
    return Text(f"deleted API key {ctx.keys.delete(args.text('key'))}")


COMMANDS: tuple[Command, ...] = (
    Command(("api-key", "create"), "POST", "create an API key (shown once)", _create),
    Command(("api-key", "show"), "GET", "the registered API keys (hash prefixes)", _show),
    Command(("api-key", "delete"), "POST", "delete an API key", _delete,
            params=(Param("key", TEXT, required=True, secret=True,
                          help="the key itself, or at least 8 hex digits of its hash (api-key show)"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("api-key", "create"): ["vmq-admin api-key create"],
    ("api-key", "show"): ["vmq-admin api-key show"],
    ("api-key", "delete"): ["vmq-admin api-key delete key=3f1c9a0b27de"],
}

# printed on stderr after a successful run, so that stdout stays the bare answer
NOTES: dict[tuple[str, ...], str] = {
    ("api-key", "create"): "store this key now: the node keeps only its hash and cannot show it again",
}
