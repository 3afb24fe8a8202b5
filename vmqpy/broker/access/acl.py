"""Topic authorization from an ACL file in VerneMQ's vmq_acl format.

The file, one directive a line (leading and trailing blanks ignored):

    # a comment: a line whose first non-blank character is '#' (none at the end of a line); blank lines ignored
    topic [ACCESS] FILTER         before any `user` line: for every client, anonymous ones included
    user NAME                     the `topic` lines after it, up to the next `user` line, are for clients
    topic [ACCESS] FILTER         logged in as NAME
    pattern [ACCESS] FILTER       anywhere: for every client, after substitution (below)

ACCESS is `read`, `write`, `readwrite` (Mosquitto's word) or `deny` (Mosquitto's); none grants both read and
write. One word after `topic` or `pattern` is the filter; with more, the first must be an access word and the
filter is the rest of the line (so a filter may contain a space only after an access word). FILTER must be a
valid MQTT topic filter; `user` takes the rest of the line as NAME.

An empty ACL allows nothing; a client may do what a line that applies to it allows, unless a `deny` line that
applies to it forbids it. Deny lines forbid reading and writing alike, as in Mosquitto:

* PUBLISH to topic T is refused when a deny filter matches T.
* SUBSCRIBE to filter S is refused when a deny filter *covers* S (every topic S matches is denied: it could
  never deliver anything). A filter that a read line covers and that only *overlaps* a deny (some topics it
  matches are denied, some not) is granted, and the messages of denied topics are withheld from it one by one
  as they are delivered (`withholds`), retained ones included: with `topic read a/#` and `topic deny a/secret`,
  `a/#`, `a/+` and `a/+/x` may be subscribed and deliver everything under `a/` but `a/secret`; `a/secret` may
  not be subscribed. This is what Mosquitto does, and what monitoring tools subscribing to `#` expect.
* A deny pattern whose value is missing (`%u` of an anonymous client) or unsafe (below) denies the whole
  level, as if the placeholder were '+': a deny never narrows because of a client's choice of name.

Matching:

* PUBLISH to topic T is allowed when a write filter that applies matches T (`topics.matches`; a filter
  starting with a wildcard does not match a topic starting with '$').
* SUBSCRIBE to filter S is allowed when one read filter A that applies *covers* S: every topic name S
  matches, A matches too. Level by level: A's '#' covers the rest of S; A's '+' covers one level of S that is
  a literal or '+'; a literal covers only the same literal. So `a/+` allows `a/b` and `a/+` but not `a/#`
  (which also matches `a/b/c`), `a/#` allows `a`, `a/+/c` and `a/#`, and `+/#` allows `#`. A '$' first
  level of S is covered only by the same literal. Coverage is per line: `a/b` and `a/c` do not add up to
  `a/+`. A shared subscription `$share/G/S` is judged on S. (VerneMQ compares the filter's words with '+'
  matching any word, '#' and '+' included, so there `a/+` lets one subscribe to `a/#`; we do not.)
* Patterns: a level that is exactly `%c`, `%u` or `%m` becomes the client id, user name or mountpoint
  (`%u` inside a longer level stays literal text). The substituted entry applies only when every value it
  uses is safe: a value containing '+', '#' or '/' would widen the entry (a client id `+` turns
  `dev/%c/#` into `dev/+/#`), and a value starting with '$' in the first level would reach broker topics
  (`$SYS`), so such an entry matches nothing; `%u` of an anonymous client matches nothing either.
  (VerneMQ substitutes a value as one whole level: one with a '/' matches nothing there either, but '+'
  and '#' act as wildcards.) Topics are judged as the client sees
  them, without the mountpoint.

Cost: parsing splits every filter into a literal set and a routing trie per audience (everyone, each user).
`may_publish` is one set lookup and one trie walk, O(levels x wildcard branches), for the lines of
everyone and of the user; plus, for each pattern, one substitution and one match, O(levels). `may_subscribe`
is the same for a filter without wildcards and O(filters x levels) for one with wildcards. `withholds` (one
delivered topic against the deny lines) is one set lookup and one trie walk, plus one match per deny pattern;
the broker asks it only when the ACL has deny lines, and remembers the answer per client and topic
(vmqpy.broker.access.read_guard).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from vmqpy.mqtt.topics import SHARE_PREFIX, matches, parse_shared, validate_topic_filter, validate_topic_name
from vmqpy.mqtt.trie import SubscriptionTrie

__all__ = ["Access", "Acl", "AclEntry", "AclError", "covers", "load_acl", "overlaps", "parse_acl"]


class AclError(ValueError):
    """An ACL file that cannot be used; the message starts with `source:line:` or the path."""


class Access(enum.Flag):
    READ = enum.auto()
    WRITE = enum.auto()
    BOTH = READ | WRITE


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One `topic` or `pattern` line. `user` is None for lines that apply to everyone. A `deny` line has
    `deny` set and access BOTH (it forbids both)."""

    pattern: bool
    user: str | None
    access: Access
    topic_filter: str
    line: int
    deny: bool = False


