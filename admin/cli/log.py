"""`vmq-admin log level` and `log show config` (HTTP `/api/v1/log/...`): the table entries, their handlers and the
examples for the help.

vmqpy has one logger, VerneMQ 2.x's `default` (its console handler): `log level logger=default level=info` (2.x)
and `log level level=info` (the older form) both change `log.console.level`, as `set log.console.level` does.
"""

from __future__ import annotations

from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import TEXT, Args, Param
from admin.results import Result, Table, Text

#: the loggers `logger=` names: VerneMQ 2.x's handler id `default` and the console it writes to
LOGGERS = ("default", "console")
_LEVELS = ("debug", "info", "warning", "error")
#: VerneMQ's level names that vmqpy writes as one of its four
_ALIASES = {"warn": "warning", "notice": "info", "critical": "error", "alert": "error", "emergency": "error"}


async def _level(ctx: Context, args: Args) -> Result:
    """Show the log level, or set it (`level=debug`): the same setting as `set log.console.level`."""
    logger = args.opt_text("logger")
    if logger is not None and logger not in LOGGERS:
        raise CommandError(f"no logger {logger!r}: vmqpy has one, 'default' (the console and log file)", 404)
    wanted = args.opt_text("level")
    if wanted is not None:
        lowered = wanted.lower()
        level = _ALIASES.get(lowered, lowered)
        if level not in _LEVELS:
            raise CommandError(f"bad level {wanted!r}: one of {', '.join(_LEVELS)}")
        ctx.facade.set_setting("log.console.level", level)
    return Text(f"log.console.level = {ctx.facade.get_setting('log.console.level')}")


async def _show_config(ctx: Context, args: Args) -> Result:
    """VerneMQ 2.x's table of log handlers: vmqpy's one."""
    get = ctx.facade.get_setting
    return Table([{"logger": "default", "level": get("log.console.level"), "type": get("log.console"),
                   "file": get("log.file") or get("log.console.file")}])


COMMANDS: tuple[Command, ...] = (
    Command(("log", "level"), "POST", "show or change the log level at once (level=debug|info|warning|error)",
            _level, params=(Param("logger", TEXT, help="VerneMQ 2.x's logger name: default (vmqpy's only one)"),
                            Param("level", TEXT, help="the new level; without it, the current one"))),
    Command(("log", "show", "config"), "GET", "the log handler: its level, where it writes and its file",
            _show_config),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("log", "level"): ["vmq-admin log level", "vmq-admin log level level=debug",
                       "vmq-admin log level logger=default level=info"],
    ("log", "show", "config"): ["vmq-admin log show config"],
}

NOTES: dict[tuple[str, ...], str] = {}
