"""The keys' objects as a replica holds them at rest, and the table of them.

A :class:`StoredObject` is a key's versions (sorted by dot) and its context *stripped* of what the node
clock's base already says.  It is a light record rather than a :class:`dvv.CausalContainer`, so the write
path does not pay for building (and validating) a container per write; merges go through
``CausalContainer.sync``.  An object with no version but a context is the tombstone of a delete; an
object with neither is not kept.

:class:`ObjectTable` maps prefix -> key -> object and keeps three sets of keys up to date: the keys
stored with a context (GC re-strips them), with siblings (write-back candidates) and with no version.
It also keeps, per node, a heap of the stored context entries by counter, so that a re-strip visits only the
objects whose context the node clock's base now covers in part, never every object stored with a context (a
fresh node catching up stores every key with the responder's base as its context: scanning them all at every
GC cost about a second per 100,000 keys, in one turn of the event loop).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

from dvv.causal_container import CausalContainer
from dvv.dots import Dot
from dvv.version_vector import VersionVector
from vmqpy.metadata.fields import Key

__all__ = ["EMPTY", "NO_CONTEXT", "FullKey", "ObjectTable", "StoredObject"]

FullKey: TypeAlias = tuple[str, Key]
"""``(prefix, key)``."""

NO_CONTEXT = VersionVector()


class StoredObject:
    """A key's object at rest: its versions (sorted by dot) and its *stripped* context."""

    __slots__ = ("ctx", "versions")

    def __init__(self, versions: tuple[tuple[Dot, Any], ...], ctx: VersionVector) -> None:
        self.versions = versions
        self.ctx = ctx

    @classmethod
    def of(cls, container: CausalContainer) -> StoredObject:
        return cls(container.items(), container.context())

    def dots(self) -> tuple[Dot, ...]:
        return tuple(d for d, _ in self.versions)

    def values(self) -> list[Any]:
        return [v for _, v in self.versions]

    def items(self) -> tuple[tuple[Dot, Any], ...]:
        return self.versions

    def context(self) -> VersionVector:
        return self.ctx

    def container(self) -> CausalContainer:
        return CausalContainer(self.versions, self.ctx)

    def is_empty(self) -> bool:
        return not self.versions and not self.ctx

    def __len__(self) -> int:
        return len(self.versions)

    def __bool__(self) -> bool:  # a tombstone (no version) is still an object
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredObject):
            return NotImplemented
        return self.versions == other.versions and self.ctx == other.ctx

    __hash__ = None  # type: ignore[assignment]


EMPTY = StoredObject((), NO_CONTEXT)


