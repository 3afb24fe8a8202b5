"""ACL files (VerneMQ's vmq_acl format): parsing, the audience of each line, filter coverage for SUBSCRIBE,
safe pattern substitution, and properties against a naive model that enumerates topics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.acl_model import CLIENTS, ENTRIES, TOPICS, acl_text, filters, ref_covers, ref_filters
from tests.unit.broker.reference import ref_matches
from vmqpy.broker.access.acl import Access, Acl, AclEntry, AclError, covers, load_acl, parse_acl

ACL_TEXT = """\
# everyone, anonymous clients included
topic read public/#
topic write inbox
topic both/+
  # an indented comment

user alice
topic write alice/#
topic read shared/+/status
pattern read devices/%c/cmd
user bob
topic bob/#
pattern write devices/%c/state
pattern users/%u/#
pattern read %m/news
pattern read fixed/topic
pattern read dev-%c/x
"""


@pytest.fixture(scope="module")
def acl() -> Acl:
    return parse_acl(ACL_TEXT, "test.acl")


def test_entries(acl: Acl) -> None:
    assert acl.entries[:4] == (
        AclEntry(False, None, Access.READ, "public/#", 2),
        AclEntry(False, None, Access.WRITE, "inbox", 3),
        AclEntry(False, None, Access.BOTH, "both/+", 4),
        AclEntry(False, "alice", Access.WRITE, "alice/#", 8),
    )
    assert AclEntry(True, None, Access.READ, "devices/%c/cmd", 10) in acl.entries  # a pattern has no user
    assert AclEntry(False, "bob", Access.BOTH, "bob/#", 12) in acl.entries
    assert len(acl.entries) == 12


# (client id, user name, action, topic or filter, allowed); mountpoint "" unless the name says otherwise
DECISIONS: list[tuple[str, str | None, str, str, bool]] = [
    # lines before any `user`: everyone, anonymous included
    ("c1", None, "sub", "public/news", True),
    ("c1", None, "sub", "public/#", True),
    ("c1", "alice", "sub", "public/+/x", True),
    ("c1", None, "pub", "public/news", False),  # read only
    ("c1", None, "pub", "inbox", True),
    ("c1", None, "sub", "inbox", False),  # write only
    ("c1", None, "pub", "both/x", True),  # no access word: both
    ("c1", None, "sub", "both/x", True),
    ("c1", None, "sub", "both/+", True),
    ("c1", None, "sub", "both/#", False),  # both/# also matches both/x/y
    ("c1", None, "pub", "both/x/y", False),
    # per user
    ("c1", "alice", "pub", "alice/x/y", True),
    ("c1", "alice", "pub", "alice", True),
    ("c1", "alice", "sub", "alice/x", False),
    ("c1", "bob", "pub", "alice/x", False),
    ("c1", None, "pub", "alice/x", False),
    ("c1", "alice", "sub", "shared/a/status", True),
    ("c1", "alice", "sub", "shared/+/status", True),
    ("c1", "alice", "sub", "shared/#", False),
    ("c1", "alice", "sub", "$share/g/shared/a/status", True),  # judged on the filter after $share/g/
    ("c1", "alice", "sub", "$share/g", False),
    ("c1", "bob", "sub", "bob/#", True),
    ("c1", "bob", "pub", "bob/x", True),
    ("c1", "bob", "sub", "shared/a/status", False),
    ("c1", "carol", "pub", "bob/x", False),
    # patterns apply to everyone, wherever they are written
    ("dev1", None, "sub", "devices/dev1/cmd", True),
    ("dev1", "bob", "sub", "devices/dev1/cmd", True),
    ("dev1", None, "sub", "devices/dev2/cmd", False),
    ("dev1", None, "sub", "devices/+/cmd", False),
    ("dev1", None, "pub", "devices/dev1/cmd", False),
    ("dev1", None, "pub", "devices/dev1/state", True),
    ("dev1", None, "pub", "devices/dev2/state", False),
    ("dev1", "carol", "pub", "users/carol/a/b", True),
    ("dev1", "carol", "sub", "users/carol/#", True),
    ("dev1", "carol", "sub", "users/+/#", False),
    ("dev1", "carol", "pub", "users/alice/a", False),
    ("dev1", None, "pub", "users//a", False),  # %u of an anonymous client matches nothing
    ("dev1", None, "sub", "fixed/topic", True),  # a pattern without placeholders
    ("dev1", None, "sub", "dev-dev1/x", False),  # %c inside a level stays literal
    ("dev1", None, "sub", "dev-%c/x", True),
    ("dev1", None, "sub", "/news", True),  # %m of the default mountpoint ""
    # wildcard injection through substituted values
    ("+", None, "sub", "devices/+/cmd", False),
    ("+", None, "sub", "devices/other/cmd", False),
    ("#", None, "pub", "devices/x/state", False),
    ("a/+", None, "sub", "devices/a/+/cmd", False),
    ("a/b", None, "sub", "devices/a/b/cmd", False),
    ("c1", "#", "pub", "users/x/y", False),
    ("c1", "+", "pub", "users/x/y", False),
    ("c1", "a/b", "pub", "users/a/b/c", False),
    # invalid topics and filters are refused
    ("c1", None, "pub", "both/+", False),
    ("c1", None, "sub", "public/#/x", False),
    ("c1", None, "pub", "", False),
]


@pytest.mark.parametrize(("client_id", "username", "action", "topic", "allowed"), DECISIONS)
def test_decisions(acl: Acl, client_id: str, username: str | None, action: str, topic: str, allowed: bool) -> None:
    check = acl.may_publish if action == "pub" else acl.may_subscribe
    assert check(client_id, username, "", topic) is allowed


def test_mountpoint_substitution() -> None:
    acl = parse_acl("pattern read %m/news\npattern write %m/%c/#\npattern read x/%m\n", "mp.acl")
    assert acl.may_subscribe("c", None, "tenant1", "tenant1/news")
    assert not acl.may_subscribe("c", None, "tenant1", "tenant2/news")
    assert acl.may_publish("c", None, "tenant1", "tenant1/c/x")
    assert not acl.may_subscribe("c", None, "$SYS", "$SYS/news")  # '$' in the first level: refused
    assert acl.may_subscribe("c", None, "$SYS", "x/$SYS")  # elsewhere it is a plain level
    assert not acl.may_subscribe("c", None, "+", "x/+")
    assert not acl.may_subscribe("c", None, "a/b", "a/b/news")


def test_dollar_first_level_substitution_refused() -> None:
    acl = parse_acl("pattern %c/#\npattern %u\n", "d.acl")
    assert acl.may_publish("x", None, "", "x/y")
    assert not acl.may_publish("$SYS", None, "", "$SYS/broker/uptime")
    assert acl.may_publish("c", "me", "", "me")
    assert not acl.may_publish("c", "$me", "", "$me")


def test_wildcard_entries_do_not_reach_dollar_topics() -> None:
    acl = parse_acl("topic #\ntopic +/x\ntopic $SYS/#\n", "s.acl")
    assert acl.may_publish("c", None, "", "a/b")
    assert acl.may_subscribe("c", None, "", "$SYS/broker/+")
    assert not acl.may_subscribe("c", None, "", "$other/x")
    assert not acl.may_publish("c", None, "", "$other/x")


def test_empty_acl_allows_nothing() -> None:
    acl = parse_acl("# nothing\n\n   \n", "e.acl")
    assert acl.entries == ()
    assert not acl.may_publish("c", "u", "", "a")
    assert not acl.may_subscribe("c", "u", "", "#")


def test_whitespace_and_filters_with_spaces() -> None:
    acl = parse_acl("\ttopic\tread   a b/c  \r\nuser  mr smith \ntopic x\n", "w.acl")
    assert acl.entries == (
        AclEntry(False, None, Access.READ, "a b/c", 1),
        AclEntry(False, "mr smith", Access.BOTH, "x", 3),
    )
    assert acl.may_subscribe("c", None, "", "a b/c")
    assert acl.may_publish("c", "mr smith", "", "x")


def test_user_sections_for_the_same_name_add_up() -> None:
    acl = parse_acl("user u\ntopic a\nuser v\ntopic b\nuser u\ntopic c\n", "u.acl")
    assert acl.may_publish("c", "u", "", "a") and acl.may_publish("c", "u", "", "c")
    assert not acl.may_publish("c", "u", "", "b")
    assert not acl.may_publish("c", None, "", "a")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topic a\ntopik b\n", r"^bad\.acl:2: unknown directive 'topik'"),
        ("# c\n\ntopic raed a/b\n",
         r"^bad\.acl:3: expected read, write, readwrite or deny before the filter, got 'raed'"),
        ("topic write-read a/b\n", r"^bad\.acl:1: expected read, write, readwrite or deny"),
        ("topic READ a\n", r"^bad\.acl:1: expected read, write, readwrite or deny"),
        ("topic read a/#/b\n", r"^bad\.acl:1: 'a/#/b' is not a valid topic filter"),
        ("pattern write a/b+\n", r"^bad\.acl:1: 'a/b\+' is not a valid topic filter"),
        ("topic\n", r"^bad\.acl:1: 'topic' needs a topic filter"),
        ("pattern   \n", r"^bad\.acl:1: 'pattern' needs a topic filter"),
        ("topic a\nuser\n", r"^bad\.acl:2: 'user' needs a user name"),
        ("topic read $share/g/a\n", r"^bad\.acl:1: '\$share/g/a': shared subscriptions"),
        ("deny a\n", r"^bad\.acl:1: unknown directive 'deny'"),
    ],
)
def test_bad_lines(text: str, message: str) -> None:
    with pytest.raises(AclError, match=message):
        parse_acl(text, "bad.acl")


def test_acl_error_is_a_value_error() -> None:
    assert issubclass(AclError, ValueError)


def test_load_acl(tmp_path: Path) -> None:
    path = tmp_path / "vmq.acl"
    path.write_text("topic read a/#\n", encoding="utf-8")
    assert load_acl(path).may_subscribe("c", None, "", "a/b")
    with pytest.raises(AclError, match=f"^{path.parent / 'missing.acl'}: cannot read the ACL file"):
        load_acl(path.parent / "missing.acl")
    path.write_bytes(b"topic \xff\n")
    with pytest.raises(AclError, match="not UTF-8"):
        load_acl(path)
    path.write_text("topic a\nbogus\n", encoding="utf-8")
    with pytest.raises(AclError, match=f"^{path}:2: unknown directive"):
        load_acl(path)


# (ACL filter, subscription filter, covered)
COVERAGE: list[tuple[str, str, bool]] = [
    ("a/+", "a/b", True),
    ("a/+", "a/+", True),
    ("a/+", "a/#", False),
    ("a/+", "a", False),
    ("a/+", "a/b/c", False),
    ("a/#", "a", True),
    ("a/#", "a/#", True),
    ("a/#", "a/+/c", True),
    ("a/#", "b/#", False),
    ("a/+/#", "a/#", False),  # a/# matches a
    ("a/+/#", "a/+/#", True),
    ("a/+/#", "a/b", True),
    ("#", "#", True),
    ("#", "+/+", True),
    ("#", "$SYS/#", False),
    ("#", "$SYS", False),
    ("+/#", "#", True),  # every topic name has a first level
    ("+/+/#", "+/#", False),
    ("+", "+", True),
    ("+", "#", False),
    ("+", "$SYS", False),
    ("+/x", "$y/x", False),
    ("$SYS/#", "$SYS/a", True),
    ("$SYS/+", "$SYS/+", True),
    ("a/b", "a/+", False),
    ("a/b", "a/b", True),
    ("a/b", "a", False),
    ("a", "a/b", False),
    ("a//+", "a//", True),
    ("/#", "#", False),
    ("/#", "/+", True),
]


@pytest.mark.parametrize(("acl_filter", "topic_filter", "covered"), COVERAGE)
def test_covers(acl_filter: str, topic_filter: str, covered: bool) -> None:
    assert covers(acl_filter, topic_filter) is covered
    assert ref_covers(acl_filter, topic_filter) is covered  # the oracle agrees with the table


# -- against the naive model (acl_model.py) ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(filters(), filters())
def test_covers_against_the_model(acl_filter: str, topic_filter: str) -> None:
    assert covers(acl_filter, topic_filter) is ref_covers(acl_filter, topic_filter)


@settings(max_examples=300, deadline=None)
@given(ENTRIES, CLIENTS, st.sampled_from(TOPICS))
def test_may_publish_against_the_model(
    entries: list[tuple[str, str | None, Access, str]], client: tuple[str, str | None, str], topic: str
) -> None:
    acl = parse_acl(acl_text(entries), "model.acl")
    expected = any(ref_matches(f, topic) for f in ref_filters(entries, Access.WRITE, client))
    assert acl.may_publish(*client, topic) is expected


@settings(max_examples=300, deadline=None)
@given(ENTRIES, CLIENTS, filters())
def test_may_subscribe_against_the_model(
    entries: list[tuple[str, str | None, Access, str]], client: tuple[str, str | None, str], topic_filter: str
) -> None:
    acl = parse_acl(acl_text(entries), "model.acl")
    expected = any(ref_covers(f, topic_filter) for f in ref_filters(entries, Access.READ, client))
    assert acl.may_subscribe(*client, topic_filter) is expected
