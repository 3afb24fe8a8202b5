"""`vmq-admin show [KEY ...]` and `vmq-admin set KEY=VALUE ... [--all | --node=NAME]` (HTTP `/api/v1/show`,
`/api/v1/set`): the table entries, their handlers and the examples for the help.

`show` without a key lists every setting with its value and when a change takes effect (or why it cannot change
while the node runs); `set` changes this node's settings, `--all` every member's and `--node=NAME` one member's
(through the cluster's admin calls). Which keys change at run time: vmqpy.runtime_settings."""

from __future__ import annotations

from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import BOOL, NODE, Args, Param
from admin.results import Result, Table, Text
from vmqpy.runtime_settings import RUNTIME


async def _show(ctx: Context, args: Args) -> Result:
    if not args.names:
        return Table(ctx.facade.setting_rows())
    return Table([{"Setting": key, "Value": ctx.facade.get_setting(key)} for key in args.names])


async def _set(ctx: Context, args: Args) -> Result:
    every, node = args.flag("all"), args.opt_text("node")
    if every and node is not None:
        raise CommandError("give --all or --node=NAME, not both")
    if every or node is not None:
        return Text(await ctx.facade.set_settings_on(list(args.pairs), node))
    for key, _ in args.pairs:  # every key must exist before anything changes
        ctx.facade.get_setting(key)
    lines = [f"{key} = {ctx.facade.set_setting(key, value)}" for key, value in args.pairs]
    return Text("\n".join(lines))


COMMANDS: tuple[Command, ...] = (
    Command(("show",), "GET", "settings and their values (without KEY: every setting, and whether it can change)",
            _show, free="names", free_metavar="KEY"),
    Command(("set",), "POST", "change run-time settings of this node, of every member (--all) or of one (--node)",
            _set, free="pairs", free_metavar="KEY=VALUE",
            params=(Param("all", BOOL, default=False, flag=True, help="on every member of the cluster"),
                    Param("node", NODE, flag=True, help="on that member only (NAME@HOST, as cluster show names it)"))),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("show",): ["vmq-admin show", "vmq-admin show allow_publish_during_netsplit max_inflight_messages"],
    ("set",): [
        "vmq-admin set allow_publish_during_netsplit=on",
        "vmq-admin set max_inflight_messages=30 --all",
        "vmq-admin set log.console.level=debug --node=vmq2@127.0.0.1",
    ],
}

NOTES: dict[tuple[str, ...], str] = {}

#: printed by `--help` after the parameters: the keys `set` takes and when each change takes effect
DETAILS: dict[tuple[str, ...], str] = {
    ("set",): "keys that can change while the node runs:\n" + "\n".join(
        f"  {key.ljust(max(map(len, RUNTIME)))}  {when}" for key, when in sorted(RUNTIME.items())
    ) + "\nevery other key is read at start: 'vmq-admin show' says why for each.",
}