_ACCESS_WORDS: Final = {"read": Access.READ, "write": Access.WRITE, "readwrite": Access.BOTH}
_DENY: Final = "deny"
_PLACEHOLDERS: Final = ("%c", "%u", "%m")


def covers(acl_filter: str, topic_filter: str) -> bool:
    """Whether every topic name `topic_filter` matches is matched by `acl_filter` (both valid, unshared)."""
    return _covers(acl_filter.split("/"), topic_filter.split("/"))


def overlaps(filter_a: str, filter_b: str) -> bool:
    """Whether some topic name is matched by both valid, unshared filters."""
    return _overlaps(filter_a.split("/"), filter_b.split("/"))


def _overlaps(a: list[str], b: list[str]) -> bool:
    if (a[0][:1] == "$" and b[0] in ("+", "#")) or (b[0][:1] == "$" and a[0] in ("+", "#")):
        return False  # a filter starting with a wildcard matches no '$' topic
    if a == [""] or b == [""]:
        return False  # "" is no topic name (a pattern's placeholder may become an empty filter)
    n_a, n_b = len(a), len(b)
    for i in range(max(n_a, n_b)):
        x = a[i] if i < n_a else None
        y = b[i] if i < n_b else None
        if x == "#" or y == "#":
            # '#' matches the rest, and its parent level when the other filter ends there: unless that parent is
            # the empty first level, whose topic would be "" (no topic name).
            return not (i == 1 and (x is None or y is None) and "" in (a[0], b[0]))
        if x is None or y is None:
            return False
        if x != "+" and y != "+" and x != y:
            return False
    return True


def _covers(acl: list[str], sub: list[str]) -> bool:
    if sub[0].startswith("$") and acl[0] in ("+", "#"):
        return False
    n_sub = len(sub)
    for i, level in enumerate(acl):
        if level == "#":
            return True
        if i >= n_sub:
            return False
        s = sub[i]
        if s == "#":
            # S's '#' also matches S's parent level, which A's remaining levels must then match; only at
            # the first level is there no parent (topic names have a level), where `+/#` equals `#`.
            return i == 0 and level == "+" and acl[1:] == ["#"]
        if level != "+" and level != s:
            return False
    return len(acl) == n_sub


class _Rules:
    """The filters granting one access to one audience: literals in a set, wildcard filters in a trie (for
    topics) and as split levels (for filters)."""

    __slots__ = ("literals", "trie", "wildcards")

    def __init__(self, filters: Iterable[str]) -> None:
        literals: set[str] = set()
        self.trie: SubscriptionTrie[str, None] = SubscriptionTrie()
        wildcards: list[list[str]] = []
        for f in dict.fromkeys(filters):
            if "+" in f or "#" in f:
                self.trie.add(f, f, None)
                wildcards.append(f.split("/"))
            else:
                literals.add(f)
        self.literals = frozenset(literals)
        self.wildcards = tuple(wildcards)

    def allow_topic(self, topic: str) -> bool:
        return topic in self.literals or (bool(self.wildcards) and bool(self.trie.match(topic)))

    def allow_filter(self, topic_filter: str) -> bool:
        if "+" not in topic_filter and "#" not in topic_filter:
            return self.allow_topic(topic_filter)
        sub = topic_filter.split("/")
        return any(_covers(acl, sub) for acl in self.wildcards)

    def overlap_filter(self, topic_filter: str) -> bool:
        """Whether one of the filters matches a topic that `topic_filter` matches too."""
        if "+" not in topic_filter and "#" not in topic_filter:
            return self.allow_topic(topic_filter)
        sub = topic_filter.split("/")
        return any(matches(topic_filter, literal) for literal in self.literals) or \
            any(_overlaps(f, sub) for f in self.wildcards)

    def __bool__(self) -> bool:
        return bool(self.literals) or bool(self.wildcards)


