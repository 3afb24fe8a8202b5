"""The storage rows of a replica: the tables, the row codecs, the :class:`Persist` outputs that write them,
and reading every row back at restore (docs/replication.md section 7).

Tables::

    md_obj   pack_full_key(prefix, key) -> pack_container(stripped container)
    md_dots  pack_dot(dot) -> pack_full_key(prefix, key)      a superseded or deleted dot awaiting GC
    md_meta  b"clock"     -> dvv.to_bytes(NodeClock)         the node-clock checkpoint
             b"watermark" -> dvv.to_bytes(Watermark)
             b"reserved"  -> msgpack int                     own counters below it may have been used

Object keys and values and index keys start with a version byte (:data:`ROW_VERSION`, 1).  Values are
msgpack-encoded as they come (:func:`pack_value`); an HLC stamp inside one is written as its list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgpack

import dvv
from dvv.causal_container import CausalContainer
from dvv.codec import flatten
from dvv.dots import Dot
from dvv.node_clock import NodeClock
from dvv.watermark import Watermark
from vmqpy.metadata.errors import DecodeError, MetadataError
from vmqpy.metadata.fields import (
    ContainerLike,
    Key,
    array,
    as_container,
    as_dvv,
    as_int,
    as_key,
    as_str,
    encode_extra,
    flat_container,
    unpack,
)
from vmqpy.metadata.objects import NO_CONTEXT, FullKey, StoredObject
from vmqpy.metadata.outputs import Persist

__all__ = [
    "META_CLOCK",
    "META_RESERVED",
    "META_WATERMARK",
    "ROW_VERSION",
    "TABLES",
    "T_DOTS",
    "T_META",
    "T_OBJ",
    "InvalidValueError",
    "SavedRows",
    "clock_row",
    "object_row",
    "pack_container",
    "pack_dot",
    "pack_full_key",
    "pack_single",
    "pack_value",
    "pending_dot_row",
    "read_rows",
    "reservation_row",
    "unpack_container",
    "unpack_dot",
    "unpack_full_key",
    "watermark_row",
]

T_OBJ = "md_obj"
T_DOTS = "md_dots"
T_META = "md_meta"
TABLES = (T_OBJ, T_DOTS, T_META)
META_CLOCK = b"clock"
META_WATERMARK = b"watermark"
META_RESERVED = b"reserved"
ROW_VERSION = 1
_VERSION_BYTE = bytes((ROW_VERSION,))

R = TypeVar("R")


class InvalidValueError(MetadataError, TypeError):
    """A value cannot be stored (it is not msgpack-serialisable)."""


def pack_value(value: Any) -> bytes:
    """``value`` as msgpack (a stamp as its list); raises :class:`InvalidValueError` when it cannot be."""
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True, default=encode_extra)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidValueError(f"values must be msgpack-serialisable: {exc}") from exc
    return packed


# -- row codecs -----------------------------------------------------------------------------------
def _pack_row(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True, default=encode_extra)
    return bytes((ROW_VERSION,)) + packed


def _read_row(data: bytes, what: str, read: Callable[[Any], R]) -> R:
    """``read`` of the msgpack object after the version byte; any failure is a :class:`DecodeError`."""
    try:
        if not data or data[0] != ROW_VERSION:
            raise DecodeError(f"{what}: unknown row version")
        return read(unpack(memoryview(data)[1:]))
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid {what}: {exc}") from exc


def pack_full_key(prefix: str, key: Key) -> bytes:
    """Storage key of an object (and the value of an index row): ``v1 + msgpack([prefix, [key...]])``."""
    return _pack_row([prefix, list(key)])


def _full_key(obj: Any) -> tuple[str, Key]:
    prefix, key = array(obj, "full key", length=2)
    return as_str(prefix, "prefix"), as_key(key)


def unpack_full_key(data: bytes) -> tuple[str, Key]:
    """Inverse of :func:`pack_full_key`."""
    return _read_row(data, "full key", _full_key)


def pack_container(container: ContainerLike) -> bytes:
    """Storage value of an object: ``v1 + msgpack([[node, counter, value, ...], [node, counter, ...]])``."""
    return _pack_row(flat_container(container))


_EMPTY_CTX = msgpack.packb([])
_PACKED_NODES: dict[str, bytes] = {}


def _packed_node(node: str) -> bytes:
    packed = _PACKED_NODES.get(node)
    if packed is None:
        packed = msgpack.packb(node)
        if len(_PACKED_NODES) < 4096:
            _PACKED_NODES[node] = packed
    return packed


def _packed_uint(n: int) -> bytes:
    """msgpack encoding of a non-negative int (what ``msgpack.packb(n)`` gives, without a Packer)."""
    if n < 0x80:
        return bytes((n,))
    if n < 0x100:
        return b"\xcc" + n.to_bytes(1, "big")
    if n < 0x10000:
        return b"\xcd" + n.to_bytes(2, "big")
    if n < 0x100000000:
        return b"\xce" + n.to_bytes(4, "big")
    return b"\xcf" + n.to_bytes(8, "big")


def pack_single(node: str, counter: int, packed_value: bytes | None, ctx: Mapping[str, int]) -> bytes:
    """:func:`pack_container` of a container with one version (none when ``packed_value`` is None) whose
    value is already msgpack-encoded: the write path's row, assembled without re-encoding the value."""
    ctx_bytes = _EMPTY_CTX if not ctx else msgpack.packb(flatten(ctx.items()))
    if packed_value is None:
        return b"%c\x92\x90%b" % (ROW_VERSION, ctx_bytes)
    return b"%c\x92\x93%b%b%b%b" % (ROW_VERSION, _packed_node(node), _packed_uint(counter), packed_value, ctx_bytes)