class ObjectTable:
    """prefix -> key -> :class:`StoredObject`, with the keys stored with a context, with siblings and dead."""

    __slots__ = ("_by_prefix", "_dead", "_strip_at", "_strip_heap", "_with_context", "_with_siblings")

    def __init__(self) -> None:
        self._by_prefix: dict[str, dict[Key, StoredObject]] = {}
        self._with_context: dict[FullKey, None] = {}  # keys stored with a non-empty (stripped) context
        self._with_siblings: dict[FullKey, None] = {}  # keys with concurrent versions (siblings)
        self._dead: dict[FullKey, None] = {}  # keys stored with no version (a delete not yet stripped away)
        # The strip schedule: node -> counter -> the keys whose stored context has exactly that entry, and node -> a
        # heap of those counters (it may also hold counters whose keys all left: skipped when reached).
        self._strip_at: dict[str, dict[int, dict[FullKey, None]]] = {}
        self._strip_heap: dict[str, list[int]] = {}

    def get(self, prefix: str, key: Key) -> StoredObject | None:
        objs = self._by_prefix.get(prefix)
        return None if objs is None else objs.get(key)

    def keep(self, fk: FullKey, obj: StoredObject) -> bool:
        """Make ``obj`` the key's object (an empty one removes the key).  Returns whether the key's row must be
        written: always for a kept object, for an empty one only when the key had an object."""
        prefix, key = fk
        objs = self._by_prefix.get(prefix)
        old = None if objs is None else objs.get(key)
        if old is not None and old.ctx is not obj.ctx and (old.ctx or obj.ctx):
            self._reschedule(fk, old.ctx, obj.ctx)
        if obj.is_empty():
            if objs is None or old is None:
                return False
            del objs[key]
            if not objs:
                del self._by_prefix[prefix]
            self._with_context.pop(fk, None)
            self._with_siblings.pop(fk, None)
            self._dead.pop(fk, None)
            return True
        if objs is None:
            objs = self._by_prefix[prefix] = {}
        objs[key] = obj
        if obj.ctx:
            self._with_context[fk] = None
            if old is None:
                self._reschedule(fk, NO_CONTEXT, obj.ctx)
        else:
            self._with_context.pop(fk, None)
        n_versions = len(obj.versions)
        if n_versions > 1:
            self._with_siblings[fk] = None
        elif self._with_siblings:
            self._with_siblings.pop(fk, None)
        if n_versions == 0:
            self._dead[fk] = None
        elif self._dead:
            self._dead.pop(fk, None)
        return True

    def adopt(self, objects: dict[str, dict[Key, StoredObject]], odd: Iterable[FullKey]) -> None:
        """Take ``objects`` (prefix -> key -> non-empty object, read back at a restart) as the table, which must be
        empty. ``odd`` names every key whose object may have siblings, a context or no version (every other one
        has one version and no context): the same table as :meth:`keep` of each object, without a million calls
        at a large restart."""
        if self._by_prefix:
            raise ValueError("adopt needs an empty table")
        self._by_prefix = objects
        for fk in odd:
            obj = objects[fk[0]][fk[1]]
            if obj.ctx:
                self._with_context[fk] = None
                self._reschedule(fk, NO_CONTEXT, obj.ctx)
            n_versions = len(obj.versions)
            if n_versions > 1:
                self._with_siblings[fk] = None
            elif n_versions == 0:
                self._dead[fk] = None

    def items(self, prefix: str) -> list[tuple[Key, StoredObject]]:
        """Every ``(key, object)`` of ``prefix`` (tombstones included), in storage order."""
        return list(self._by_prefix.get(prefix, {}).items())

    def with_siblings(self) -> list[FullKey]:
        """The keys whose object has concurrent versions."""
        return list(self._with_siblings)

    def has_contexts(self) -> bool:
        """Some object is stored with a context (a GC may strip it)."""
        return bool(self._with_context)

    def _reschedule(self, fk: FullKey, old: VersionVector, new: VersionVector) -> None:
        """The key's stored context goes from ``old`` to ``new``: its entries in the strip schedule follow."""
        before, after = old.to_dict(), new.to_dict()  # plain dicts: a VersionVector's items() is the slow Mapping one
        for node, counter in before.items():
            if after.get(node) != counter:
                at = self._strip_at.get(node)
                if at is None:
                    continue  # taken out by restripped (the caller keeps the object now)
                keys = at.get(counter)
                if keys is not None:
                    keys.pop(fk, None)
                    if not keys:
                        del at[counter]
        for node, counter in after.items():
            if before.get(node) != counter:
                self._enter(node, counter, fk)

    def _enter(self, node: str, counter: int, fk: FullKey) -> None:
        at = self._strip_at.get(node)
        if at is None:
            at = self._strip_at[node] = {}
            self._strip_heap[node] = []
        keys = at.get(counter)
        if keys is None:
            keys = at[counter] = {}
            heap = self._strip_heap[node]
            heapq.heappush(heap, counter)
            if len(heap) > 2 * len(at) + 64:  # counters whose keys all left: rebuilt (ints, amortised)
                heap[:] = at
                heapq.heapify(heap)
        keys[fk] = None

    def strippable(self, base: Mapping[str, int]) -> bool:
        """Some stored context may have an entry the node clock's ``base`` covers (a re-strip has work)."""
        return any(heap[0] <= base.get(node, 0) for node, heap in self._strip_heap.items())

    def restripped(self, base: Mapping[str, int], limit: int) -> list[tuple[FullKey, StoredObject]]:
        """``(key, object)`` for objects whose context loses entries the node clock's ``base`` now covers, at most
        ``limit`` of them (:meth:`strippable` says whether more are left).  The caller must :meth:`keep` each one
        (their entries are taken out of the schedule already)."""
        out: list[tuple[FullKey, StoredObject]] = []
        found: set[FullKey] = set()
        for node in sorted(self._strip_heap):
            heap, at, top = self._strip_heap[node], self._strip_at[node], base.get(node, 0)
            while heap and heap[0] <= top and len(out) < limit:
                keys = at.get(heap[0])
                while keys and len(out) < limit:
                    fk, _ = keys.popitem()
                    obj = self.get(*fk)
                    if fk in found or obj is None:  # pragma: no cover - the schedule holds stored contexts only
                        continue
                    found.add(fk)
                    out.append((fk, StoredObject(obj.versions, obj.ctx.filter_ids(lambda n, c: c > base.get(n, 0)))))
                if not keys:
                    at.pop(heapq.heappop(heap), None)
            if not heap:
                del self._strip_heap[node], self._strip_at[node]
        return out

    def sizes(self) -> dict[str, int]:
        """Object rows (deletes included), tombstone rows, keys with siblings, objects with a context."""
        return {
            "keys": sum(len(objs) for objs in self._by_prefix.values()),
            "tombstone_rows": len(self._dead),
            "siblings": len(self._with_siblings),
            "contexts_at_rest": len(self._with_context),
        }

    def dump(self, base: Callable[[], VersionVector]) -> dict[str, dict[Key, dict[str, Any]]]:
        """prefix -> key -> {"values": [[node, counter, value], ...], "context": stored context, "filled": the
        context filled with the node clock's base (``base()``)}, prefixes sorted."""
        return {
            prefix: {
                key: {
                    "values": [[n, c, v] for (n, c), v in obj.items()],
                    "context": obj.ctx.to_dict(),
                    "filled": obj.ctx.merge(base()).to_dict(),
                }
                for key, obj in self._by_prefix[prefix].items()
            }
            for prefix in sorted(self._by_prefix)
        }
