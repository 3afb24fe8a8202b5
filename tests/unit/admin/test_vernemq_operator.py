"""VerneMQ's operator commands that vmqpy gained with issue 36, through the command table and a FakeNode:
`session show` with `=~`, `session unsubscribe`, `retain delete-expired`, `log level logger=`, `log show config`,
`show` without keys, `set --all` / `--node=`, and `set --help`'s list of keys."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from admin.cli.main import command_help
from admin.command import Context
from admin.commands import BY_PATH, canonical_words, parse_args, parse_command, query_to_words, words_to_query
from admin.errors import CommandError
from admin.keys import KeyStore
from admin.params import ColumnFilter
from admin.results import Table, Text
from tests.unit.admin.fakes import FakeNode, run
from vmqpy import config as config_module
from vmqpy import runtime_settings


async def test_regex_filter_keeps_what_it_matches(ctx: Context, fake: FakeNode) -> None:
    rows = (await run(ctx, "session show --client_id=~-2$ --user")).rows
    assert rows == [{"client_id": "sensor-2", "user": "bob"}]
    assert fake.last_call() == ("session_show", [("client_id", "=~", "-2$")], False, 100)
    assert [r["client_id"] for r in (await run(ctx, "session show --client_id=~^sensor")).rows] == [
        "sensor-1", "sensor-2"]
    assert (await run(ctx, "session show --user=~^b --topic=~sensor --qos")).rows == [
        {"user": "bob", "topic": "cmd/sensor-2", "qos": 2}]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("session show --client_id=~(", "bad value '~(' for 'client-id' of 'session show': not a regular expression"),
        ("session show --queue_size=many", "queue_size is a whole number, not 'many'"),
        ("session unsubscribe client-id=a topic=a/#/b", "'#' must be a whole level"),
        ("session unsubscribe client-id=a", "missing parameter 'topic'"),
        ("session unsubscribe client-id=a topic=x -m mp", "vmqpy has no mountpoints"),
        ("log level logger=lager level=info", "no logger 'lager'"),
        ("log level logger=default level=loud", "bad level 'loud'"),
        ("set max_inflight_messages=5 --all --node=vmq1@127.0.0.1", "give --all or --node=NAME, not both"),
        ("set max_inflight_messages=5 --node=nobody", "expected NAME@HOST"),
    ],
)
async def test_refusals_name_the_cause(ctx: Context, line: str, message: str) -> None:
    with pytest.raises(CommandError, match=re.escape(message)) as caught:
        await run(ctx, line)
    assert caught.value.status in (400, 404)


async def test_session_unsubscribe(ctx: Context, fake: FakeNode) -> None:
    answer = await run(ctx, "session unsubscribe client-id=sensor-2 topic=cmd/+/all")
    assert answer == Text("Done\nsensor-2 on vmq1@127.0.0.1: unsubscribed from cmd/+/all")
    assert (await run(ctx, "session show --client_id=sensor-2 --topic")).rows == [
        {"client_id": "sensor-2", "topic": "cmd/sensor-2"}]
    with pytest.raises(CommandError, match="has no subscription"):
        await run(ctx, "session unsubscribe client-id=sensor-2 topic=cmd/+/all")
    await run(ctx, "session unsubscribe --client_id=sensor-1 --topic=cmd/sensor-1/# -p")  # VerneMQ's spelling


async def test_retain_delete_expired_answers_verneMQs_table(ctx: Context, fake: FakeNode) -> None:
    fake.retained.append({"topic": "old", "payload": "x", "expired": True})
    assert await run(ctx, "retain delete-expired") == Table([{"expired": 1}])
    assert await run(ctx, "retain delete-expired") == Table([{"expired": 0}])


class LogNode(FakeNode):
    def set_setting(self, key: str, value: str) -> str:
        self.settings[key] = value
        return value


async def test_log_level_both_forms(keys: KeyStore) -> None:
    fake = LogNode()
    ctx = Context(fake, keys)
    fake.settings["log.console.level"] = "info"
    fake.settings.update({"log.console": "console", "log.file": "", "log.console.file": ""})
    assert await run(ctx, "log level logger=default level=debug") == Text("log.console.level = debug")
    assert await run(ctx, "log level level=warn") == Text("log.console.level = warning")  # VerneMQ's name
    assert await run(ctx, "log level") == Text("log.console.level = warning")
    assert await run(ctx, "log show config") == Table(
        [{"logger": "default", "level": "warning", "type": "console", "file": ""}])


async def test_show_without_keys_lists_every_setting(ctx: Context, fake: FakeNode) -> None:
    rows = (await run(ctx, "show")).rows
    assert [r["Setting"] for r in rows] == sorted(fake.settings)
    assert set(rows[0]) == {"Setting", "Value", "Run time"}


async def test_set_on_members(ctx: Context, fake: FakeNode) -> None:
    assert await run(ctx, "set max_inflight_messages=30 --all") == Text("vmq1@127.0.0.1: max_inflight_messages = 30")
    assert fake.last_call() == ("set_setting", "max_inflight_messages", "30")
    await run(ctx, "set max_inflight_messages=31 --node=vmq1@127.0.0.1")
    assert [c for c in fake.calls if c[0] == "set_settings_on"] == [
        ("set_settings_on", [("max_inflight_messages", "30")], None),
        ("set_settings_on", [("max_inflight_messages", "31")], "vmq1@127.0.0.1")]
    with pytest.raises(CommandError, match="no member"):
        await run(ctx, "set max_inflight_messages=5 --node=vmq9@127.0.0.1")


def test_set_help_lists_the_runtime_keys() -> None:
    text = command_help(BY_PATH[("set",)])
    for key, when in runtime_settings.RUNTIME.items():
        assert re.search(rf"^  {re.escape(key)} +{re.escape(when)}$", text, re.MULTILINE), key
    assert "--all" in text and "--node=NAME@HOST[:PORT]" in text


def test_runtime_keys_exist_and_every_other_key_says_why() -> None:
    assert set(runtime_settings.RUNTIME) <= set(config_module.SCHEMA)
    assert {"max_inflight_messages", "max_online_messages", "max_offline_messages", "max_message_rate",
            "retry_interval", "persistent_client_expiration", "allow_anonymous"} <= set(runtime_settings.RUNTIME)
    for key in set(config_module.SCHEMA) - set(runtime_settings.RUNTIME):
        assert runtime_settings.why_not(key), key
    assert "bound" in runtime_settings.why_not("listener.tcp.default") or "open" in runtime_settings.why_not(
        "listener.tcp.default")
    assert "cookie" in runtime_settings.why_not("distributed_cookie")


async def test_retain_show_takes_the_regex_filter_too(ctx: Context) -> None:
    assert (await run(ctx, "retain show --payload=~^2")).rows == [{"topic": "sensors/a/temp", "payload": "21.5"}]
    assert (await run(ctx, "retain show --payload=40")).rows == [{"topic": "sensors/b/hum", "payload": "40"}]
    with pytest.raises(CommandError, match="not a regular expression"):
        await run(ctx, "retain show --payload=~[")


@given(hs.sampled_from(["client_id", "user", "topic", "payload", "statename"]),
       hs.sampled_from(["", "~"]),
       hs.text(alphabet="abc-_.*^$()+#/ %&=~", min_size=1, max_size=12))
def test_filters_survive_the_way_to_the_node(column: str, op: str, value: str) -> None:
    """A filter written on the command line reaches the node's HTTP API as the same filter (one grammar: the CLI
    sends `canonical_words` as a query string, the API parses it back)."""
    line = ["session", "show", f"--{column}={op}{value}"]
    try:
        cmd, args = parse_command(line)
    except CommandError:
        return  # a bad expression: refused before anything is sent
    again = parse_args(cmd, query_to_words(words_to_query(canonical_words(cmd, args))))
    assert again == args
    text = op + value  # VerneMQ's rule: a value that starts with ~ is a regular expression
    expected = ColumnFilter("=~", text[1:]) if text.startswith("~") else ColumnFilter("=", text)
    assert args.values[column.replace("_", "-")] == expected
