"""The keys' objects as a replica holds them at rest, and the table of them.

A :class:`StoredObject` is a key's versions (sorted by dot) and its context *stripped* of what the node
clock's base already says.  It is a light record rather than a :class:`dvv.CausalContainer`, so the write
path does not pay for building (and validating) a container per write; merges go through
``CausalContainer.sync``.  An object with no version but a context is the tombstone of a delete; an
object with neither is not kept.

:class:`ObjectTable` maps prefix -> key -> object and keeps three sets of keys up to date: the keys
stored with a context (GC re-strips them), with siblings (write-back candidates) and with no version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
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

    __slots__ = ("_by_prefix", "_dead", "_with_context", "_with_siblings")

    def __init__(self) -> None:
        self._by_prefix: dict[str, dict[Key, StoredObject]] = {}
        self._with_context: dict[FullKey, None] = {}  # keys stored with a non-empty (stripped) context
        self._with_siblings: dict[FullKey, None] = {}  # keys with concurrent versions (siblings)
        self._dead: dict[FullKey, None] = {}  # keys stored with no version (a delete not yet stripped away)

    def get(self, prefix: str, key: Key) -> StoredObject | None:
        objs = self._by_prefix.get(prefix)
        return None if objs is None else objs.get(key)

    def keep(self, fk: FullKey, obj: StoredObject) -> bool:
        """Make ``obj`` the key's object (an empty one removes the key).  Returns whether the key's row must be
        written: always for a kept object, for an empty one only when the key had an object."""
        prefix, key = fk
        if obj.is_empty():
            dropped = False
            objs = self._by_prefix.get(prefix)
            if objs is not None and objs.pop(key, None) is not None:
                dropped = True
                if not objs:
                    del self._by_prefix[prefix]
            self._with_context.pop(fk, None)
            self._with_siblings.pop(fk, None)
            self._dead.pop(fk, None)
            return dropped
        objs = self._by_prefix.get(prefix)
        if objs is None:
            objs = self._by_prefix[prefix] = {}
        objs[key] = obj
        if obj.ctx:
            self._with_context[fk] = None
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

    def restripped(self, base: Mapping[str, int]) -> Iterator[tuple[FullKey, StoredObject]]:
        """``(key, object)`` for every object whose context loses entries the node clock's ``base`` now covers
        (the caller keeps each as it comes)."""
        for fk in list(self._with_context):
            obj = self.get(*fk)
            if obj is None:
                self._with_context.pop(fk, None)
                continue
            stripped = StoredObject(obj.versions, obj.ctx.filter_ids(lambda n, c: c > base.get(n, 0)))
            if stripped != obj:
                yield fk, stripped

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
