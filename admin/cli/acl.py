"""`vmq-admin acl reload` (HTTP `/api/v1/acl/reload`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import Args
from admin.results import Result, Text


async def _reload(ctx: Context, args: Args) -> Result:
    return Text(ctx.facade.acl_reload())


COMMANDS: tuple[Command, ...] = (
    Command(("acl", "reload"), "POST", "read the ACL and password files again, now (this node)", _reload),
)

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("acl", "reload"): ["vmq-admin acl reload"],
}

NOTES: dict[tuple[str, ...], str] = {
    ("acl", "reload"): "The node also reloads them by itself when they change (every vmq_acl.acl_reload_interval "
                       "and vmq_passwd.password_reload_interval seconds). A file with a bad line is not taken: "
                       "the rules in force stay, and the answer names the file and line. The subscriptions the "
                       "new ACL no longer allows are removed.",
}
