"""`vmq-admin cluster show|status|join|leave` (HTTP `/api/v1/cluster/...`): the table entries, their handlers and
the examples for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import BOOL, NODE, SECONDS, Args, Param
from admin.results import Result, Table, Text


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.cluster_show())


async def _join(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.cluster_join(args.text("discovery-node")))


async def _leave(ctx: Context, args: Args) -> Result:
    text = await ctx.facade.cluster_leave(
        args.text("node"), args.flag("kill-sessions"), args.number("interval"), args.number("timeout")
    )
    return Text(text)


def _leave_wait(args: Args) -> float:
    return args.number("timeout") + 30.0


COMMANDS: tuple[Command, ...] = (
    Command(("cluster", "show"), "GET", "the cluster's members and their state", _show,
            aliases=(("cluster", "status"),)),
    Command(("cluster", "join"), "POST", "join the cluster of a running node", _join,
            params=(Param("discovery-node", NODE, required=True, help="a member of the cluster to join"),),
            wait=lambda args: 90.0),
    Command(("cluster", "leave"), "POST", "make a node leave the cluster (it stops serving clients)", _leave,
            params=(
                Param("node", NODE, required=True, help="the node that leaves"),
                Param("kill-sessions", BOOL, default=False, flag=True, short="k",
                      help="disconnect its clients instead of waiting for them to move"),
                Param("interval", SECONDS, default=5.0, flag=True, short="i",
                      help="seconds between checks of its remaining sessions"),
                Param("timeout", SECONDS, default=60.0, flag=True, short="t",
                      help="seconds to wait in total before giving up"),
            ),
            wait=_leave_wait),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("cluster", "show"): ["vmq-admin cluster show", "vmq-admin cluster status --json"],
    ("cluster", "join"): ["vmq-admin cluster join discovery-node=vmq1@127.0.0.1"],
    ("cluster", "leave"): [
        "vmq-admin cluster leave node=vmq2@127.0.0.1",
        "vmq-admin cluster leave node=vmq2@127.0.0.1 -k -i 2 -t 30",
    ],
}

NOTES: dict[tuple[str, ...], str] = {}
