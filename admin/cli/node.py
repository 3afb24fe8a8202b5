"""`vmq-admin node status` (HTTP `/api/v1/node/status`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import Args
from admin.results import Result, Table


async def _status(ctx: Context, args: Args) -> Result:
    ready, reason = ctx.facade.health()
    return Table([{"Node": ctx.facade.node_name(), "Ready": ready, "Reason": reason}])


COMMANDS: tuple[Command, ...] = (
    Command(("node", "status"), "GET", "this node's name and whether it is ready", _status),
)

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("node", "status"): ["vmq-admin node status"],
}

NOTES: dict[tuple[str, ...], str] = {}