def unpack_container(data: bytes) -> CausalContainer:
    """Inverse of :func:`pack_container`."""
    return _read_row(data, "container", as_container)


def pack_dot(dot: Dot) -> bytes:
    """Storage key of an index row: ``v1 + msgpack([node, counter])``."""
    return b"%c\x92%b%b" % (ROW_VERSION, _packed_node(dot[0]), _packed_uint(dot[1]))


def _dot(obj: Any) -> Dot:
    node, counter = array(obj, "dot", length=2)
    return as_str(node, "node"), as_int(counter, "counter", 1)


def unpack_dot(data: bytes) -> Dot:
    """Inverse of :func:`pack_dot`."""
    return _read_row(data, "dot", _dot)


# -- writes -----------------------------------------------------------------------------------------
def object_row(full_key: bytes, container: bytes | None) -> Persist:
    """Write (None: delete) the object row of a key (``full_key``: :func:`pack_full_key`)."""
    return Persist(T_OBJ, full_key, container)


def pending_dot_row(dot: Dot, full_key: bytes | None) -> Persist:
    """Index ``dot`` as a dot awaiting GC under ``full_key`` (None: GC forgot it, delete the row)."""
    return Persist(T_DOTS, pack_dot(dot), full_key)


def clock_row(clock: NodeClock) -> Persist:
    """Checkpoint the node clock."""
    return Persist(T_META, META_CLOCK, dvv.to_bytes(clock))


def watermark_row(watermark: Watermark) -> Persist:
    """Save the watermark."""
    return Persist(T_META, META_WATERMARK, dvv.to_bytes(watermark))


def reservation_row(reserved: int) -> Persist:
    """Save the reservation: own counters below ``reserved`` may have been used."""
    return Persist(T_META, META_RESERVED, msgpack.packb(reserved))


# -- restore ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class SavedRows:
    """Everything the rows of one replica hold, decoded."""

    clock: NodeClock  # the checkpoint (empty without one)
    watermark: Watermark | None
    reserved: int  # 0 without a reservation row
    objects: list[tuple[FullKey, StoredObject]]  # md_obj rows, in row order (empty objects left out)
    pending: list[tuple[Dot, FullKey]]  # md_dots rows, in row order


_KEY_ITEM_TYPES = frozenset((str, int, bytes))


def _common_object(raw_key: bytes, raw_obj: bytes) -> tuple[FullKey, StoredObject] | None:
    """The object row of the common shape (one version, no stripped context, a key of str/int/bytes items)
    decoded in one pass; None for any other row, which the general decoders then read (and reject when it is
    not ours). Same result as :func:`unpack_full_key` and :func:`unpack_container` for the rows it takes: it
    only leaves out building and validating a :class:`CausalContainer` for each (the restart cost at a
    million keys, docs/performance.md)."""
    if raw_key[:1] != _VERSION_BYTE or raw_obj[:1] != _VERSION_BYTE:
        return None
    try:
        key_obj = msgpack.unpackb(raw_key[1:])  # a map in a key is not ours: the general path refuses it
        obj = msgpack.unpackb(raw_obj[1:], raw=False, strict_map_key=False, use_list=True)
    except Exception:
        return None  # the general path says what is wrong
    if type(key_obj) is not list or len(key_obj) != 2 or type(obj) is not list or len(obj) != 2:
        return None
    prefix, items = key_obj
    version, ctx = obj
    if (type(prefix) is not str or type(items) is not list or type(version) is not list or len(version) != 3
            or ctx != [] or type(ctx) is not list):
        return None
    node, counter, value = version
    if type(node) is not str or type(counter) is not int or counter < 1:
        return None
    for item in items:
        if type(item) not in _KEY_ITEM_TYPES:
            return None
    return (prefix, tuple(items)), StoredObject((((node, counter), value),), NO_CONTEXT)


def read_rows(rows: Mapping[str, list[tuple[bytes, bytes]]]) -> SavedRows:
    """Decode the rows of every table (``Storage.load`` per table); raises :class:`DecodeError` for rows that
    are not ours."""
    meta = dict(rows.get(T_META, []))
    clock = NodeClock()
    if META_CLOCK in meta:
        clock = as_dvv(meta[META_CLOCK], NodeClock, "NodeClock row")
    watermark = None
    if META_WATERMARK in meta:
        watermark = as_dvv(meta[META_WATERMARK], Watermark, "Watermark row")
    reserved = 0
    if META_RESERVED in meta:
        try:
            reserved = msgpack.unpackb(meta[META_RESERVED])
        except Exception as exc:
            raise DecodeError(f"bad reservation row: {exc}") from exc
        if not isinstance(reserved, int) or isinstance(reserved, bool) or reserved < 0:
            raise DecodeError("bad reservation row")
    objects: list[tuple[FullKey, StoredObject]] = []
    for raw_key, raw_obj in rows.get(T_OBJ, []):
        found = _common_object(raw_key, raw_obj)
        if found is None:
            fk = unpack_full_key(raw_key)
            obj = StoredObject.of(unpack_container(raw_obj))
            if obj.is_empty():
                continue
            found = (fk, obj)
        objects.append(found)
    pending = [(unpack_dot(raw_dot), unpack_full_key(raw_key)) for raw_dot, raw_key in rows.get(T_DOTS, [])]
    return SavedRows(clock, watermark, reserved, objects, pending)
