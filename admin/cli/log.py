"""`vmq-admin log level` (HTTP `/api/v1/log/level`): the table entry, its handler and the examples for the help."""

from __future__ import annotations

from admin.command import Command, Context
from admin.params import TEXT, Args, Param
from admin.results import Result, Text


async def _level(ctx: Context, args: Args) -> Result:
    """Show the log level, or set it (`level=debug`): the same setting as `set log.console.level`."""
    wanted = args.opt_text("level")
    if wanted is not None:
        ctx.facade.set_setting("log.console.level", wanted)
    return Text(f"log.console.level = {ctx.facade.get_setting('log.console.level')}")


COMMANDS: tuple[Command, ...] = (
    Command(("log", "level"), "POST", "show or change the log level at once (level=debug|info|warning|error)",
            _level, params=(Param("level", TEXT, help="the new level; without it, the current one"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("log", "level"): ["vmq-admin log level", "vmq-admin log level level=debug"],
}

NOTES: dict[tuple[str, ...], str] = {}
