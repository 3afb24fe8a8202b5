"""Mosquitto's `deny` and `readwrite` words in a vmq_acl file: parsing, deny before allow for PUBLISH topics and
SUBSCRIBE filters (a filter a deny covers is refused; one that only overlaps a deny is granted and its denied
topics are withheld per message, as Mosquitto does: issue 33, finding 9, changed the earlier refusal of any
overlap), deny patterns that widen for a missing or unsafe value, and `overlaps` against a model that
enumerates topics."""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.broker.acl_model import CLIENTS, ENTRIES, TOPICS, USERS, filters, ref_covers, ref_filters
from tests.unit.broker.reference import ref_matches
from vmqpy.broker.access.acl import Access, AclEntry, overlaps, parse_acl

DENY_TEXT = """\
topic read public/#
topic deny public/secret
topic write inbox/+
topic deny inbox/admin
pattern deny users/%u/private/#
pattern deny devices/%c/keys
user alice
topic readwrite alice/#
topic deny alice/locked
topic users/#
user bob
topic #
topic deny $SYS/#
"""


def test_deny_and_readwrite_entries() -> None:
    acl = parse_acl(DENY_TEXT, "deny.acl")
    assert AclEntry(False, None, Access.BOTH, "public/secret", 2, deny=True) in acl.entries
    assert AclEntry(True, None, Access.BOTH, "users/%u/private/#", 5, deny=True) in acl.entries
    assert AclEntry(False, "alice", Access.BOTH, "alice/#", 8) in acl.entries
    assert AclEntry(False, "alice", Access.BOTH, "alice/locked", 9, deny=True) in acl.entries


# (client id, user name, action, topic or filter, allowed)
DECISIONS: list[tuple[str, str | None, str, str, bool]] = [
    # everyone: deny checked before the allowing line
    ("c", None, "sub", "public/news", True),
    ("c", None, "sub", "public/secret", False),
    ("c", None, "sub", "public/#", True),  # granted: public/secret is withheld per message (`withholds`)
    ("c", None, "sub", "public/+", True),
    ("c", None, "sub", "public/+/x", True),  # cannot match public/secret
    ("c", None, "pub", "inbox/alice", True),
    ("c", None, "pub", "inbox/admin", False),
    # a deny for everyone applies to every user too
    ("c", "alice", "sub", "public/secret", False),
    ("c", "bob", "pub", "inbox/admin", False),
    ("c", "bob", "sub", "#", True),  # overlaps public/secret (and inbox/admin): granted, those withheld
    ("c", "bob", "sub", "inbox/admin", False),  # every topic it matches is denied: refused
    ("c", "bob", "sub", "other/#", True),
    # a user's deny
    ("c", "alice", "pub", "alice/x", True),
    ("c", "alice", "sub", "alice/x", True),
    ("c", "alice", "pub", "alice/locked", False),
    ("c", "alice", "sub", "alice/locked", False),
    ("c", "alice", "sub", "alice/#", True),  # alice/locked withheld per message
    ("c", "alice", "sub", "alice/locked/#", True),  # '#' matches alice/locked and below; only the first is denied
    ("c", "bob", "sub", "$SYS/broker", False),  # `#` never reached $SYS anyway; the deny says it once more
    # deny patterns: substituted per client
    ("c", "alice", "sub", "users/alice/public", True),
    ("c", "alice", "sub", "users/alice/private/x", False),
    ("c", "alice", "sub", "users/bob/private/x", True),  # bob's deny is not alice's
    ("c", "alice", "sub", "users/+/private/x", True),  # overlaps alice's denied branch: withheld there
    ("c", "alice", "sub", "users/alice/private/#", False),  # inside alice's denied branch
    ("dev1", "bob", "pub", "devices/dev1/keys", False),
    ("dev1", "bob", "pub", "devices/dev2/keys", True),
    # a missing or unsafe value widens a deny to the whole level
    ("c", None, "pub", "users/anyone/private/x", False),  # %u of an anonymous client
    ("+", "bob", "pub", "devices/dev2/keys", False),  # client id '+': the deny covers every device
    ("a/b", "bob", "pub", "devices/x/keys", False),
    ("a/b", "bob", "pub", "devices/a/b/keys", True),  # the widened deny is one level, as the pattern is
]


@pytest.mark.parametrize(("client_id", "username", "action", "topic", "allowed"), DECISIONS)
def test_decisions(client_id: str, username: str | None, action: str, topic: str, allowed: bool) -> None:
    acl = parse_acl(DENY_TEXT, "deny.acl")
    decide = acl.may_publish if action == "pub" else acl.may_subscribe
    assert decide(client_id, username, "", topic) is allowed


