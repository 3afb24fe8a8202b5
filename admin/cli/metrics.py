"""`vmq-admin metrics show` (HTTP `/api/v1/metrics/show`): the table entry, its handler and the examples for the
help.

Two forms of the same numbers (`NodeFacade.metrics()`, read once per call):
- `--format=table` (the default): one row per node counter under its dotted name (`broker.publish_received`),
  the names the $SYS tree publishes;
- `--format=vernemq`: VerneMQ's lines, `counter.mqtt_connect_received = 3`, `gauge.active_sessions = 1`,
  under the names `/metrics` gives Prometheus (admin.prometheus, the one table of published names).
"""

from __future__ import annotations

from admin import prometheus
from admin.command import Command, Context
from admin.params import Args, Param, ParamType
from admin.results import Result, Table, Text

FORMATS = ("table", "vernemq")


def _parse_format(text: str) -> str:
    if text not in FORMATS:
        raise ValueError(f"expected one of {', '.join(FORMATS)}")
    return text


FORMAT = ParamType("|".join(FORMATS), _parse_format)


async def _show(ctx: Context, args: Args) -> Result:
    metrics = ctx.facade.metrics()
    if args.text("format") == "vernemq":
        return Text("\n".join(prometheus.vernemq_lines(prometheus.families(metrics))))
    return Table([{"Metric": name, "Value": metrics[name]} for name in sorted(metrics)])


COMMANDS: tuple[Command, ...] = (
    Command(("metrics", "show"), "GET", "the node's metrics", _show,
            params=(Param("format", FORMAT, default="table", flag=True,
                          help="table: the node's counters by their dotted names; vernemq: VerneMQ's lines "
                               "(counter.NAME = N) under the names of /metrics"),)),
)

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("metrics", "show"): ["vmq-admin metrics show", "vmq-admin metrics show --json",
                          "vmq-admin metrics show --format=vernemq"],
}

NOTES: dict[tuple[str, ...], str] = {
    ("metrics", "show"): "The same numbers as GET /metrics (Prometheus) and the $SYS tree; docs/operations.md "
                         "lists the names.",
}
