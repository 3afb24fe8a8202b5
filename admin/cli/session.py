"""`vmq-admin session show` (HTTP `/api/v1/session/show`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import LIMIT, TEXT, Args, Param
from admin.results import Result, Table


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.session_show(args.opt_text("client-id"), args.integer("limit")))


COMMANDS: tuple[Command, ...] = (
    Command(("session", "show"), "GET", "client sessions", _show,
            params=(Param("client-id", TEXT, help="only the session(s) of this client id"), LIMIT)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("session", "show"): ["vmq-admin session show", "vmq-admin session show client-id=sensor-17 --json"],
}

NOTES: dict[tuple[str, ...], str] = {}
