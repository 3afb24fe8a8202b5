"""Topic names, topic filters, shared subscriptions and matching."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vmqpy.mqtt.topics import matches, parse_shared, validate_topic_filter, validate_topic_name

NAMES = [
    ("a", True),
    ("a/b/c", True),
    ("/", True),
    ("/a", True),
    ("a//b", True),
    ("$SYS/broker/uptime", True),
    ("ünïcødé/☃/𝄞", True),
    (" ", True),
    ("", False),
    ("a/+", False),
    ("+", False),
    ("a/#", False),
    ("a#", False),
    ("a\x00b", False),
    ("a\ud800", False),  # lone surrogate: not encodable as UTF-8
    ("x" * 65535, True),
    ("x" * 65536, False),
    ("é" * 32767, True),  # 65534 bytes
    ("é" * 32768, False),  # 65536 bytes though only 32768 characters
]


@pytest.mark.parametrize(("name", "valid"), NAMES, ids=[repr(n[:20]) for n, _ in NAMES])
def test_validate_topic_name(name: str, valid: bool) -> None:
    assert validate_topic_name(name) is valid


FILTERS = [
    ("a", True),
    ("#", True),
    ("+", True),
    ("a/#", True),
    ("a/+/b", True),
    ("+/+", True),
    ("/+", True),
    ("+/", True),
    ("a//#", True),
    ("$SYS/#", True),
    ("$share/g/a/#", True),  # syntax only; parse_shared does the rest
    ("", False),
    ("a/#/b", False),
    ("#/a", False),
    ("a#", False),
    ("a/b#", False),
    ("a+", False),
    ("a/+b", False),
    ("++", False),
    ("##", False),
    ("a\x00", False),
    ("\udcff", False),
    ("+" + "/+" * 32767, True),  # 65535 bytes
    ("+" + "/+" * 32768, False),
]


@pytest.mark.parametrize(("topic_filter", "valid"), FILTERS, ids=[repr(f[:20]) for f, _ in FILTERS])
def test_validate_topic_filter(topic_filter: str, valid: bool) -> None:
    assert validate_topic_filter(topic_filter) is valid


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [
        ("$share/g/a/b", ("g", "a/b")),
        ("$share/group-1/#", ("group-1", "#")),
        ("$share/g/+/x", ("g", "+/x")),
        ("$share/g//", ("g", "/")),
        ("a/b", (None, "a/b")),
        ("$share", (None, "$share")),
        ("$sharex/g/a", (None, "$sharex/g/a")),
        ("$SHARE/g/a", (None, "$SHARE/g/a")),
        ("share/g/a", (None, "share/g/a")),
    ],
)
def test_parse_shared(topic_filter: str, expected: tuple[str | None, str]) -> None:
    assert parse_shared(topic_filter) == expected


@pytest.mark.parametrize("topic_filter", ["$share/g", "$share/g/", "$share//a", "$share/", "$share/+/a",
                                          "$share/#/a", "$share/g+/a", "$share/g#/a"])
def test_parse_shared_rejects(topic_filter: str) -> None:
    with pytest.raises(ValueError):
        parse_shared(topic_filter)


MATCHES = [
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/b", "a/b/c", False),
    ("a/b/c", "a/b", False),
    ("a/+", "a/b", True),
    ("a/+", "a/b/c", False),
    ("a/+", "a", False),
    ("a/+", "a/", True),  # empty level
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+", "a", True),
    ("+/b/+", "x/b/y", True),
    ("#", "a/b/c", True),
    ("#", "/", True),
    ("a/#", "a", True),  # '#' also matches the parent level
    ("a/#", "a/", True),
    ("a/#", "a/b/c", True),
    ("a/#", "ab", False),
    ("a/#", "b/a", False),
    ("a/+/#", "a/b", True),
    ("a/+/#", "a", False),
    ("#", "$SYS/x", False),
    ("+/x", "$SYS/x", False),
    ("+", "$SYS", False),
    ("$SYS/#", "$SYS/x", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/+", "$SYS/x", True),
    ("$SYS/x", "$SYS/x", True),
    ("a/$x", "a/$x", True),
    ("+/$x", "a/$x", True),  # only a leading '$' is special
    ("sport/tennis/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("a/#/b", "a/x/b", False),  # invalid filter: no pattern semantics
    ("a+", "ab", False),
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), MATCHES,
                         ids=[f"{f}~{t}" for f, t, _ in MATCHES])
def test_matches(topic_filter: str, topic: str, expected: bool) -> None:
    assert matches(topic_filter, topic) is expected


def reference_matches(topic_filter: str, topic: str) -> bool:
    """Independent reference: translate the filter to a regular expression."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    levels = topic_filter.split("/")
    if levels[-1] == "#":
        head = [("[^/]*" if lv == "+" else re.escape(lv)) for lv in levels[:-1]]
        pattern = ("/".join(head) + "(/.*)?") if head else ".*"
    else:
        pattern = "/".join("[^/]*" if lv == "+" else re.escape(lv) for lv in levels)
    return re.fullmatch(pattern, topic, flags=re.DOTALL) is not None


_level = st.text(alphabet="ab$/", max_size=3).map(lambda s: s.replace("/", ""))
_topics = st.lists(_level, min_size=1, max_size=5).map("/".join).filter(bool)


@st.composite
def _filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(_level, st.just("+")), min_size=1, max_size=5))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@settings(max_examples=500, deadline=None)
@given(_filters().filter(bool), _topics)
def test_matches_agrees_with_reference(topic_filter: str, topic: str) -> None:
    assert validate_topic_filter(topic_filter)
    assert matches(topic_filter, topic) is reference_matches(topic_filter, topic)


@settings(max_examples=200, deadline=None)
@given(_topics)
def test_a_topic_matches_itself_and_hash_unless_dollar(topic: str) -> None:
    assert matches(topic, topic)
    assert matches("#", topic) is (not topic.startswith("$"))


@settings(max_examples=200, deadline=None)
@given(_filters().filter(bool), _topics)
def test_shared_prefix_round_trip(topic_filter: str, topic: str) -> None:
    group, inner = parse_shared(f"$share/grp/{topic_filter}")
    assert (group, inner) == ("grp", topic_filter)
    assert matches(inner, topic) is reference_matches(topic_filter, topic)
