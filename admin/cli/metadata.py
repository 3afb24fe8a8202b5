"""`vmq-admin metadata dump` (HTTP `/api/v1/metadata/dump`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import TEXT, Args, Param
from admin.results import Result, Table


async def _dump(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.metadata_dump(args.opt_text("prefix")))


COMMANDS: tuple[Command, ...] = (
    Command(("metadata", "dump"), "GET", "the replicated metadata held by this node", _dump,
            params=(Param("prefix", TEXT, help="only the keys under this prefix"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("metadata", "dump"): ["vmq-admin metadata dump --json", "vmq-admin metadata dump prefix=subscriptions"],
}

NOTES: dict[tuple[str, ...], str] = {}