# (client id, user name, topic of a delivered message, withheld)
WITHHELD: list[tuple[str, str | None, str, bool]] = [
    ("c", "bob", "public/secret", True),
    ("c", "bob", "public/news", False),
    ("c", "bob", "inbox/admin", True),
    ("c", "bob", "other/x", False),
    ("c", "alice", "alice/locked", True),
    ("c", "alice", "alice/x", False),
    ("c", "alice", "users/alice/private/x", True),
    ("c", "alice", "users/bob/private/x", False),
    ("c", None, "users/bob/private/x", True),  # %u of an anonymous client: the whole level
    ("dev1", "bob", "devices/dev1/keys", True),
    ("dev1", "bob", "devices/dev2/keys", False),
]


@pytest.mark.parametrize(("client_id", "username", "topic", "withheld"), WITHHELD)
def test_withholds_judges_a_delivered_topic_against_the_deny_lines(
    client_id: str, username: str | None, topic: str, withheld: bool
) -> None:
    acl = parse_acl(DENY_TEXT, "deny.acl")
    assert acl.denies
    assert acl.withholds(client_id, username, "", topic) is withheld


# (user name, filter, some of its topics denied)
OVERLAPPING: list[tuple[str | None, str, bool]] = [
    ("bob", "#", True),
    ("bob", "other/#", False),
    ("c", "public/#", True),
    ("c", "public/+/x", False),
    ("alice", "alice/+", True),
    ("alice", "users/+/private/x", True),
]


@pytest.mark.parametrize(("username", "topic_filter", "overlapping"), OVERLAPPING)
def test_overlaps_deny(username: str | None, topic_filter: str, overlapping: bool) -> None:
    acl = parse_acl(DENY_TEXT, "deny.acl")
    assert acl.overlaps_deny("c", username, "", topic_filter) is overlapping


def test_an_acl_without_deny_lines_withholds_nothing() -> None:
    acl = parse_acl("topic read #\n", "x.acl")
    assert not acl.denies
    assert not acl.withholds("c", None, "", "a/b")


def test_may_read_judges_one_topic_name() -> None:
    acl = parse_acl(DENY_TEXT, "deny.acl")
    assert acl.may_read("c", None, "", "public/news")
    assert not acl.may_read("c", None, "", "public/secret")
    assert not acl.may_read("c", None, "", "inbox/x")  # write only


def test_a_deny_alone_allows_nothing() -> None:
    acl = parse_acl("topic deny a\n", "x.acl")
    assert not acl.may_publish("c", None, "", "b")
    assert not acl.may_subscribe("c", None, "", "b")


