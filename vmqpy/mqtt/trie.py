"""The routing trie: MQTT topic filters (with ``+`` and ``#`` wildcards) indexed by level.

``match(topic)`` walks the trie level by level. At each level it follows the literal child for that
level and, if present, the ``+`` child; a ``#`` child matches the rest of the topic. The cost is
O(depth x number of wildcard branches actually present), independent of the number of filters.

Matching rules (MQTT 3.1.1 section 4.7 / MQTT 5.0 section 4.7):

* levels are separated by ``/``; empty levels are real levels (``a//b`` has three, ``/a`` two);
* ``+`` matches exactly one level (possibly empty);
* ``#`` (always the last level of a filter) matches the parent level and any number of levels
  below it: ``a/#`` matches ``a``, ``a/b`` and ``a/b/c``; ``#`` alone matches every topic;
* a topic whose first character is ``$`` is not matched by a filter whose first level is ``+``
  or ``#``.

Filters are assumed to be valid (the broker validates them before they get here).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["SubscriptionTrie"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Node(Generic[K, V]):
    """One level of the trie.

    ``children`` holds literal levels; ``plus`` and ``hash`` are the wildcard children, kept apart so
    that the hot path never has to look them up in the dict. ``entries`` are the subscriptions whose
    filter ends at this node (``filter`` is that filter's text). ``matches`` caches the
    ``(filter, key, value)`` tuples of ``entries``; it is rebuilt lazily after a change.
    """

    __slots__ = ("children", "entries", "filter", "hash", "matches", "plus")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K, V]] = {}
        self.plus: _Node[K, V] | None = None
        self.hash: _Node[K, V] | None = None
        self.entries: dict[K, V] = {}
        self.filter: str = ""
        self.matches: list[tuple[str, K, V]] | None = None

    def is_empty(self) -> bool:
        return not self.entries and not self.children and self.plus is None and self.hash is None

    def tuples(self) -> list[tuple[str, K, V]]:
        m = self.matches
        if m is None:
            f = self.filter
            m = self.matches = [(f, k, v) for k, v in self.entries.items()]
        return m


class SubscriptionTrie(Generic[K, V]):
    """Topic filter -> {key: value}, matched against concrete topics.

    An entry is identified by ``(topic_filter, key)``; adding the same pair again replaces the value.
    """

    __slots__ = ("_filters", "_len", "_root")

    def __init__(self) -> None:
        self._root: _Node[K, V] = _Node()
        self._len = 0
        self._filters = 0

    def __len__(self) -> int:
        """Number of ``(filter, key)`` entries."""
        return self._len

    def filters(self) -> int:
        """Number of distinct filters with at least one entry."""
        return self._filters

    def add(self, topic_filter: str, key: K, value: V) -> bool:
        """Add or replace an entry. Returns True if it is new, False if an existing value was replaced."""
        node = self._root
        for level in topic_filter.split("/"):
            if level == "+":
                nxt = node.plus
                if nxt is None:
                    nxt = node.plus = _Node()
            elif level == "#":
                nxt = node.hash
                if nxt is None:
                    nxt = node.hash = _Node()
            else:
                nxt = node.children.get(level)
                if nxt is None:
                    nxt = node.children[level] = _Node()
            node = nxt
        entries = node.entries
        node.matches = None
        if key in entries:
            entries[key] = value
            return False
        if not entries:
            node.filter = topic_filter
            self._filters += 1
        entries[key] = value
        self._len += 1
        return True

    def remove(self, topic_filter: str, key: K) -> bool:
        """Remove an entry. Returns True if it was there. Nodes left empty are pruned."""
        found = self._walk(topic_filter)
        if found is None:
            return False
        path, node = found
        entries = node.entries
        if key not in entries:
            return False
        del entries[key]
        node.matches = None
        self._len -= 1
        if entries:
            return True
        self._filters -= 1
        node.filter = ""
        # Prune the nodes that no longer lead to any entry, bottom up.
        while path and node.is_empty():
            parent, level = path.pop()
            if level == "+":
                parent.plus = None
            elif level == "#":
                parent.hash = None
            else:
                del parent.children[level]
            node = parent
        return True

    def get(self, topic_filter: str, key: K) -> V | None:
        """The value stored for ``(topic_filter, key)``, or None."""
        found = self._walk(topic_filter)
        return None if found is None else found[1].entries.get(key)

    def _walk(self, topic_filter: str) -> tuple[list[tuple[_Node[K, V], str]], _Node[K, V]] | None:
        """The node of ``topic_filter`` and the (parent, level) steps to it; None when it has no node."""
        node = self._root
        path: list[tuple[_Node[K, V], str]] = []
        for level in topic_filter.split("/"):
            path.append((node, level))
            nxt = node.plus if level == "+" else node.hash if level == "#" else node.children.get(level)
            if nxt is None:
                return None
            node = nxt
        return path, node

    def match(self, topic: str) -> list[tuple[str, K, V]]:
        """Every ``(filter, key, value)`` whose filter matches ``topic`` (a concrete topic name)."""
        out: list[tuple[str, K, V]] = []
        levels = topic.split("/")
        root = self._root
        # First level by hand: this is where the '$' rule applies.
        if topic[:1] == "$":
            nxt = root.children.get(levels[0])
            if nxt is None:
                return out
            current = [nxt]
        else:
            h = root.hash
            if h is not None:
                out.extend(h.tuples())
            current = []
            nxt = root.children.get(levels[0])
            if nxt is not None:
                current.append(nxt)
            nxt = root.plus
            if nxt is not None:
                current.append(nxt)
        for i in range(1, len(levels)):
            if not current:
                return out
            level = levels[i]
            following: list[_Node[K, V]] = []
            for node in current:
                h = node.hash
                if h is not None:
                    out.extend(h.tuples())
                if node.children:
                    nxt = node.children.get(level)
                    if nxt is not None:
                        following.append(nxt)
                nxt = node.plus
                if nxt is not None:
                    following.append(nxt)
            current = following
        for node in current:
            if node.entries:
                out.extend(node.tuples())
            h = node.hash  # 'a/#' matches 'a'
            if h is not None:
                out.extend(h.tuples())
        return out
