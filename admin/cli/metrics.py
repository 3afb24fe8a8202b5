"""`vmq-admin metrics show` (HTTP `/api/v1/metrics/show`): the table entry, its handler and the examples for the
help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import Args
from admin.results import Result, Table


async def _show(ctx: Context, args: Args) -> Result:
    metrics = ctx.facade.metrics()
    return Table([{"Metric": name, "Value": metrics[name]} for name in sorted(metrics)])


COMMANDS: tuple[Command, ...] = (
    Command(("metrics", "show"), "GET", "the node's metrics", _show),
)

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("metrics", "show"): ["vmq-admin metrics show", "vmq-admin metrics show --json"],
}

NOTES: dict[tuple[str, ...], str] = {}
