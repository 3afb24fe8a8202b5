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
from vmqpy.metadata.errors import MessageDecodeError, MetadataError
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
    """``read`` of the msgpack object after the version byte; any failure is a :class:`MessageDecodeError`."""
    try:
        if not data or data[0] != ROW_VERSION:
            raise MessageDecodeError(f"{what}: unknown row version")
        return read(unpack(memoryview(data)[1:]))
    except MessageDecodeError:
        raise
    except Exception as exc:
        raise MessageDecodeError(f"invalid {what}: {exc}") from exc


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
    # md_obj rows: prefix -> key -> object, in row order (empty objects left out; of two rows decoding to one key
    # the later one, in the place of the first)
    objects: dict[str, dict[Key, StoredObject]]
    odd: list[FullKey]  # the keys whose object may have siblings, a context or no version (all others: one version)
    dots: dict[str, dict[int, FullKey]]  # node -> counter -> key of every version of those rows (later rows win)
    pending: list[tuple[Dot, FullKey]]  # md_dots rows, in row order


_KEY_ITEM_TYPES = frozenset((str, int, bytes))


def _read_objects(
    rows: list[tuple[bytes, bytes]],
) -> tuple[dict[str, dict[Key, StoredObject]], list[FullKey], dict[str, dict[int, FullKey]]]:
    """The objects, odd keys and dots of :class:`SavedRows` from the md_obj rows, in one pass.

    The common row (one version, no stripped context, a key of str/int/bytes items: every key without siblings)
    is decoded with two msgpack calls and a few type checks, straight into the tables; any other row, and any row
    that is not ours, goes through the general decoders (:func:`unpack_full_key`, :func:`unpack_container`),
    which refuse it as before. The same tables as decoding every row with the general decoders and keeping them
    one by one; it only leaves out building and validating a :class:`CausalContainer` and a list entry for each
    row (the restart cost at a million keys, docs/performance.md)."""
    objects: dict[str, dict[Key, StoredObject]] = {}
    odd: list[FullKey] = []
    dots: dict[str, dict[int, FullKey]] = {}
    unpackb = msgpack.unpackb
    item_types = _KEY_ITEM_TYPES
    last_prefix: str | None = None
    table: dict[Key, StoredObject] = {}
    last_node: str | None = None
    counters: dict[int, FullKey] = {}
    for raw_key, raw_obj in rows:
        try:
            if raw_key[0] != ROW_VERSION or raw_obj[0] != ROW_VERSION:
                raise ValueError("row version")
            # a map in a key is not ours: the general path refuses it
            (prefix, items), (version, ctx) = unpackb(raw_key[1:]), unpackb(raw_obj[1:], strict_map_key=False)
            node, counter, value = version
            common = (type(version) is list and type(prefix) is str and type(items) is list
                      and type(node) is str and type(counter) is int and counter > 0 and ctx == [])
        except Exception:  # the general path says what is wrong
            common = False
        if common:
            for item in items:
                if type(item) not in item_types:
                    common = False
                    break
        if common:
            key: Key = tuple(items)
            if prefix != last_prefix:
                table = objects.setdefault(prefix, {})
                last_prefix = prefix
            table[key] = StoredObject((((node, counter), value),), NO_CONTEXT)
            if node != last_node:
                counters = dots.setdefault(node, {})
                last_node = node
            counters[counter] = (prefix, key)
            continue
        fk = unpack_full_key(raw_key)
        obj = StoredObject.of(unpack_container(raw_obj))
        if obj.is_empty():
            continue
        odd.append(fk)
        objects.setdefault(fk[0], {})[fk[1]] = obj
        for dot, _value in obj.versions:
            dots.setdefault(dot[0], {})[dot[1]] = fk
    return objects, odd, dots


def read_rows(rows: Mapping[str, list[tuple[bytes, bytes]]]) -> SavedRows:
    """Decode the rows of every table (``Storage.load`` per table); raises :class:`MessageDecodeError` for rows that
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
            raise MessageDecodeError(f"bad reservation row: {exc}") from exc
        if not isinstance(reserved, int) or isinstance(reserved, bool) or reserved < 0:
            raise MessageDecodeError("bad reservation row")
    objects, odd, dots = _read_objects(rows.get(T_OBJ, []))
    pending = [(unpack_dot(raw_dot), unpack_full_key(raw_key)) for raw_dot, raw_key in rows.get(T_DOTS, [])]
    return SavedRows(clock, watermark, reserved, objects, odd, dots, pending)
