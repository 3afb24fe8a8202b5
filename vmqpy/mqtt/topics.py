"""Topic names, topic filters, shared subscriptions and matching (MQTT 3.1.1 4.7, 5.0 4.7-4.8).

Levels are separated by "/"; empty levels are legal ("a//b", "/a"). "+" matches exactly one level, "#" the
parent level and any number of child levels. Filters starting with a wildcard do not match topics starting
with "$" [MQTT-4.7.2-1].
"""

from __future__ import annotations

from typing import Final

SHARE_PREFIX: Final = "$share/"
_MAX_BYTES: Final = 0xFFFF


def _fits(s: str) -> bool:
    """Non-empty, no U+0000, encodable as UTF-8 (no lone surrogates) in at most 65535 bytes."""
    if not s or "\x00" in s:
        return False
    if s.isascii():
        return len(s) <= _MAX_BYTES
    try:
        return len(s.encode("utf-8")) <= _MAX_BYTES
    except UnicodeEncodeError:
        return False


def validate_topic_name(name: str) -> bool:
    """A topic name a PUBLISH may carry: non-empty, no wildcard, no U+0000, at most 65535 bytes of UTF-8."""
    return "+" not in name and "#" not in name and _fits(name)


def too_deep(topic: str, max_depth: int) -> bool:
    """Whether a topic name or filter has more than `max_depth` levels (`topic_max_depth`; 0: no limit)."""
    return max_depth > 0 and topic.count("/") >= max_depth


def validate_topic_filter(topic_filter: str) -> bool:
    """A syntactically valid topic filter: non-empty, "#" only as the whole last level, "+" only as whole
    levels, no U+0000, at most 65535 bytes of UTF-8. Shared-subscription syntax is `parse_shared`'s job."""
    if not _fits(topic_filter):
        return False
    if "+" not in topic_filter and "#" not in topic_filter:
        return True
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != last):
            return False
        if "+" in level and level != "+":
            return False
    return True


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """Split a shared subscription: "$share/g/a/b" -> ("g", "a/b"); a plain filter -> (None, filter).

    Raises ValueError for a "$share/" filter without a non-empty share name and a non-empty filter after it,
    or with "+" or "#" in the share name. The returned filter is not validated (use validate_topic_filter).
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group:
        raise ValueError(f"shared subscription {topic_filter!r} has an empty share name")
    if "+" in group or "#" in group:
        raise ValueError(f"shared subscription {topic_filter!r} has a wildcard in its share name")
    if not sep or not rest:
        raise ValueError(f"shared subscription {topic_filter!r} has no topic filter")
    return group, rest


def matches(topic_filter: str, topic: str) -> bool:
    """Whether `topic_filter` matches the topic name `topic`. A shared filter must be split by `parse_shared`
    first ("$share/g/a" is taken literally here). Invalid filters get no special treatment: a "#" that is not
    the whole last level and a "+" inside a level compare as literal text; validate filters first.
    """
    if topic_filter == topic:
        return True
    if "+" not in topic_filter and "#" not in topic_filter:
        return False
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    n_topic = len(t_levels)
    last = len(f_levels) - 1
    for i, level in enumerate(f_levels):
        if level == "#" and i == last:
            return True  # "a/#" matches "a" too: '#' also matches the parent level
        if i >= n_topic:
            return False
        if level != "+" and level != t_levels[i]:
            return False
    return last + 1 == n_topic