class _Pattern:
    """A `pattern` filter split into levels, with the positions of its placeholders."""

    __slots__ = ("levels", "slots")

    def __init__(self, topic_filter: str) -> None:
        self.levels = topic_filter.split("/")
        self.slots = tuple((i, level) for i, level in enumerate(self.levels) if level in _PLACEHOLDERS)

    def substitute(self, values: dict[str, str | None]) -> str | None:
        """The filter for one client, or None when a value it needs is missing or unsafe."""
        levels = list(self.levels)
        for i, placeholder in self.slots:
            value = values[placeholder]
            if value is None or "+" in value or "#" in value or "/" in value or (i == 0 and value[:1] == "$"):
                return None
            levels[i] = value
        return "/".join(levels)

    def substitute_deny(self, values: dict[str, str | None]) -> str:
        """The deny filter for one client: a missing or unsafe value denies its whole level ('+')."""
        levels = list(self.levels)
        for i, placeholder in self.slots:
            value = values[placeholder]
            unsafe = value is None or "+" in value or "#" in value or "/" in value
            levels[i] = "+" if unsafe or value is None else value
        return "/".join(levels)


@dataclass(frozen=True, slots=True)
class _Audience:
    read: _Rules
    write: _Rules
    deny: _Rules


class Acl:
    """A parsed ACL file; `may_publish` and `may_subscribe` answer for one client. Immutable."""

    __slots__ = ("_deny_patterns", "_everyone", "_read_patterns", "_users", "_write_patterns", "denies", "entries")

    def __init__(self, entries: Iterable[AclEntry]) -> None:
        self.entries = tuple(entries)
        # A pattern without placeholders is the same line for everyone: it joins the precomputed rules.
        patterns = [e for e in self.entries if e.pattern and _Pattern(e.topic_filter).slots]
        substituted = set(patterns)
        plain = [e for e in self.entries if e not in substituted]
        self._everyone = _audience(e for e in plain if e.user is None)
        users = {e.user for e in plain if e.user is not None}
        self._users = {u: _audience(e for e in plain if e.user == u) for u in users}
        allowing = [e for e in patterns if not e.deny]
        self._read_patterns = tuple(_Pattern(e.topic_filter) for e in allowing if e.access & Access.READ)
        self._write_patterns = tuple(_Pattern(e.topic_filter) for e in allowing if e.access & Access.WRITE)
        self._deny_patterns = tuple(_Pattern(e.topic_filter) for e in patterns if e.deny)
        self.denies = any(e.deny for e in self.entries)  # deliveries are judged one by one (`withholds`)

    def may_publish(self, client_id: str, username: str | None, mountpoint: str, topic: str) -> bool:
        """Whether this client may PUBLISH to `topic` (False for an invalid topic name)."""
        if not validate_topic_name(topic):
            return False
        user = self._users.get(username) if username is not None else None
        if self._denied_topic(user, client_id, username, mountpoint, topic):
            return False
        if self._everyone.write.allow_topic(topic):
            return True
        if user is not None and user.write.allow_topic(topic):
            return True
        return any(matches(f, topic) for f in _substituted(self._write_patterns, client_id, username, mountpoint))

    def may_read(self, client_id: str, username: str | None, mountpoint: str, topic: str) -> bool:
        """Whether this client may receive a message of topic name `topic` (a retained one, say)."""
        return self.may_subscribe(client_id, username, mountpoint, topic)

    def _denied_topic(
        self, user: _Audience | None, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        if self._everyone.deny and self._everyone.deny.allow_topic(topic):
            return True
        if user is not None and user.deny and user.deny.allow_topic(topic):
            return True
        if not self._deny_patterns:
            return False
        values = {"%c": client_id, "%u": username, "%m": mountpoint}
        return any(matches(p.substitute_deny(values), topic) for p in self._deny_patterns)

    def withholds(self, client_id: str, username: str | None, mountpoint: str, topic: str) -> bool:
        """Whether a deny line keeps a message of topic name `topic` from this client (a subscription that only
        overlaps a deny was granted: its messages are judged one by one)."""
        user = self._users.get(username) if username is not None else None
        return self._denied_topic(user, client_id, username, mountpoint, topic)

    def overlaps_deny(self, client_id: str, username: str | None, mountpoint: str, topic_filter: str) -> bool:
        """Whether a deny line forbids some of the topics the valid, unshared `topic_filter` matches (its
        deliveries of those are withheld)."""
        user = self._users.get(username) if username is not None else None
        if self._everyone.deny and self._everyone.deny.overlap_filter(topic_filter):
            return True
        if user is not None and user.deny and user.deny.overlap_filter(topic_filter):
            return True
        if not self._deny_patterns:
            return False
        values = {"%c": client_id, "%u": username, "%m": mountpoint}
        sub = topic_filter.split("/")
        return any(_overlaps(p.substitute_deny(values).split("/"), sub) for p in self._deny_patterns)

    def _denied_filter(
        self, user: _Audience | None, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        """Whether a deny line covers `topic_filter`: every topic it matches is denied."""
        if self._everyone.deny and self._everyone.deny.allow_filter(topic_filter):
            return True
        if user is not None and user.deny and user.deny.allow_filter(topic_filter):
            return True
        if not self._deny_patterns:
            return False
        values = {"%c": client_id, "%u": username, "%m": mountpoint}
        sub = topic_filter.split("/")
        return any(_covers(p.substitute_deny(values).split("/"), sub) for p in self._deny_patterns)

    def may_subscribe(self, client_id: str, username: str | None, mountpoint: str, topic_filter: str) -> bool:
        """Whether this client may SUBSCRIBE to `topic_filter` (False for an invalid filter)."""
        try:
            _, topic_filter = parse_shared(topic_filter)
        except ValueError:
            return False
        if not validate_topic_filter(topic_filter):
            return False
        user = self._users.get(username) if username is not None else None
        if self._denied_filter(user, client_id, username, mountpoint, topic_filter):
            return False
        if self._everyone.read.allow_filter(topic_filter):
            return True
        if user is not None and user.read.allow_filter(topic_filter):
            return True
        sub = topic_filter.split("/")
        patterns = _substituted(self._read_patterns, client_id, username, mountpoint)
        return any(_covers(f.split("/"), sub) for f in patterns)


def _substituted(
    patterns: tuple[_Pattern, ...], client_id: str, username: str | None, mountpoint: str
) -> Iterator[str]:
    """The filters of `patterns` for one client, leaving out those that would be unsafe."""
    if not patterns:
        return
    values = {"%c": client_id, "%u": username, "%m": mountpoint}
    for pattern in patterns:
        f = pattern.substitute(values)
        if f is not None:
            yield f


def _audience(entries: Iterable[AclEntry]) -> _Audience:
    listed = list(entries)
    allowing = [e for e in listed if not e.deny]
    return _Audience(
        read=_Rules(e.topic_filter for e in allowing if e.access & Access.READ),
        write=_Rules(e.topic_filter for e in allowing if e.access & Access.WRITE),
        deny=_Rules(e.topic_filter for e in listed if e.deny),
    )


def parse_acl(text: str, source: str) -> Acl:
    """Parse an ACL file's text; `source` names it in errors. Raises AclError."""
    entries: list[AclEntry] = []
    user: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split(maxsplit=1)
        directive, rest = words[0], words[1] if len(words) > 1 else ""
        where = f"{source}:{number}"
        if directive == "user":
            if not rest:
                raise AclError(f"{where}: 'user' needs a user name")
            user = rest
        elif directive in ("topic", "pattern"):
            access, topic_filter, deny = _access_and_filter(rest, where, directive)
            pattern = directive == "pattern"
            entries.append(AclEntry(pattern, None if pattern else user, access, topic_filter, number, deny))
        else:
            raise AclError(f"{where}: unknown directive {directive!r} (expected topic, user or pattern)")
    return Acl(entries)


def _access_and_filter(rest: str, where: str, directive: str) -> tuple[Access, str, bool]:
    words = rest.split(maxsplit=1)
    if not words:
        raise AclError(f"{where}: '{directive}' needs a topic filter")
    deny = False
    if len(words) == 1:
        access, topic_filter = Access.BOTH, words[0]
    elif words[0] == _DENY:
        access, topic_filter, deny = Access.BOTH, words[1], True
    else:
        found = _ACCESS_WORDS.get(words[0])
        if found is None:
            raise AclError(f"{where}: expected read, write, readwrite or deny before the filter, got {words[0]!r}")
        access, topic_filter = found, words[1]
    if not validate_topic_filter(topic_filter):
        raise AclError(f"{where}: {topic_filter!r} is not a valid topic filter")
    if topic_filter.startswith(SHARE_PREFIX):
        raise AclError(f"{where}: {topic_filter!r}: shared subscriptions are judged on their filter, write that")
    return access, topic_filter, deny


def load_acl(path: Path) -> Acl:
    """Read and parse an ACL file. Raises AclError naming the path."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AclError(f"{path}: cannot read the ACL file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise AclError(f"{path}: the ACL file is not UTF-8 (byte {exc.start})") from None
    return parse_acl(text, str(path))
