"""A deliberately naive model of ACL files, the oracle of the ACL tests (test_acl, test_acl_deny): filter coverage
by enumerating topics, the filters a client is granted, and hypothesis strategies of entries, clients and filters
over few level names, so that they collide often."""

from __future__ import annotations

import functools
import itertools

from hypothesis import strategies as st

from vmqpy.broker.access.acl import Access

from .reference import ref_matches

LITERALS = ["a", "b", "", "$s"]
MAX_FILTER_LEVELS = 3
TOPICS = [
    topic
    for n in range(1, MAX_FILTER_LEVELS + 2)
    for levels in itertools.product([*LITERALS, "z"], repeat=n)
    if (topic := "/".join(levels))  # the empty string is no topic name
]


@functools.cache
def ref_covers(acl_filter: str, topic_filter: str) -> bool:
    """Every topic name the subscription matches, the ACL filter matches. The topics tried: every sequence of
    the filters' literal levels and two levels neither names ("z", "$z"), one level longer than the longer
    filter; a topic telling the two filters apart can be found among them."""
    acl_levels, sub_levels = acl_filter.split("/"), topic_filter.split("/")
    alphabet = {*acl_levels, *sub_levels, "z", "$z"} - {"+", "#"}
    depth = max(len(acl_levels), len(sub_levels)) + 1
    topics = ("/".join(t) for n in range(1, depth + 1) for t in itertools.product(sorted(alphabet), repeat=n))
    return all(ref_matches(acl_filter, t) for t in topics if ref_matches(topic_filter, t))


def ref_substitute(topic_filter: str, values: dict[str, str | None]) -> str | None:
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if level in values:
            value = values[level]
            if value is None or any(c in value for c in "+#/") or (i == 0 and value.startswith("$")):
                return None
            levels[i] = value
    return "/".join(levels)


def ref_filters(
    entries: list[tuple[str, str | None, Access, str]], access: Access, client: tuple[str, str | None, str]
) -> list[str]:
    """The filters granting `access` to a client: (kind, user, access, filter) entries, patterns substituted."""
    client_id, username, mountpoint = client
    values = {"%c": client_id, "%u": username, "%m": mountpoint}
    found = []
    for kind, user, granted, topic_filter in entries:
        if not granted & access:
            continue
        if kind == "pattern":
            substituted = ref_substitute(topic_filter, values)
            if substituted is not None:
                found.append(substituted)
        elif user is None or user == username:
            found.append(topic_filter)
    return found


@st.composite
def filters(draw: st.DrawFn, placeholders: bool = False) -> str:
    level = st.sampled_from(LITERALS + ["+", "+"] + (["%c", "%u", "%m"] if placeholders else []))
    levels = draw(st.lists(level, min_size=0, max_size=MAX_FILTER_LEVELS - 1))
    if draw(st.booleans()):
        levels.append("#")
    elif draw(st.booleans()) or not levels:
        levels.append(draw(level))
    if levels == [""]:  # the empty string is no filter
        levels.append("")
    return "/".join(levels)
ACCESSES = st.sampled_from([Access.READ, Access.WRITE, Access.BOTH])
USERS = st.sampled_from(["alice", "bob"])
ENTRIES = st.lists(
    st.one_of(
        st.tuples(st.just("topic"), st.none(), ACCESSES, filters()),
        st.tuples(st.just("topic"), USERS, ACCESSES, filters()),
        st.tuples(st.just("pattern"), st.none(), ACCESSES, filters(placeholders=True)),
    ),
    max_size=6,
)
CLIENTS = st.tuples(
    st.sampled_from(["a", "b", "", "$s", "+", "#", "a/b"]),
    st.sampled_from([None, "alice", "bob", "a", "", "#", "+", "$s"]),
    st.sampled_from(["", "a", "$s", "+"]),
)


def acl_text(entries: list[tuple[str, str | None, Access, str]]) -> str:
    """The entries as an ACL file: lines for everyone first, then one section per user, patterns inside
    whatever section comes last (they apply to everyone anyway)."""
    words = {Access.READ: "read ", Access.WRITE: "write ", Access.BOTH: ""}
    lines = [f"{kind} {words[a]}{f}" for kind, user, a, f in entries if kind == "topic" and user is None]
    for name in ("alice", "bob"):
        lines.append(f"user {name}")
        lines += [f"topic {words[a]}{f}" for kind, user, a, f in entries if user == name]
    lines += [f"pattern {words[a]}{f}" for kind, _, a, f in entries if kind == "pattern"]
    return "\n".join(lines) + "\n"
