"""`vmq-admin node status|drain|stop` (HTTP `/api/v1/node/...`): the table entries, their handlers and the
examples for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import COUNT, SECONDS, Args, Param
from admin.results import Result, Table, Text

DEFAULT_DRAIN_RATE = 100  # clients per second
DEFAULT_DRAIN_TIMEOUT = 300.0  # seconds


async def _status(ctx: Context, args: Args) -> Result:
    ready, reason = ctx.facade.health()
    return Table([{"Node": ctx.facade.node_name(), "Ready": ready, "Reason": reason}])


async def _drain(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.node_drain(float(args.integer("rate")), args.number("timeout")))


async def _stop(ctx: Context, args: Args) -> Result:
    return Text(ctx.facade.node_stop())


def _drain_wait(args: Args) -> float:
    return args.number("timeout") + 30.0


COMMANDS: tuple[Command, ...] = (
    Command(("node", "status"), "GET", "this node's name and whether it is ready", _status),
    Command(("node", "drain"), "POST",
            "stop taking MQTT connections, fail /health, disconnect the clients at a bounded rate", _drain,
            params=(
                Param("rate", COUNT, default=DEFAULT_DRAIN_RATE, flag=True, short="r",
                      help="clients disconnected per second at most"),
                Param("timeout", SECONDS, default=DEFAULT_DRAIN_TIMEOUT, flag=True, short="t",
                      help="seconds to disconnect clients before giving up (the node stays drained)"),
            ),
            wait=_drain_wait),
    Command(("node", "stop"), "POST", "stop this node cleanly (as SIGTERM does)", _stop),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("node", "status"): ["vmq-admin node status"],
    ("node", "drain"): ["vmq-admin node drain", "vmq-admin node drain --rate=50 --timeout=120"],
    ("node", "stop"): ["vmq-admin node stop"],
}

NOTES: dict[tuple[str, ...], str] = {
    ("node", "drain"): "the node refuses clients until it stops: follow with `vmq-admin node stop`",
}
