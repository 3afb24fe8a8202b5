"""A deliberately naive MQTT filter matcher, used as the oracle for the trie and the retained store."""

from __future__ import annotations


def ref_matches(topic_filter: str, topic: str) -> bool:
    """True if ``topic_filter`` matches ``topic`` (MQTT 4.7), written as directly as possible."""
    f = topic_filter.split("/")
    t = topic.split("/")
    if topic.startswith("$") and f[0] in ("+", "#"):
        return False
    for i, level in enumerate(f):
        if level == "#":
            return True  # levels 0..i-1 matched, so len(t) >= i: '#' covers the parent level too
        if i >= len(t):
            return False
        if level != "+" and level != t[i]:
            return False
    return len(t) == len(f)


# (filter, topic, matches): concrete cases, checked against the oracle itself and every implementation.
MATCH_TABLE: list[tuple[str, str, bool]] = [
    # '#' alone
    ("#", "a", True),
    ("#", "a/b/c", True),
    ("#", "/a", True),
    ("#", "a/", True),
    ("#", "/", True),
    ("#", "a/$b", True),
    ("#", "$SYS", False),
    ("#", "$SYS/broker/load", False),
    ("#", "$", False),
    # '+'
    ("+", "a", True),
    ("+", "a/b", False),
    ("+", "/a", False),
    ("+", "$SYS", False),
    ("+/+", "/a", True),
    ("+/+", "a/", True),
    ("+/+", "/", True),
    ("+/+", "a", False),
    ("+/+", "a/b/c", False),
    ("+/+", "$SYS/a", False),
    ("/+", "/a", True),
    ("/+", "a/a", False),
    ("+/x", "$SYS/x", False),
    ("+/$b", "a/$b", True),
    ("a/+", "a", False),
    ("a/+", "a/", True),
    ("a/+", "a/b", True),
    ("a/+", "a/b/c", False),
    ("a/+/b", "a//b", True),
    ("a/+/b", "a/x/b", True),
    ("a/+/b", "a/x/c", False),
    ("+/+/+", "//", True),
    # 'a/#' vs 'a'
    ("a/#", "a", True),
    ("a/#", "a/", True),
    ("a/#", "a/b", True),
    ("a/#", "a/b/c", True),
    ("a/#", "ab", False),
    ("a/#", "b", False),
    ("a/#", "b/a", False),
    ("a/b/#", "a/b", True),
    ("a/b/#", "a", False),
    ("a/b/#", "a/c", False),
    ("+/#", "a", True),
    ("+/#", "a/b/c", True),
    ("+/#", "$x/a", False),
    ("/#", "/", True),
    ("/#", "", True),
    ("/#", "a", False),
    ("a/+/#", "a/b", True),
    ("a/+/#", "a", False),
    # '$' topics with explicit first level
    ("$SYS/#", "$SYS", True),
    ("$SYS/#", "$SYS/a/b", True),
    ("$SYS/+", "$SYS/a", True),
    ("$SYS/+", "$SYS", False),
    ("$SYS", "$SYS", True),
    ("$SYS/a", "$SYS/b", False),
    # empty levels are real levels
    ("a//b", "a//b", True),
    ("a//b", "a/b", False),
    ("/a", "/a", True),
    ("/a", "a", False),
    ("a", "/a", False),
    ("a", "a/", False),
    ("a/", "a/", True),
    ("a/", "a", False),
    ("//", "//", True),
    ("//", "/", False),
    # literals
    ("a/b", "a/b", True),
    ("a/b", "a/c", False),
    ("a/b", "a/b/c", False),
    ("A", "a", False),
    ("sport/tennis/player1", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/tennis/#", "sport/tennis/player1/ranking", True),
    ("sport/+/player1", "sport/tennis/player1", True),
]
