"""The command table: argv -> command + arguments, errors that name the fault, query round trip, handlers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from admin.commands import (
    BY_PATH,
    COMMANDS,
    NODE,
    Context,
    Table,
    Text,
    canonical_words,
    execute,
    parse_command,
    query_to_words,
    result_from_json,
    result_to_json,
    words_to_query,
)
from admin.errors import CommandError
from admin.keys import KeyStore
from admin.params import ColumnFilter
from admin.session_table import COLUMNS, DEFAULT_COLUMNS
from tests.unit.admin.fakes import FakeNode, run


def EQ(value: str) -> ColumnFilter:
    return ColumnFilter("=", value)


NO_COLUMNS: dict[str, Any] = {**{column.replace("_", "-"): None for column in COLUMNS}, "rowtimeout": 100}


@pytest.mark.parametrize(
    ("argv", "path", "values"),
    [
        ("cluster show", ("cluster", "show"), {}),
        ("cluster status", ("cluster", "show"), {}),
        ("cluster join discovery-node=vmq2@127.0.0.1", ("cluster", "join"), {"discovery-node": "vmq2@127.0.0.1"}),
        ("cluster join discovery-node=b@10.0.0.2:4405", ("cluster", "join"), {"discovery-node": "b@10.0.0.2:4405"}),
        ("cluster join discovery-node=vmq2@[::1]:44053", ("cluster", "join"), {"discovery-node": "vmq2@[::1]:44053"}),
        ("cluster join discovery-node=vmq2@::1", ("cluster", "join"), {"discovery-node": "vmq2@::1"}),
        ("cluster join --discovery-node vmq2@host-b", ("cluster", "join"), {"discovery-node": "vmq2@host-b"}),
        (
            "cluster leave node=b@h",
            ("cluster", "leave"),
            {"node": "b@h", "kill-sessions": False, "interval": 5.0, "timeout": 60.0},
        ),
        (
            "cluster leave node=b@h -k -i 2 -t 30",
            ("cluster", "leave"),
            {"node": "b@h", "kill-sessions": True, "interval": 2.0, "timeout": 30.0},
        ),
        (
            "cluster leave --kill-sessions --interval=250ms --timeout 1.5s node=b@h",
            ("cluster", "leave"),
            {"node": "b@h", "kill-sessions": True, "interval": 0.25, "timeout": 1.5},
        ),
        (
            "cluster leave node=b@h -i=3 kill-sessions=off",
            ("cluster", "leave"),
            {"node": "b@h", "kill-sessions": False, "interval": 3.0, "timeout": 60.0},
        ),
        (  # VerneMQ's spelling (underscores) names the same parameters
            "cluster leave --node=b@h --kill_sessions --timeout=30",
            ("cluster", "leave"),
            {"node": "b@h", "kill-sessions": True, "interval": 5.0, "timeout": 30.0},
        ),
        ("session show --client_id=x", ("session", "show"), {**NO_COLUMNS, "client-id": EQ("x"), "limit": 100}),
        ("session show client_id=x", ("session", "show"), {**NO_COLUMNS, "client-id": EQ("x"), "limit": 100}),
        ("session show", ("session", "show"), {**NO_COLUMNS, "limit": 100}),
        ("session show client-id=a=b limit=5", ("session", "show"),
         {**NO_COLUMNS, "client-id": EQ("a=b"), "limit": 5}),
        (  # VerneMQ's column flags: alone, a column to show; with a value, also a filter
            "session show --client_id --is_online=false --peer_host",
            ("session", "show"),
            {**NO_COLUMNS, "client-id": "", "is-online": EQ("false"), "peer-host": "", "limit": 100},
        ),
        (  # VerneMQ's regular expression filter: `=~`
            "session show --client_id=~^sensor-[0-9]+$ --user",
            ("session", "show"),
            {**NO_COLUMNS, "client-id": ColumnFilter("=~", "^sensor-[0-9]+$"), "user": "", "limit": 100},
        ),
        ("session disconnect client-id=x", ("session", "disconnect"), {"client-id": "x", "cleanup": False}),
        ("session disconnect --client_id=x -c", ("session", "disconnect"), {"client-id": "x", "cleanup": True}),
        ("retain delete topic=a/b", ("retain", "delete"), {"topic": "a/b"}),
        ("subscription show client-id=x", ("subscription", "show"), {"client-id": "x", "limit": 100}),
        ("retain show topic=a/+/c/#", ("retain", "show"),
         {"topic": "a/+/c/#", "payload": None, "qos": None, "mountpoint": None, "limit": 100, "rowtimeout": 100}),
        ("retain show --payload --topic=a/# --rowtimeout=50", ("retain", "show"),
         {"topic": "a/#", "payload": "", "qos": None, "mountpoint": None, "limit": 100, "rowtimeout": 50}),
        ("metrics show", ("metrics", "show"), {"format": "table"}),
        ("metrics show --format=vernemq", ("metrics", "show"), {"format": "vernemq"}),
        ("metadata dump", ("metadata", "dump"), {"prefix": None}),
        ("metadata dump prefix=subs", ("metadata", "dump"), {"prefix": "subs"}),
        ("node status", ("node", "status"), {}),
        ("node drain", ("node", "drain"), {"rate": 100, "timeout": 300.0}),
        ("node drain --rate=20 -t 90s", ("node", "drain"), {"rate": 20, "timeout": 90.0}),
        ("node stop", ("node", "stop"), {}),
        ("api-key create", ("api-key", "create"), {"scope": "admin", "expires": None}),
        ("api-key create scope=metrics expires=2027-01-01T00:00:00", ("api-key", "create"),
         {"scope": "metrics", "expires": "2027-01-01T00:00:00"}),
        ("api-key show", ("api-key", "show"), {}),
        ("api-key delete key=abcdef0123", ("api-key", "delete"), {"key": "abcdef0123"}),
    ],
)
def test_parse(argv: str, path: tuple[str, ...], values: dict[str, Any]) -> None:
    cmd, args = parse_command(argv.split())
    assert cmd.path == path
    assert args.values == values


def test_settings_words() -> None:
    cmd, args = parse_command(["show", "allow_publish_during_netsplit", "max_inflight_messages"])
    assert cmd.path == ("show",) and args.names == ("allow_publish_during_netsplit", "max_inflight_messages")
    cmd, args = parse_command(["set", "allow_publish_during_netsplit=on", "max_inflight_messages=5"])
    assert cmd.path == ("set",)
    assert args.pairs == (("allow_publish_during_netsplit", "on"), ("max_inflight_messages", "5"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("", "no command given"),
        ("clustr show", "unknown command 'clustr show'; commands: acl, api-key, cluster,"),
        ("cluster shwo", "unknown command 'cluster shwo'; 'cluster' has: join, leave, show, status"),
        ("cluster", "unknown command 'cluster'; 'cluster' has:"),
        ("cluster show extra", "unexpected word 'extra' for 'cluster show'"),
        ("cluster join", "missing parameter 'discovery-node' for 'cluster join'"),
        ("cluster join discovery-node=nohost", "bad value 'nohost' for 'discovery-node' of 'cluster join'"),
        ("cluster join discovery-node=a@h:0", "the port must be a number from 1 to 65535"),
        ("cluster join discovery-node=a@h:99999", "the port must be a number from 1 to 65535"),
        ("cluster join discovery-node=a@[zz]:1", "is not an IPv6 address"),
        ("cluster join discovery-node=a@b@c", "expected NAME@HOST"),
        ("cluster join discovery-node=a@h discovery-node=b@h", "parameter 'discovery-node' given twice"),
        ("cluster leave node=b@h -x", "unknown option '-x' for 'cluster leave'"),
        ("cluster leave node=b@h --kill", "unknown option '--kill' for 'cluster leave'"),
        ("cluster leave node=b@h -i", "option '-i' of 'cluster leave' needs a value (SECONDS)"),
        ("cluster leave node=b@h -i soon", "bad value 'soon' for 'interval'"),
        ("cluster leave node=b@h -t -1", "0 or more"),
        ("cluster leave node=b@h -k=maybe", "expected on/off"),
        ("session show limit=0", "bad value '0' for 'limit' of 'session show': expected a whole number of at least 1"),
        ("session show limit=ten", "bad value 'ten' for 'limit'"),
        ("session show client=x", "unknown parameter 'client' for 'session show'; usage: session show [--client-id["),
        ("session show client-id=", "bad value '' for 'client-id'"),
        ("retain show topic=a/#/b", "'#' must be a whole level and the last one"),
        ("retain show topic=a/b+", "'+' must be a whole level"),
        ("show a=b", "unknown parameter 'a' for 'show'"),
        ("set", "'set' needs at least one KEY=VALUE"),
        ("set allow_anonymous", "unexpected word 'allow_anonymous' for 'set'"),
        ("set a=1 a=2", "setting 'a' given twice"),
        ("set bad/name=1", "unknown parameter 'bad/name' for 'set'"),
        ("api-key delete", "missing parameter 'key'"),
    ],
)
def test_parse_errors(argv: str, message: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_command(argv.split())
    assert message in info.value.message
    assert info.value.status in (400, 404)


def test_secret_values_are_not_repeated() -> None:
    with pytest.raises(CommandError) as info:
        parse_command(["api-key", "delete", "key="])
    assert "bad value for 'key'" in info.value.message


def test_unknown_command_is_404_and_bad_parameter_400() -> None:
    with pytest.raises(CommandError) as unknown:
        parse_command(["nosuch", "thing"])
    with pytest.raises(CommandError) as bad:
        parse_command(["session", "show", "limit=x"])
    assert (unknown.value.status, bad.value.status) == (404, 400)


def test_node_type_keeps_text() -> None:
    assert NODE.parse(" vmq2@127.0.0.1:44053 ") == "vmq2@127.0.0.1:44053"


def test_table_shape() -> None:
    """Reads are GET, changes are POST; every path and alias is unique; flags have distinct short letters."""
    posts = {c.name for c in COMMANDS if c.method == "POST"}
    assert posts == {
        "cluster join", "cluster leave", "set", "log level", "api-key create", "api-key delete", "session disconnect",
        "session unsubscribe", "retain delete", "retain delete-expired", "node drain", "node stop", "acl reload",
        "session reauthorize", "listener stop",
        "listener start", "api-key add",
    }
    assert {c.method for c in COMMANDS} == {"GET", "POST"}
    assert BY_PATH[("cluster", "status")] is BY_PATH[("cluster", "show")]
    for cmd in COMMANDS:
        shorts = [p.short for p in cmd.params if p.short]
        assert len(shorts) == len(set(shorts)), cmd.name
        for p in cmd.params:
            assert p.help, (cmd.name, p.name)
            if p.default is not None:
                assert not p.required


@pytest.mark.parametrize(
    "words",
    [
        ["cluster", "leave", "node=b@h", "-k", "-i", "2", "-t", "30"],
        ["session", "show", "client-id=a b&c=d+e%20f/é", "limit=3"],
        ["retain", "show", "topic=a/+/c/#"],
        ["set", "allow_publish_during_netsplit=on", "max_inflight_messages=5"],
        ["show", "allow_publish_during_netsplit", "max_inflight_messages"],
        ["api-key", "delete", "key=abc/+=x"],
    ],
)
def test_query_round_trip(words: list[str]) -> None:
    """What the CLI sends (canonical words in a query string) parses to the same arguments on the server."""
    cmd, args = parse_command(words)
    query = words_to_query(canonical_words(cmd, args))
    assert " " not in query and "&c=" not in query and "é" not in query
    again = parse_command([*cmd.path, *query_to_words(query)])[1]
    assert again == args
    assert again.values == args.values and again.names == args.names and again.pairs == args.pairs


def test_query_words_keep_plus_and_bare_words() -> None:
    assert query_to_words("node=b%40h&--kill-sessions&topic=a/+/c&&x%20y") == [
        "node=b@h",
        "--kill-sessions",
        "topic=a/+/c",
        "x y",
    ]


def test_result_json_shapes() -> None:
    assert result_to_json(Table([{"a": 1}])) == {"type": "table", "table": [{"a": 1}]}
    assert result_to_json(Text("Done")) == {"type": "text", "text": "Done"}
    assert result_from_json({"type": "table", "table": [{"a": 1}]}) == Table([{"a": 1}])
    assert result_from_json({"type": "text", "text": "x"}) == Text("x")
    bad_docs: list[Any] = [{"type": "error", "error": "x"}, {"type": "table", "table": [1]}, [], "x"]
    for bad in bad_docs:
        with pytest.raises(ValueError):
            result_from_json(bad)


# -- handlers against the FakeNode, without HTTP --------------------------------------------------------------------
async def test_handlers(ctx: Context, fake: FakeNode) -> None:
    assert await run(ctx, "cluster status") == Table(fake.cluster_show())
    assert await run(ctx, "cluster join discovery-node=vmq2@127.0.0.1") == Text("Done")
    assert [r["Node"] for r in fake.members] == ["vmq1@127.0.0.1", "vmq2@127.0.0.1"]
    assert await run(ctx, "cluster leave node=vmq2@127.0.0.1 -k -t 9") == Text("vmq2@127.0.0.1 left the cluster")
    assert fake.last_call() == ("cluster_leave", "vmq2@127.0.0.1", True, 5.0, 9.0)
    assert (await run(ctx, "session show client-id=sensor-2")).rows[0]["user"] == "bob"
    assert fake.last_call() == ("session_show", [("client_id", "=", "sensor-2")], False, 100)
    assert len((await run(ctx, "subscription show limit=1")).rows) == 1
    assert (await run(ctx, "retain show topic=sensors/+/temp")).rows == [{"topic": "sensors/a/temp", "payload": "21.5"}]
    assert (await run(ctx, "metrics show")).rows == [
        {"Metric": "mqtt_publish_received", "Value": 12},
        {"Metric": "queue_seconds_avg", "Value": 0.25},
        {"Metric": "router_matches_local", "Value": 7},
    ]
    assert [r["key"] for r in (await run(ctx, "metadata dump prefix=ret")).rows] == ["sensors/a/temp"]
    assert await run(ctx, "node drain -r 5 -t 10") == Text("vmq1@127.0.0.1 drained: disconnected 0 clients; "
                                                         "0 connections left")
    assert fake.last_call() == ("node_drain", 5.0, 10.0)
    assert await run(ctx, "node stop") == Text("vmq1@127.0.0.1 is stopping")
    fake.ready = (False, "cluster not ready: vmq2 unreachable")
    assert await run(ctx, "node status") == Table(
        [{"Node": "vmq1@127.0.0.1", "Ready": False, "Reason": "cluster not ready: vmq2 unreachable"}]
    )


async def test_session_show_columns_and_filters(ctx: Context, fake: FakeNode) -> None:
    default = (await run(ctx, "session show")).rows
    assert list(default[0]) == ["client_id", "is_online", "mountpoint", "peer_host", "peer_port", "user", "node"]
    assert [r["client_id"] for r in default] == ["sensor-1", "sensor-2"]
    asked = await run(ctx, "session show --client_id --is_online=off --user")
    assert asked.rows == [{"client_id": "sensor-2", "is_online": False, "user": "bob"}]
    assert fake.last_call() == ("session_show", [("is_online", "=", "false")], False, 100)
    per_subscription = await run(ctx, "session show --client_id --topic --qos")
    assert per_subscription.rows == [
        {"client_id": "sensor-1", "topic": "cmd/sensor-1/#", "qos": 1},
        {"client_id": "sensor-2", "topic": "cmd/+/all", "qos": 0},
        {"client_id": "sensor-2", "topic": "cmd/sensor-2", "qos": 2},
    ]
    assert (await run(ctx, "session show --qos=2 --client_id --topic")).rows == [
        {"client_id": "sensor-2", "topic": "cmd/sensor-2", "qos": 2}
    ]
    assert list((await run(ctx, "session show --client_id=sensor-2")).rows[0]) == list(DEFAULT_COLUMNS)
    assert len((await run(ctx, "session show --topic limit=2")).rows) == 2
    fake.session_note = "no answer from vmq2@127.0.0.1"
    assert (await run(ctx, "session show")).note == "no answer from vmq2@127.0.0.1"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("session show --is_online=maybe", "bad value for '--is_online' of 'session show': is_online is true or false"),
        ("session show --peer_port=http", "peer_port is a whole number, not 'http'"),
        ("session show --client_id --client_id", "parameter 'client-id' given twice"),
        ("session disconnect", "missing parameter 'client-id' for 'session disconnect'"),
        ("retain delete", "missing parameter 'topic' for 'retain delete'"),
    ],
)
async def test_session_and_retain_argument_errors(ctx: Context, argv: str, message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        await run(ctx, argv)


async def test_session_disconnect_and_retain_delete(ctx: Context, fake: FakeNode) -> None:
    assert await run(ctx, "session disconnect client-id=sensor-1") == Text("sensor-1: disconnected")
    assert fake.last_call() == ("session_disconnect", "sensor-1", False)
    assert await run(ctx, "session disconnect --client_id=sensor-1 --cleanup") == Text(
        "sensor-1: disconnected, session removed"
    )
    with pytest.raises(CommandError, match="no session of client id 'sensor-1'") as err:
        await run(ctx, "session disconnect client-id=sensor-1")
    assert err.value.status == 404
    deleted = await run(ctx, "retain delete topic=sensors/a/temp")
    assert deleted == Text("deleted the retained message of sensors/a/temp")
    assert [r["topic"] for r in fake.retained] == ["sensors/b/hum"]


async def test_facade_errors_pass_through(ctx: Context, fake: FakeNode) -> None:
    fake.unreachable.add("vmq9@127.0.0.1")
    with pytest.raises(CommandError) as info:
        await run(ctx, "cluster join discovery-node=vmq9@127.0.0.1")
    assert (info.value.status, info.value.message) == (503, "discovery node vmq9@127.0.0.1 is not reachable")


async def test_show_and_set(ctx: Context, fake: FakeNode) -> None:
    assert await run(ctx, "show allow_publish_during_netsplit") == Table(
        [{"Setting": "allow_publish_during_netsplit", "Value": "off"}]
    )
    assert await run(ctx, "set allow_publish_during_netsplit=true max_inflight_messages=5") == Text(
        "allow_publish_during_netsplit = on\nmax_inflight_messages = 5"
    )
    assert fake.settings == {"allow_publish_during_netsplit": "on", "max_inflight_messages": "5"}


async def test_set_checks_every_key_before_changing_any(ctx: Context, fake: FakeNode) -> None:
    with pytest.raises(CommandError) as info:
        await run(ctx, "set allow_publish_during_netsplit=on no_such_setting=1")
    assert (info.value.status, info.value.message) == (404, "unknown setting 'no_such_setting'")
    assert fake.settings["allow_publish_during_netsplit"] == "off"
    assert not [c for c in fake.calls if c[0] == "set_setting"]


async def test_api_key_commands(ctx: Context, keys: KeyStore, data_dir: Path) -> None:
    created = await run(ctx, "api-key create")
    assert isinstance(created, Text) and keys.verify(created.text)
    listing = await run(ctx, "api-key show")
    assert len(listing.rows) == 2 and {r["Node key"] for r in listing.rows} == {True, False}
    deleted = await run(ctx, f"api-key delete key={created.text}")
    assert deleted.text.startswith("deleted API key ") and not keys.verify(created.text)


async def test_execute_rejects_bad_handler_answers(ctx: Context) -> None:
    from dataclasses import replace

    from admin.commands import Args

    async def bad(ctx: Context, args: Args) -> Any:
        return {"not": "a result"}

    cmd = replace(BY_PATH[("node", "status")], handler=bad)
    with pytest.raises(TypeError, match="handler of 'node status' answered dict"):
        await execute(cmd, Args({}, {}), ctx)


async def test_acl_reload(ctx: Context, fake: FakeNode) -> None:
    assert await run(ctx, "acl reload") == Text("ACL /etc/vmq.acl reloaded (3 rules)")
    assert fake.last_call() == ("acl_reload",)
    fake.acl_error = "ACL /etc/vmq.acl not reloaded, the previous one stays in force: /etc/vmq.acl:2: ..."
    with pytest.raises(CommandError, match=r"/etc/vmq\.acl:2:") as err:
        await run(ctx, "acl reload")
    assert err.value.status == 400
