"""`vmq-admin subscription show` (HTTP `/api/v1/subscription/show`): the table entry, its handler and the examples
for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import LIMIT, TEXT, Args, Param
from admin.results import Result, Table


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.subscription_show(args.opt_text("client-id"), args.integer("limit")))


COMMANDS: tuple[Command, ...] = (
    Command(("subscription", "show"), "GET", "subscriptions", _show,
            params=(Param("client-id", TEXT, help="only the subscriptions of this client id"), LIMIT)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("subscription", "show"): ["vmq-admin subscription show", "vmq-admin subscription show client-id=sensor-17"],
}

NOTES: dict[tuple[str, ...], str] = {}
