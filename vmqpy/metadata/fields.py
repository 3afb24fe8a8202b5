"""What a key is, and the msgpack shapes that the wire messages and the storage rows share.

A key is a tuple of ``str`` / ``int`` / ``bytes`` items (:func:`check_key`).  Dots and version vectors
are flat arrays ``[node, counter, node, counter, ...]`` and a container is ``[[node, counter, value,
...], [node, counter, ...]]`` (versions, then context): :func:`flat_container` writes one, with
:func:`dvv.codec.flatten`.  The ``as_*`` readers take one decoded msgpack object and raise
:class:`~vmqpy.metadata.errors.MessageDecodeError`, and nothing else, when it has another shape.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, TypeVar

import msgpack

import dvv
from dvv.causal_container import CausalContainer
from dvv.codec import expect_array, flatten
from dvv.dots import Dot
from dvv.version_vector import VersionVector
from vmqpy.metadata.errors import InvalidKeyError, MessageDecodeError
from vmqpy.metadata.hlc import Stamp

__all__ = [
    "ContainerLike",
    "Key",
    "array",
    "as_container",
    "as_dots",
    "as_dvv",
    "as_int",
    "as_key",
    "as_str",
    "as_vv",
    "check_key",
    "encode_extra",
    "flat_container",
    "unpack",
]

Key: TypeAlias = tuple[Any, ...]
"""A key: a tuple of ``str`` / ``int`` / ``bytes`` (msgpack lists are turned back into tuples)."""

D = TypeVar("D")


def _is_key_item(item: object) -> bool:
    return isinstance(item, str | int | bytes) and not isinstance(item, bool)


def check_key(prefix: object, key: object) -> Key:
    """Validate a prefix and a key; returns the key (a list is turned into a tuple)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"a prefix is a str, got {type(prefix).__name__}")
    if isinstance(key, list):
        key = tuple(key)
    if not isinstance(key, tuple):
        raise InvalidKeyError(f"a key is a tuple of str/int/bytes, got {type(key).__name__}")
    for item in key:
        if not _is_key_item(item):
            raise InvalidKeyError(f"key items are str, int or bytes, got {type(item).__name__} in {key!r}")
    return key


# -- writing --------------------------------------------------------------------------------------
class ContainerLike(Protocol):
    """What :func:`flat_container` needs: versions sorted by dot, and a context."""

    def items(self) -> tuple[tuple[Dot, Any], ...]: ...

    def context(self) -> VersionVector: ...


def flat_container(container: ContainerLike) -> list[Any]:
    """``[[node, counter, value, ...], [node, counter, ...]]``: the versions, then the context."""
    versions = flatten((node, counter, value) for (node, counter), value in container.items())
    return [versions, flatten(container.context().items())]


def encode_extra(obj: Any) -> Any:
    """msgpack's ``default`` hook for values: an HLC :class:`Stamp` is written as its list."""
    if isinstance(obj, Stamp):
        return obj.to_list()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__}")


# -- reading --------------------------------------------------------------------------------------
def unpack(data: Any) -> Any:
    """The msgpack object in ``data`` (arrays as lists, any map keys)."""
    try:
        raw = bytes(data)
    except Exception as exc:
        raise MessageDecodeError(f"expected bytes, got {type(data).__name__}") from exc
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        raise MessageDecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from exc


def array(obj: Any, what: str, *, multiple: int = 1, length: int | None = None) -> list[Any]:
    """:func:`dvv.codec.expect_array`, raising our :class:`MessageDecodeError`."""
    return expect_array(obj, what, multiple=multiple, length=length, error=MessageDecodeError)


def as_int(obj: Any, what: str, minimum: int = 0) -> int:
    """An int (never a bool) of at least ``minimum``."""
    if not isinstance(obj, int) or isinstance(obj, bool) or obj < minimum:
        raise MessageDecodeError(f"{what}: expected an int >= {minimum}, got {obj!r}")
    return obj


def as_str(obj: Any, what: str) -> str:
    """A str."""
    if not isinstance(obj, str):
        raise MessageDecodeError(f"{what}: expected a str, got {type(obj).__name__}")
    return obj


def as_key(obj: Any) -> Key:
    """A key, from its array."""
    items = array(obj, "key")
    for item in items:
        if not _is_key_item(item):
            raise MessageDecodeError(f"key items are str, int or bytes, got {type(item).__name__}")
    return tuple(items)


def as_dots(flat: Any, what: str) -> tuple[Dot, ...]:
    """Dots, from ``[node, counter, ...]`` (counters from 1)."""
    items = array(flat, what, multiple=2)
    return tuple((as_str(items[i], what), as_int(items[i + 1], what, 1)) for i in range(0, len(items), 2))


def as_vv(flat: Any, what: str) -> VersionVector:
    """A version vector, from ``[node, counter, ...]`` (each node once, in any order)."""
    dots = as_dots(flat, what)
    nodes = [n for n, _ in dots]
    if len(set(nodes)) != len(nodes):
        raise MessageDecodeError(f"{what}: duplicate node id")
    return VersionVector(dots)


def as_container(obj: Any) -> CausalContainer:
    """A causal container, from what :func:`flat_container` wrote."""
    versions, ctx = array(obj, "container", length=2)
    flat = array(versions, "container versions", multiple=3)
    items = [
        ((as_str(flat[i], "dot node"), as_int(flat[i + 1], "dot counter", 1)), flat[i + 2])
        for i in range(0, len(flat), 3)
    ]
    if len({d for d, _ in items}) != len(items):
        raise MessageDecodeError("container: duplicate dot")
    return CausalContainer(items, as_vv(ctx, "container context"))


def as_dvv(obj: Any, kind: type[D], what: str | None = None) -> D:
    """A ``kind`` (a :mod:`dvv` type) from its :func:`dvv.to_bytes` bytes; ``what`` names it in errors
    (default: the type's name)."""
    name = kind.__name__ if what is None else what
    if not isinstance(obj, bytes | bytearray | memoryview):
        raise MessageDecodeError(f"expected dvv bytes for {name}, got {type(obj).__name__}")
    try:
        value = dvv.from_bytes(obj)
    except dvv.DecodeError as exc:
        raise MessageDecodeError(f"bad {name}: {exc}") from exc
    if not isinstance(value, kind):
        raise MessageDecodeError(f"expected {name}, got {type(value).__name__}")
    return value