OVERLAPS: list[tuple[str, str, bool]] = [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/+", "a/b", True),
    ("a/+", "+/b", True),
    ("a/#", "a", True),  # '#' matches its parent level
    ("a/#", "b", False),
    ("#", "x/y/z", True),
    ("+", "a/b", False),
    ("+/+", "a/#", True),
    ("a/+/c", "a/b/+", True),
    ("a/+/c", "a/b/d", False),
    ("#", "$SYS/x", False),
    ("+/x", "$SYS/x", False),
    ("$SYS/#", "$SYS/+", True),
    ("$SYS/#", "$other/+", False),
    ("a/", "a/+", True),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_overlaps(a: str, b: str, expected: bool) -> None:
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


MODEL_TOPICS = sorted({*TOPICS, *("/".join(t) for t in itertools.product(["a", "b", "$s", ""], repeat=2))})


@functools.cache
def ref_overlaps(a: str, b: str) -> bool:
    """Some topic is matched by both filters. The topics tried: every sequence, one level longer than the longer
    filter, of their literal levels and a level neither names ("z")."""
    levels_a, levels_b = a.split("/"), b.split("/")
    alphabet = sorted({*levels_a, *levels_b, "z"} - {"+", "#"})
    depth = max(len(levels_a), len(levels_b)) + 1
    topics = ("/".join(t) for n in range(1, depth + 1) for t in itertools.product(alphabet, repeat=n))
    return any(ref_matches(a, t) and ref_matches(b, t) for t in topics if t)


@settings(max_examples=400, deadline=None)
@given(filters(), filters())
def test_overlaps_against_the_model(a: str, b: str) -> None:
    assert overlaps(a, b) is ref_overlaps(a, b)


@settings(max_examples=300, deadline=None)
@given(filters(), st.sampled_from(MODEL_TOPICS))
def test_a_topic_overlaps_exactly_the_filters_that_match_it(topic_filter: str, topic: str) -> None:
    assert overlaps(topic_filter, topic) is ref_matches(topic_filter, topic)


# ---------------------------------------------------------------------------------------------- model

DENIES = st.lists(
    st.one_of(
        st.tuples(st.just("topic"), st.none(), filters()),
        st.tuples(st.just("topic"), USERS, filters()),
        st.tuples(st.just("pattern"), st.none(), filters(placeholders=True)),
    ),
    max_size=3,
)


def deny_text(entries: list[tuple[str, str | None, Access, str]], denies: list[tuple[str, str | None, str]]) -> str:
    """The allowing entries and the deny lines as one file: each deny line in the section of its audience."""
    words = {Access.READ: "read ", Access.WRITE: "write ", Access.BOTH: ""}
    lines = [f"topic {words[a]}{f}" for kind, user, a, f in entries if kind == "topic" and user is None]
    lines += [f"topic deny {f}" for kind, user, f in denies if kind == "topic" and user is None]
    for name in ("alice", "bob"):
        lines.append(f"user {name}")
        lines += [f"topic {words[a]}{f}" for kind, user, a, f in entries if user == name]
        lines += [f"topic deny {f}" for kind, user, f in denies if user == name]
    lines += [f"pattern {words[a]}{f}" for kind, _, a, f in entries if kind == "pattern"]
    lines += [f"pattern deny {f}" for kind, _, f in denies if kind == "pattern"]
    return "\n".join(lines) + "\n"


def ref_denied(denies: list[tuple[str, str | None, str]], client: tuple[str, str | None, str]) -> list[str]:
    """The deny filters of a client: a placeholder whose value is missing or holds '+', '#' or '/' becomes '+'."""
    client_id, username, mountpoint = client
    values = {"%c": client_id, "%u": username, "%m": mountpoint}
    found = []
    for kind, user, topic_filter in denies:
        if kind == "pattern":
            levels = []
            for level in topic_filter.split("/"):
                if level in values:
                    value = values[level]
                    level = "+" if value is None or any(c in value for c in "+#/") else value
                levels.append(level)
            found.append("/".join(levels))
        elif user is None or user == username:
            found.append(topic_filter)
    return found


@settings(max_examples=300, deadline=None)
@given(ENTRIES, DENIES, CLIENTS, st.sampled_from(TOPICS))
def test_may_publish_with_denies_against_the_model(
    entries: list[tuple[str, str | None, Access, str]], denies: list[tuple[str, str | None, str]],
    client: tuple[str, str | None, str], topic: str,
) -> None:
    acl = parse_acl(deny_text(entries, denies), "model.acl")
    allowed = any(ref_matches(f, topic) for f in ref_filters(entries, Access.WRITE, client))
    denied = any(ref_matches(f, topic) for f in ref_denied(denies, client))
    assert acl.may_publish(*client, topic) is (allowed and not denied)


@settings(max_examples=300, deadline=None)
@given(ENTRIES, DENIES, CLIENTS, filters())
def test_may_subscribe_with_denies_against_the_model(
    entries: list[tuple[str, str | None, Access, str]], denies: list[tuple[str, str | None, str]],
    client: tuple[str, str | None, str], topic_filter: str,
) -> None:
    """Allowed: a read line covers the filter, and no deny line covers it (one that only overlaps it withholds
    its topics per message)."""
    acl = parse_acl(deny_text(entries, denies), "model.acl")
    allowed = any(ref_covers(f, topic_filter) for f in ref_filters(entries, Access.READ, client))
    denied = any(ref_covers(f, topic_filter) for f in ref_denied(denies, client))
    assert acl.may_subscribe(*client, topic_filter) is (allowed and not denied)
    overlapping = any(ref_overlaps(f, topic_filter) for f in ref_denied(denies, client))
    assert acl.overlaps_deny(*client, topic_filter) is overlapping


@settings(max_examples=300, deadline=None)
@given(ENTRIES, DENIES, CLIENTS, st.sampled_from(TOPICS))
def test_withholds_against_the_model(
    entries: list[tuple[str, str | None, Access, str]], denies: list[tuple[str, str | None, str]],
    client: tuple[str, str | None, str], topic: str,
) -> None:
    acl = parse_acl(deny_text(entries, denies), "model.acl")
    denied = any(ref_matches(f, topic) for f in ref_denied(denies, client))
    assert acl.withholds(*client, topic) is denied
