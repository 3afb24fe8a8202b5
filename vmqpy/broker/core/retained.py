"""Retained messages: one value per concrete topic, looked up by topic filter.

Topics are kept in a tree of levels (split on ``/``; empty levels are real levels), so that
``match(filter)`` only walks the branches the filter can reach: a literal level follows one child,
``+`` follows every child, ``#`` collects the whole subtree including the node itself (``a/#``
matches ``a``). Topics whose first character is ``$`` are not matched by a filter whose first
level is ``+`` or ``#``. Filters are assumed to be valid.

A store made with an ``unpack`` function also takes *packed* values: a value that is a ``list`` is a packed
record, kept as it is and turned into the value (``unpack(record)``, once; the value then replaces it) when
``get``, ``items`` or ``match`` first hands it out. A restart on a million retained messages fills the tree with
the records the metadata store already holds instead of building a million messages before the listener opens
(docs/performance.md, "Restart"). Every reader still gets values, never records; the store's values must not
themselves be lists, and a packed record must be one ``unpack`` cannot fail on (the caller checks it first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeAlias, TypeVar, cast

__all__ = ["Packed", "RetainedStore"]

V = TypeVar("V")
Packed: TypeAlias = list[Any]
"""A packed value: what the store's ``unpack`` turns into a value."""


class _Node(Generic[V]):
    """One topic level. ``item`` is ``(topic, value)`` if a message is retained exactly here (``value`` may be
    a packed record until it is first read)."""

    __slots__ = ("children", "item")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.item: tuple[str, V | Packed] | None = None


def _make_path(node: _Node[V], levels: Iterable[str]) -> _Node[V]:
    """The node below `node` at `levels`, made where missing."""
    for level in levels:
        nxt = node.children.get(level)
        if nxt is None:
            nxt = node.children[level] = _Node()
        node = nxt
    return node


class RetainedStore(Generic[V]):
    """Concrete topic -> retained value; with ``unpack``, values may be stored packed (module docstring)."""

    __slots__ = ("_len", "_root", "_unpack")

    def __init__(self, unpack: Callable[[Packed], V] | None = None) -> None:
        self._root: _Node[V] = _Node()
        self._len = 0
        self._unpack = unpack

    def _item(self, node: _Node[V]) -> tuple[str, V]:
        """The item of `node` (which holds one), its value unpacked (and kept so) if it was packed."""
        item = node.item
        assert item is not None
        if self._unpack is not None and type(item[1]) is list:
            item = node.item = (item[0], self._unpack(item[1]))
        return cast(tuple[str, V], item)

    def __len__(self) -> int:
        return self._len

    def _find(self, topic: str) -> _Node[V] | None:
        node: _Node[V] | None = self._root
        for level in topic.split("/"):
            assert node is not None
            node = node.children.get(level)
            if node is None:
                return None
        return node

    def set(self, topic: str, value: V) -> None:
        """Store (or replace) the retained value of ``topic``."""
        self._put(_make_path(self._root, topic.split("/")), topic, value)

    def set_many(self, items: Iterable[tuple[str, V | Packed]]) -> None:
        """``set`` of every ``(topic, value)`` in order; in a store made with ``unpack``, a value may be a packed
        record (module docstring). Topics that share their parent level with the one before them (a restart
        reads them in key order, so nearly all do) reuse that parent instead of walking the tree from the root
        again."""
        last_parent_path: str | None = None
        root = parent = self._root
        added = 0
        for topic, value in items:
            parent_path, slash, leaf = topic.rpartition("/")
            if not slash:
                parent, last_parent_path = root, None
            elif parent_path != last_parent_path:
                parent = _make_path(root, parent_path.split("/"))
                last_parent_path = parent_path
            node = parent.children.get(leaf)
            if node is None:
                node = parent.children[leaf] = _Node()
            if node.item is None:
                added += 1
            node.item = (topic, value)
        self._len += added

    def _put(self, node: _Node[V], topic: str, value: V | Packed) -> None:
        if node.item is None:
            self._len += 1
        node.item = (topic, value)

    def get(self, topic: str) -> V | None:
        """The retained value of ``topic``, or None."""
        node = self._find(topic)
        if node is None or node.item is None:
            return None
        return self._item(node)[1]

    def __contains__(self, topic: object) -> bool:
        if not isinstance(topic, str):
            return False
        node = self._find(topic)
        return node is not None and node.item is not None

    def delete(self, topic: str) -> bool:
        """Remove the retained value of ``topic``; True if there was one. Empty nodes are pruned."""
        node: _Node[V] | None = self._root
        path: list[tuple[_Node[V], str]] = []
        for level in topic.split("/"):
            assert node is not None
            path.append((node, level))
            node = node.children.get(level)
            if node is None:
                return False
        assert node is not None
        if node.item is None:
            return False
        node.item = None
        self._len -= 1
        # A variable of its own: mypyc (1.x/2.x) keeps `node.item` narrowed to None from the line above into the
        # loop, where `node` is each parent in turn, and then refuses a parent's item.
        pruned: _Node[V] = node
        while path and pruned.item is None and not pruned.children:
            parent, level = path.pop()
            del parent.children[level]
            pruned = parent
        return True

    def items(self) -> Iterator[tuple[str, V]]:
        """Every ``(topic, value)``, in no particular order. Do not modify the store while iterating."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.item is not None:
                yield self._item(node)
            stack.extend(node.children.values())

    def match(self, topic_filter: str) -> list[tuple[str, V]]:
        """Every retained ``(topic, value)`` whose topic matches ``topic_filter``."""
        return [self._item(node) for node in self._matching(topic_filter)]

    def _matching(self, topic_filter: str) -> list[_Node[V]]:
        """The nodes holding an item whose topic matches ``topic_filter``."""
        out: list[_Node[V]] = []
        root = self._root
        current = [root]
        for level in topic_filter.split("/"):
            if level == "#":
                stack: list[_Node[V]] = []
                for node in current:
                    if node is root:  # a leading '#' does not match '$' topics
                        stack.extend(c for name, c in node.children.items() if name[:1] != "$")
                        continue
                    if node.item is not None:  # the parent level: 'a/#' matches 'a'
                        out.append(node)
                    stack.extend(node.children.values())
                while stack:
                    node = stack.pop()
                    if node.item is not None:
                        out.append(node)
                    if node.children:
                        stack.extend(node.children.values())
                return out
            following: list[_Node[V]] = []
            if level == "+":
                for node in current:
                    if node is root:  # a leading '+' does not match '$' topics
                        following.extend(c for name, c in node.children.items() if name[:1] != "$")
                    else:
                        following.extend(node.children.values())
            else:
                for node in current:
                    nxt = node.children.get(level)
                    if nxt is not None:
                        following.append(nxt)
            if not following:
                return out
            current = following
        for node in current:
            if node.item is not None:
                out.append(node)
        return out
