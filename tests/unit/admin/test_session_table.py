"""The rows of `vmq-admin session show` (admin/session_table.py): the filter grammar (`=` and VerneMQ's `=~`),
per-subscription and per-message rows, projection; and the full row of a session (vmqpy/admin_rows.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from admin import session_table as st
from admin.params import FILTERABLE, ColumnFilter
from vmqpy import admin_rows
from vmqpy.broker.core.session import Session
from vmqpy.mqtt.packets import SubOptions
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import SubEntry

ROWS: list[dict[str, Any]] = [
    {"client_id": "a", "is_online": True, "node": "n1", "peer_port": 5, "user": None,
     "subscriptions": [["x/#", 1, True, False]], "messages": [[1, 1, "x/1", False, "hi"]]},
    {"client_id": "b", "is_online": False, "node": "n2", "peer_port": None, "user": "bob", "subscriptions": [],
     "messages": [[4, 2, "y", True, "p"], [5, 1, "y", False, "q"]]},
    {"client_id": "c", "is_online": True, "node": "n2", "peer_port": 7, "user": "eve",
     "subscriptions": [["y", 0], ["z/+", 2]]},  # as a member of an older version sends them: [topic, qos]
]  # fmt: skip


def eq(column: str, value: str) -> st.Filter:
    return st.make_filter(column, "=", value)


def rx(column: str, pattern: str) -> st.Filter:
    return st.make_filter(column, "=~", pattern)


@pytest.mark.parametrize(
    ("filters", "per_subscription", "per_message", "limit", "clients"),
    [
        ([], False, False, 10, ["a", "b", "c"]),
        ([eq("is_online", "true")], False, False, 10, ["a", "c"]),
        ([eq("is_online", "off")], False, False, 10, ["b"]),
        ([eq("user", "bob")], False, False, 10, ["b"]),
        ([("user", "=", "")], False, False, 10, ["a"]),  # no user name
        ([eq("node", "n2"), eq("is_online", "true")], False, False, 10, ["c"]),
        ([], False, False, 2, ["a", "b"]),
        ([], True, False, 10, ["a", "c", "c"]),  # b has no subscription: no row
        ([eq("qos", "2")], True, False, 10, ["c"]),
        ([eq("topic", "x/#")], True, False, 10, ["a"]),
        ([eq("rap", "true")], True, False, 10, ["a"]),
        ([eq("peer_port", "7")], False, False, 10, ["c"]),
        # VerneMQ's `=~`: a regular expression found anywhere in the value (re:run, not a whole match)
        ([rx("client_id", "^[ab]$")], False, False, 10, ["a", "b"]),
        ([rx("client_id", "")], False, False, 10, ["a", "b", "c"]),
        ([rx("user", "o")], False, False, 10, ["b"]),
        ([rx("user", "^$")], False, False, 10, ["a"]),
        ([rx("node", "2$"), rx("user", "^e")], False, False, 10, ["c"]),
        ([rx("topic", r"\+")], True, False, 10, ["c"]),
        ([rx("peer_port", "^[57]$")], False, False, 10, ["a", "c"]),
        # one row per queued message
        ([], False, True, 10, ["a", "b", "b"]),
        ([eq("msg_qos", "2")], False, True, 10, ["b"]),
        ([eq("dup", "false"), rx("payload", "^q")], False, True, 10, ["b"]),
        ([], True, True, 10, ["a"]),  # subscriptions times messages
    ],
)
def test_select(
    filters: list[st.Filter], per_subscription: bool, per_message: bool, limit: int, clients: list[str]
) -> None:
    rows = st.select(ROWS, filters, per_subscription, limit, per_message)
    assert [r["client_id"] for r in rows] == clients


def test_rows_per_subscription_and_message_carry_their_columns() -> None:
    [row] = st.select(ROWS[:1], [], True, 10, True)
    assert {k: row[k] for k in (*st.SUBSCRIPTION_COLUMNS, *st.MESSAGE_COLUMNS)} == {
        "topic": "x/#", "qos": 1, "rap": True, "no_local": False,
        "msg_ref": 1, "msg_qos": 1, "routing_key": "x/1", "dup": False, "payload": "hi",
    }  # fmt: skip
    assert "subscriptions" not in row and "messages" not in row
    assert st.select(ROWS[2:], [], True, 10)[0]["rap"] is None  # an older member's row: the option is unknown


@pytest.mark.parametrize(
    ("column", "text", "expected"),
    [("is_online", "on", "true"), ("is_offline", "FALSE", "false"), ("qos", "01", "1"), ("user", "On", "On"),
     ("queue_size", "12", "12"), ("no_local", "yes", "true")],
)
def test_normalise_filter(column: str, text: str, expected: str) -> None:
    assert st.normalise_filter(column, text) == expected


@pytest.mark.parametrize(
    ("column", "op", "value", "message"),
    [("is_online", "=", "maybe", "is_online is true or false"), ("peer_port", "=", "-1", "whole number"),
     ("queue_size", "=", "x", "whole number"), ("client_id", "=~", "(", "not a regular expression"),
     ("client_id", "=~", "a[", "not a regular expression"), ("queue_pid", "=", "x", "no column"),
     ("client_id", ">", "1", "no filter operator")],
)
def test_make_filter_refuses(column: str, op: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        st.make_filter(column, op, value)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("x", ColumnFilter("=", "x")), ("~x.*", ColumnFilter("=~", "x.*")), ("~", ColumnFilter("=~", "")),
     ("a~b", ColumnFilter("=", "a~b")), ("=x", ColumnFilter("=", "=x"))],
)
def test_the_column_parameter_reads_verneMQs_grammar(text: str, parsed: ColumnFilter) -> None:
    assert FILTERABLE.parse(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["", "~(", "~[a-", "~*"])
def test_the_column_parameter_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        FILTERABLE.parse(text)


def test_filters_from_another_node() -> None:
    assert st.filters_of([["client_id", "=~", "^a"], ["is_online", "=", "on"]]) == [
        ("client_id", "=~", "^a"), ("is_online", "=", "true")]
    assert st.filters_of({"user": "bob"}) == [("user", "=", "bob")]  # a member of an older version
    for bad in ("client_id", [["client_id", "="]], [["client_id", "=~", "("]], [[1, "=", "x"]]):
        with pytest.raises(ValueError):
            st.filters_of(bad)


CLIENT_IDS = hs.text(alphabet="abcxyz-_019", min_size=1, max_size=8)


@given(hs.lists(CLIENT_IDS, min_size=1, max_size=12, unique=True), CLIENT_IDS)
def test_an_escaped_regex_finds_what_the_text_contains(ids: list[str], wanted: str) -> None:
    """`=~` with an escaped text keeps the rows whose value contains it; `=~^TEXT$` is equality."""
    rows = [{"client_id": i} for i in ids]
    contains = st.select(rows, [rx("client_id", re.escape(wanted))], False, 100)
    assert [r["client_id"] for r in contains] == [i for i in ids if wanted in i]
    whole = st.select(rows, [rx("client_id", f"^{re.escape(wanted)}$")], False, 100)
    assert whole == st.select(rows, [eq("client_id", wanted)], False, 100)


@given(hs.lists(CLIENT_IDS, max_size=12), hs.integers(min_value=1, max_value=20))
def test_select_keeps_order_and_limit(ids: list[str], limit: int) -> None:
    rows = [{"client_id": i} for i in ids]
    assert st.select(rows, [], False, limit) == rows[:limit]


def test_project_and_order() -> None:
    unordered = [{"client_id": "b", "node": "n1"}, {"client_id": "a", "node": "n2"}, {"client_id": "a", "node": "n1"}]
    rows = st.order(unordered)
    assert st.project(rows, ["node", "client_id"]) == [
        {"node": "n1", "client_id": "a"}, {"node": "n2", "client_id": "a"}, {"node": "n1", "client_id": "b"},
    ]  # fmt: skip
    assert list(st.project(rows, ["user"])[0]) == ["user"]  # a column a row lacks is shown empty


def test_default_columns_are_verneMQs() -> None:
    assert st.DEFAULT_COLUMNS == ("client_id", "is_online", "mountpoint", "peer_host", "peer_port", "user", "node")
    assert set(st.DEFAULT_COLUMNS) <= set(st.COLUMNS)


# --------------------------------------------------------------------------------------- a session's full row


class Conn:
    peer = ("10.0.0.7", 50123)
    username = "alice"


class Sink:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def write_packet(self, packet: Any) -> None:
        self.sent.append(packet)

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False) -> None:
        self.sent.append((message.topic, packet_id))

    def can_write(self) -> bool:
        return True

    def take_over(self, reason_code: int = 0x8E) -> tuple[Message | None, float]:
        return None, 0.0


def make_session(expiry: float | None = 3600.0) -> Session:
    session = Session("dev-1", protocol_level=5, expiry_interval=expiry, max_inflight=1, max_online=10,
                      max_offline=10)
    session.subscriptions["a/+"] = SubEntry("a/+", "a/+", SubOptions(qos=1, no_local=True, retain_as_published=True))
    return session


def test_the_row_of_an_online_session() -> None:
    session = make_session()
    session.attach(Sink(), window=1, max_packet_size=0, now=1000.5)
    for n in range(3):  # a window of 1: one in flight, two queued
        session.deliver(Message(f"a/{n}", b"p%d" % n, 1), 1, False, [], 1001.0)
    row = admin_rows.session_row(session, Conn(), "vmq1@h", with_messages=True)
    assert {k: row[k] for k in st.SESSION_COLUMNS} == {
        "client_id": "dev-1", "is_online": True, "node": "vmq1@h", "peer_host": "10.0.0.7", "peer_port": 50123,
        "user": "alice", "protocol": 5, "mountpoint": "", "clean_session": False, "waiting_acks": 1, "queued": 2,
        "dropped": 0, "queue_size": 3, "offline_messages": 0, "online_messages": 3, "is_offline": False,
        "statename": "online", "deliver_mode": "fanout", "num_sessions": 1, "is_plugin": False,
        "queue_started_at": 1000500, "session_started_at": 1000500, "session_expiry_interval": 3600,
    }  # fmt: skip
    assert row["subscriptions"] == [["a/+", 1, True, True]]
    assert [(m[0], m[2], m[3], m[4]) for m in row["messages"]] == [
        (1, "a/0", True, "p0"), (2, "a/1", False, "p1"), (3, "a/2", False, "p2")]


def test_the_row_of_an_offline_session() -> None:
    session = make_session(expiry=None)
    session.attach(Sink(), window=5, max_packet_size=0, now=50.0)
    session.detach(60.0)
    session.deliver(Message("a/b", b"\xff", 1), 1, False, [], 61.0)
    row = admin_rows.session_row(session, None, "vmq1@h", with_messages=False)
    assert (row["is_online"], row["is_offline"], row["statename"], row["num_sessions"]) == (False, True, "offline", 0)
    assert (row["queue_size"], row["offline_messages"], row["online_messages"]) == (1, 1, 0)
    assert (row["session_started_at"], row["queue_started_at"], row["session_expiry_interval"]) == (None, 50000, None)
    assert (row["peer_host"], row["user"]) == (None, None)
    assert "messages" not in row
    session.moving_to = "vmq2@h"
    assert admin_rows.session_row(session, None, "vmq1@h", False)["statename"] == "drain"


def test_every_column_is_in_the_row_or_its_expansion() -> None:
    session = make_session()
    session.attach(Sink(), window=5, max_packet_size=0, now=1.0)
    session.deliver(Message("a/1", b"x", 1), 1, False, [], 2.0)
    [row] = st.select([admin_rows.session_row(session, Conn(), "n", True)], [], True, 10, True)
    assert set(st.COLUMNS) <= set(row)
