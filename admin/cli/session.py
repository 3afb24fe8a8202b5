"""`vmq-admin session show`, `session disconnect` and `session reauthorize` (HTTP `/api/v1/session/...`): the
table entries, their handlers and the examples for the help. All three answer for the whole cluster from any
node."""

from __future__ import annotations

from admin import session_table
from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import BOOL, COLUMN, LIMIT, ROWTIMEOUT, TEXT, Args, Param
from admin.results import Result, Table, Text

_COLUMN_HELP = {
    "client_id": "the client id",
    "is_online": "whether the client is connected (true/false)",
    "node": "the node that holds the session",
    "peer_host": "the client's address",
    "peer_port": "the client's port",
    "user": "the user name of its CONNECT",
    "protocol": "MQTT protocol level (4: 3.1.1, 5: 5.0)",
    "mountpoint": "always empty: vmqpy has no mountpoints",
    "clean_session": "true when the session ends with its connection",
    "waiting_acks": "QoS 1/2 messages sent and not yet acknowledged",
    "queued": "messages queued for the client",
    "dropped": "messages dropped because its queue was full",
    "topic": "a subscription's topic filter (one row per subscription)",
    "qos": "a subscription's QoS (one row per subscription)",
}
_COLUMN_PARAMS = tuple(Param(c.replace("_", "-"), COLUMN, help=_COLUMN_HELP[c]) for c in session_table.COLUMNS)


async def _show(ctx: Context, args: Args) -> Result:
    given = {p.name.replace("-", "_"): args.values[p.name] for p in _COLUMN_PARAMS if args.values[p.name] is not None}
    filters: dict[str, str] = {}
    for column, text in given.items():
        if text:
            try:
                filters[column] = session_table.normalise_filter(column, str(text))
            except ValueError as exc:
                raise CommandError(f"bad value for '--{column}' of 'session show': {exc}") from None
    # columns written alone choose what is shown (with those that filter); filters alone keep the default columns
    chosen = any(text == "" for text in given.values())
    columns = [c for c in session_table.COLUMNS if c in given] if chosen else list(session_table.DEFAULT_COLUMNS)
    per_subscription = any(c in given for c in session_table.SUBSCRIPTION_COLUMNS)
    limit = args.integer("limit")
    rows, note = await ctx.facade.session_show(filters, per_subscription, limit)
    return Table(session_table.project(session_table.order(rows)[:limit], columns), note)


async def _disconnect(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.session_disconnect(args.text("client-id"), args.flag("cleanup")))


async def _reauthorize(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.session_reauthorize(args.text("client-id"), args.text("username")))


COMMANDS: tuple[Command, ...] = (
    Command(("session", "show"), "GET", "client sessions of the whole cluster", _show,
            params=(*_COLUMN_PARAMS, LIMIT, ROWTIMEOUT)),
    Command(("session", "disconnect"), "POST", "disconnect a client wherever it is connected", _disconnect,
            params=(Param("client-id", TEXT, required=True, help="the client to disconnect"),
                    Param("cleanup", BOOL, default=False, flag=True, short="c",
                          help="also end its session: subscriptions, queued messages and offline state"))),
    Command(("session", "reauthorize"), "POST", "check a session's subscriptions against the ACL again", _reauthorize,
            params=(Param("username", TEXT, required=True, help="the user name the ACL is read for"),
                    Param("client-id", TEXT, required=True, help="the client whose subscriptions are checked"))),
)  # fmt: skip

EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("session", "show"): [
        "vmq-admin session show",
        "vmq-admin session show --client_id --is_online --node --peer_host",
        "vmq-admin session show --client_id=sensor-17 --topic --qos",
        "vmq-admin session show --is_online=false --json",
    ],
    ("session", "disconnect"): [
        "vmq-admin session disconnect client-id=sensor-17",
        "vmq-admin session disconnect client-id=sensor-17 --cleanup",
    ],
    ("session", "reauthorize"): ["vmq-admin session reauthorize username=alice client-id=sensor-17"],
}

NOTES: dict[tuple[str, ...], str] = {}
