"""`vmq-admin session show`, `session unsubscribe`, `session disconnect` and `session reauthorize` (HTTP
`/api/v1/session/...`): the table entries, their handlers and the examples for the help. All four answer for the
whole cluster from any node.

`session show` takes VerneMQ's columns (admin.session_table) as flags: written alone a flag shows its column,
`--column=VALUE` keeps the rows whose value is VALUE and `--column=~REGEX` those whose value the regular
expression matches (anywhere in it); without a column flag the default columns are shown."""

from __future__ import annotations

from admin import session_table
from admin.command import Command, Context
from admin.errors import CommandError
from admin.params import BOOL, FILTERABLE, LIMIT, ROWTIMEOUT, SHOW_COLUMN, TEXT, TOPIC_FILTER, Args, ColumnFilter, Param
from admin.results import Result, Table, Text

_COLUMN_HELP = {
    "client_id": "the client id",
    "is_online": "whether the client is connected (true/false)",
    "node": "the node that holds the session",
    "peer_host": "the client's address",
    "peer_port": "the client's port",
    "user": "the user name of its CONNECT",
    "protocol": "MQTT protocol level (3: 3.1, 4: 3.1.1, 5: 5.0)",
    "mountpoint": "always empty: vmqpy has no mountpoints",
    "clean_session": "true when the session ends with its connection",
    "waiting_acks": "QoS 1/2 messages sent and not yet acknowledged",
    "queued": "messages waiting in the session's queue (not yet sent)",
    "dropped": "messages dropped because its queue was full",
    "queue_size": "messages the session holds: queued and waiting for their acknowledgement",
    "offline_messages": "messages held while the client is offline (0 when online)",
    "online_messages": "messages held while the client is online (0 when offline)",
    "is_offline": "whether the client is not connected (true/false)",
    "statename": "online, offline, or drain while the session moves to another node",
    "deliver_mode": "always fanout: one connection per session",
    "num_sessions": "connections of the client: 1 online, 0 offline",
    "is_plugin": "always false: vmqpy has no plugin sessions",
    "queue_started_at": "when this node made or restored the session (unix milliseconds)",
    "session_started_at": "when the client's connection began (unix milliseconds; empty offline)",
    "session_expiry_interval": "seconds the session outlives its connection (empty: never expires)",
    "topic": "a subscription's topic filter (one row per subscription)",
    "qos": "a subscription's QoS (one row per subscription)",
    "rap": "a subscription's retain-as-published option (one row per subscription)",
    "no_local": "a subscription's no-local option (one row per subscription)",
    "msg_ref": "a queued message's number in the session (one row per queued message)",
    "msg_qos": "a queued message's QoS (one row per queued message)",
    "routing_key": "a queued message's topic (one row per queued message)",
    "dup": "whether a queued message was sent once already (one row per queued message)",
    "payload": "a queued message's payload, text or base64:... (one row per queued message)",
}
_COLUMN_PARAMS = tuple(Param(c.replace("_", "-"), FILTERABLE, help=_COLUMN_HELP[c]) for c in session_table.COLUMNS)


async def _show(ctx: Context, args: Args) -> Result:
    given = {p.name.replace("-", "_"): args.values[p.name] for p in _COLUMN_PARAMS if args.values[p.name] is not None}
    filters: list[session_table.Filter] = []
    for column, wanted in given.items():
        if isinstance(wanted, ColumnFilter):
            try:
                filters.append(session_table.make_filter(column, wanted.op, wanted.value))
            except ValueError as exc:
                raise CommandError(f"bad value for '--{column}' of 'session show': {exc}") from None
    # VerneMQ's rule: the columns written alone are shown; when none is, the default columns (filters still apply).
    # Beside those written alone, vmqpy also shows the columns that filter (VerneMQ leaves them out).
    chosen = any(wanted == SHOW_COLUMN for wanted in given.values())
    columns = [c for c in session_table.COLUMNS if c in given] if chosen else list(session_table.DEFAULT_COLUMNS)
    per_subscription = any(c in given for c in session_table.SUBSCRIPTION_COLUMNS)
    per_message = any(c in given for c in session_table.MESSAGE_COLUMNS)
    limit = args.integer("limit")
    rows, note = await ctx.facade.session_show(filters, per_subscription, limit, per_message=per_message)
    return Table(session_table.project(session_table.order(rows)[:limit], columns), note)


async def _unsubscribe(ctx: Context, args: Args) -> Result:
    if args.opt_text("mountpoint") is not None:
        raise CommandError("vmqpy has no mountpoints: leave out --mountpoint (every session is in the default one)")
    return Text(await ctx.facade.session_unsubscribe(args.text("client-id"), args.text("topic")))


async def _disconnect(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.session_disconnect(args.text("client-id"), args.flag("cleanup")))


async def _reauthorize(ctx: Context, args: Args) -> Result:
    return Text(await ctx.facade.session_reauthorize(args.text("client-id"), args.text("username")))


COMMANDS: tuple[Command, ...] = (
    Command(("session", "show"), "GET", "client sessions of the whole cluster", _show,
            params=(*_COLUMN_PARAMS, LIMIT, ROWTIMEOUT)),
    Command(("session", "unsubscribe"), "POST", "remove one subscription of a session wherever it is", _unsubscribe,
            params=(Param("client-id", TEXT, required=True, help="the client whose subscription is removed"),
                    Param("topic", TOPIC_FILTER, required=True, help="the topic filter, as the client subscribed it"),
                    Param("plugin", BOOL, default=False, flag=True, short="p",
                          help="VerneMQ's: call the plugins' unsubscribe hook; vmqpy has no plugins, nothing to call"),
                    Param("mountpoint", TEXT, flag=True, short="m",
                          help="VerneMQ's; vmqpy has no mountpoints and refuses one"))),
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
        "vmq-admin session show --client_id=~^sensor-1[0-9]$ --queue_size --statename",
        "vmq-admin session show --client_id=sensor-17 --msg_ref --routing_key --payload",
    ],
    ("session", "unsubscribe"): ["vmq-admin session unsubscribe client-id=sensor-17 topic=sensors/+/temp"],
    ("session", "disconnect"): [
        "vmq-admin session disconnect client-id=sensor-17",
        "vmq-admin session disconnect client-id=sensor-17 --cleanup",
    ],
    ("session", "reauthorize"): ["vmq-admin session reauthorize username=alice client-id=sensor-17"],
}

NOTES: dict[tuple[str, ...], str] = {}
