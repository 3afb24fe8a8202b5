"""`vmq-admin listener show|stop|start|restart` (HTTP `/api/v1/listener/...`, `/api/v1/listeners`): the MQTT
listeners of the node asked, with VerneMQ's command lines.

`listener stop address=IP port=N [-k|--kill_sessions]` makes a listener refuse new connections (its live ones
stay, unless --kill_sessions); `listener start` and `listener restart` (the same here) listen again. vmqpy starts
only the listeners of its configuration: VerneMQ's `listener start` with options that create a new listener
(--websocket, --ssl, --mountpoint, ...) is refused with a pointer to the configuration keys.
"""

from __future__ import annotations

from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import BOOL, COLUMN, TEXT, Args, Param, ParamType
from admin.results import Result, Table, Text


def _parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError("expected a port number, 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise ValueError("expected a port number, 1 to 65535")
    return port


PORT = ParamType("PORT", _parse_port)
_ADDRESS = Param("address", TEXT, required=True, help="the listener's IP address, as `listener show` prints it")
_PORT = Param("port", PORT, required=True, help="the listener's port")
#: VerneMQ's options of `listener start` that create or change a listener: not taken here
_NEW_LISTENER_OPTIONS = ("websocket", "ssl", "http", "mountpoint", "max-connections", "nr-of-acceptors",
                         "proxy-protocol", "cafile", "certfile", "keyfile", "tls-version", "require-certificate",
                         "use-identity-as-username", "ciphers", "crlfile")


async def _show(ctx: Context, args: Args) -> Result:
    return Table(ctx.facade.listener_show())


async def _stop(ctx: Context, args: Args) -> Result:
    return Text(ctx.facade.listener_stop(args.text("address"), args.integer("port"), args.flag("kill-sessions")))


async def _start(ctx: Context, args: Args) -> Result:
    given = [name for name in _NEW_LISTENER_OPTIONS if name in args.raw]
    if given:
        raise CommandError(f"vmqpy starts only the listeners of its configuration; --{given[0]} would make a new "
                           "one: add listener.KIND.NAME and its options to the configuration and restart the node "
                           "(docs/configuration.md)", 400)
    return Text(await ctx.facade.listener_start(args.text("address"), args.integer("port")))


_NEW_OPTION_PARAMS = tuple(Param(name, COLUMN, help="VerneMQ's, to make a new listener: refused here")
                           for name in _NEW_LISTENER_OPTIONS)

COMMANDS: tuple[Command, ...] = (
    Command(("listener", "show"), "GET", "the node's MQTT listeners, running or stopped", _show),
    Command(("listener", "stop"), "POST", "make a listener refuse new connections", _stop,
            params=(_ADDRESS, _PORT,
                    Param("kill-sessions", BOOL, default=False, flag=True, short="k",
                          help="also disconnect the clients that came through it"))),
    Command(("listener", "start"), "POST", "listen again on a stopped listener", _start,
            params=(_ADDRESS, _PORT, *_NEW_OPTION_PARAMS), aliases=(("listener", "restart"),)),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("listener", "show"): ["vmq-admin listener show"],
    ("listener", "stop"): ["vmq-admin listener stop address=127.0.0.1 port=1883 --kill_sessions"],
    ("listener", "start"): ["vmq-admin listener start address=127.0.0.1 port=1883",
                            "vmq-admin listener restart address=127.0.0.1 port=1883"],
}

NOTES: dict[tuple[str, ...], str] = {}
