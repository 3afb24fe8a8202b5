"""Versioned binary codec for every :mod:`dvv` type (msgpack payload).

Layout: byte 0 is the *format version* (currently ``1``), byte 1 a *type tag*, the rest one msgpack
object in a compact, positional shape (flat arrays, no field names).  A decoder keeps the readers of
every older version, so a node can read what an older node wrote; a format change adds a version,
it never edits one.  :func:`from_bytes` raises :class:`~dvv.errors.DecodeError`, and nothing else,
for any input that is not a valid encoding (unknown version or tag, truncated or trailing bytes,
wrong shapes or types, broken invariants).  Values stored in clocks and containers (and dot-key-map
keys) must be msgpack-serialisable: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
lists, dicts.  Tuples come back as lists, except inside dot-key-map keys, which must be hashable and
so come back as tuples.

Sequences of pairs are written as one flat array (``[n, c, n, c, ...]``), never as an array of arrays.
:func:`flatten` writes such arrays and :func:`expect_array` checks the shape of a decoded one; both are
public because :mod:`vmqpy.metadata`'s wire messages and storage rows use the same shapes.

Version 1 payloads (``n`` node id, ``c`` counter)::

    tag 1 Dot              [n, c]
    tag 2 VersionVector    [n, c, n, c, ...]
    tag 3 dvvset.Clock     [[n, c, [values, newest first], ...], [anonymous values]]
    tag 4 NodeClock        [n, base, bitmap, ...]   bitmap: int, or little-endian bytes if >= 2**64
    tag 5 CausalContainer  [n, c, value, n, c, value, ..., [n, c, ...]]   (versions, then context)
    tag 6 Watermark        [[node, [peer, c, ...], ...], [retired node, [peer, c, ...], ...]]
    tag 7 DotKeyMap        [n, [c, key, c, key, ...], ...]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from dvv import dvvset
from dvv.causal_container import CausalContainer
from dvv.dot_key_map import DotKeyMap
from dvv.dots import Dot, check_counter, check_dot, check_node
from dvv.errors import DecodeError, EncodeError, InvalidClockError
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark

__all__ = ["FORMAT_VERSION", "TAGS", "expect_array", "flatten", "from_bytes", "to_bytes"]

FORMAT_VERSION = 1

TAG_DOT = 1
TAG_VV = 2
TAG_DVVSET = 3
TAG_NODE_CLOCK = 4
TAG_CONTAINER = 5
TAG_WATERMARK = 6
TAG_DKM = 7

TAGS: dict[int, str] = {
    TAG_DOT: "Dot",
    TAG_VV: "VersionVector",
    TAG_DVVSET: "dvvset.Clock",
    TAG_NODE_CLOCK: "NodeClock",
    TAG_CONTAINER: "CausalContainer",
    TAG_WATERMARK: "Watermark",
    TAG_DKM: "DotKeyMap",
}

Decoded = Dot | VersionVector | dvvset.Clock | NodeClock | CausalContainer | Watermark | DotKeyMap

_U64 = 1 << 64


# -- flat arrays --------------------------------------------------------------------------------
def flatten(items: Iterable[Iterable[Any]]) -> list[Any]:
    """One flat array of the items' parts, in order: ``[("a", 1), ("b", 2)] -> ["a", 1, "b", 2]``."""
    out: list[Any] = []
    for item in items:
        out += item
    return out


def expect_array(
    obj: Any,
    what: str,
    *,
    multiple: int = 1,
    length: int | None = None,
    error: Callable[[str], Exception] = DecodeError,
) -> list[Any]:
    """``obj`` if it is a decoded msgpack array of ``length`` items (any length when None) whose length is a
    multiple of ``multiple``; else raises ``error`` (default :class:`~dvv.errors.DecodeError`) naming ``what``."""
    if not isinstance(obj, list):
        raise error(f"{what}: expected an array, got {type(obj).__name__}")
    if length is not None and len(obj) != length:
        raise error(f"{what}: expected {length} items, got {len(obj)}")
    if len(obj) % multiple:
        raise error(f"{what}: length {len(obj)} is not a multiple of {multiple}")
    return obj


# -- encoding -----------------------------------------------------------------------------------
def _payload(obj: object) -> tuple[int, Any]:
    if isinstance(obj, VersionVector):
        return TAG_VV, flatten(obj.items())
    if isinstance(obj, dvvset.Clock):
        entries = flatten((e.id, e.counter, list(e.values)) for e in obj.entries)
        return TAG_DVVSET, [entries, list(obj.anonymous)]
    if isinstance(obj, NodeClock):
        return TAG_NODE_CLOCK, flatten((node, base, _bitmap(bitmap)) for node, (base, bitmap) in obj.items())
    if isinstance(obj, CausalContainer):
        flat = flatten((node, counter, value) for (node, counter), value in obj.items())
        flat.append(flatten(obj.context().items()))
        return TAG_CONTAINER, flat
    if isinstance(obj, Watermark):
        active = flatten((node, flatten(row.items())) for node, row in obj.active_rows().items())
        retired = flatten((node, flatten(row.items())) for node, row in obj.retired_rows().items())
        return TAG_WATERMARK, [active, retired]
    if isinstance(obj, DotKeyMap):
        by_node: dict[str, list[Any]] = {}
        for (node, counter), key in obj.items():
            by_node.setdefault(node, []).extend((counter, key))
        return TAG_DKM, flatten(by_node.items())
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], int):
        node, counter = check_dot(obj)
        return TAG_DOT, [node, counter]
    raise EncodeError(f"cannot encode {type(obj).__name__}: not a dvv type")


def _bitmap(bitmap: int) -> int | bytes:
    """A node-clock bitmap as stored: the int, or its little-endian bytes from 2**64 on."""
    return bitmap if bitmap < _U64 else bitmap.to_bytes((bitmap.bit_length() + 7) // 8, "little")


def to_bytes(obj: Decoded) -> bytes:
    """Encode a dvv object (a Dot, VersionVector, dvvset.Clock, NodeClock, CausalContainer, Watermark
    or DotKeyMap) as ``bytes([FORMAT_VERSION, tag]) + msgpack(payload)``.

    Raises :class:`~dvv.errors.EncodeError` for other types or values msgpack cannot encode.
    """
    try:
        tag, payload = _payload(obj)
    except InvalidClockError as exc:
        raise EncodeError(f"cannot encode {obj!r}: {exc}") from exc
    try:
        body: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode {TAGS[tag]}: {exc}") from exc
    return bytes((FORMAT_VERSION, tag)) + body


# -- decoding (version 1) -----------------------------------------------------------------------
def _pairs_vv(flat: Any, what: str) -> VersionVector:
    items = expect_array(flat, what, multiple=2)
    nodes = items[0::2]
    if len(set(nodes)) != len(nodes) or nodes != sorted(nodes):
        raise DecodeError(f"{what}: node ids must be sorted and unique")
    return VersionVector((check_node(n), check_counter(c, minimum=1)) for n, c in zip(nodes, items[1::2], strict=True))


def _hashable(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(_hashable(x) for x in obj)
    if isinstance(obj, dict):
        raise DecodeError("a dot-key-map key cannot be a map")
    return obj


def _dec_dot(p: Any) -> Dot:
    items = expect_array(p, "Dot", length=2)
    return check_dot((items[0], items[1]))


def _dec_vv(p: Any) -> VersionVector:
    return _pairs_vv(p, "VersionVector")


def _dec_dvvset(p: Any) -> dvvset.Clock:
    entries, anonymous = expect_array(p, "dvvset.Clock", length=2)
    flat = expect_array(entries, "dvvset.Clock entries", multiple=3)
    triples = [
        (flat[i], flat[i + 1], tuple(expect_array(flat[i + 2], "dvvset.Clock values"))) for i in range(0, len(flat), 3)
    ]
    return dvvset.Clock(tuple(dvvset.Entry(*t) for t in triples), tuple(expect_array(anonymous, "anonymous")))


def _dec_node_clock(p: Any) -> NodeClock:
    flat = expect_array(p, "NodeClock", multiple=3)
    entries: list[tuple[str, tuple[int, int]]] = []
    for i in range(0, len(flat), 3):
        node, base, bitmap = flat[i : i + 3]
        if isinstance(bitmap, bytes):
            if not bitmap or bitmap[-1] == 0:
                raise DecodeError("NodeClock: a bytes bitmap must be minimal (no trailing zero byte)")
            bitmap = int.from_bytes(bitmap, "little")
        check_counter(bitmap)
        if bitmap & 1:
            raise DecodeError("NodeClock: entry is not normalised (bitmap bit 0 set)")
        entries.append((check_node(node), (check_counter(base), bitmap)))
    nodes = [n for n, _ in entries]
    if nodes != sorted(set(nodes)):
        raise DecodeError("NodeClock: node ids must be sorted and unique")
    return NodeClock(entries)


def _dec_container(p: Any) -> CausalContainer:
    items = expect_array(p, "CausalContainer")
    if len(items) % 3 != 1:
        raise DecodeError(f"CausalContainer: expected 3 * versions + 1 items, got {len(items)}")
    flat, context = items[:-1], items[-1]
    dots = [check_dot((flat[i], flat[i + 1])) for i in range(0, len(flat), 3)]
    if dots != sorted(set(dots)):
        raise DecodeError("CausalContainer: dots must be sorted and unique")
    return CausalContainer(list(zip(dots, flat[2::3], strict=True)), _pairs_vv(context, "context"))


def _dec_rows(flat_rows: Any, what: str) -> dict[str, dict[str, int]]:
    flat = expect_array(flat_rows, what, multiple=2)
    rows: dict[str, dict[str, int]] = {}
    for i in range(0, len(flat), 2):
        node = check_node(flat[i])
        cells = expect_array(flat[i + 1], f"{what} row", multiple=2)
        peers = cells[0::2]
        if node in rows or len(set(peers)) != len(peers):
            raise DecodeError(f"{what}: duplicate row or column")
        rows[node] = {check_node(peer): check_counter(c) for peer, c in zip(peers, cells[1::2], strict=True)}
    return rows


def _dec_watermark(p: Any) -> Watermark:
    active, retired = expect_array(p, "Watermark", length=2)
    return Watermark(_dec_rows(active, "Watermark active"), _dec_rows(retired, "Watermark retired"))


def _dec_dkm(p: Any) -> DotKeyMap:
    flat = expect_array(p, "DotKeyMap", multiple=2)
    items: list[tuple[Dot, Any]] = []
    seen_nodes: set[str] = set()
    for i in range(0, len(flat), 2):
        node = check_node(flat[i])
        if node in seen_nodes:
            raise DecodeError("DotKeyMap: duplicate node")
        seen_nodes.add(node)
        pairs = expect_array(flat[i + 1], "DotKeyMap node", multiple=2)
        counters = pairs[0::2]
        if len(set(counters)) != len(counters):
            raise DecodeError("DotKeyMap: duplicate dot")
        items.extend((check_dot((node, c)), _hashable(k)) for c, k in zip(counters, pairs[1::2], strict=True))
    return DotKeyMap(items)


_DECODERS: dict[int, dict[int, Callable[[Any], Decoded]]] = {
    1: {
        TAG_DOT: _dec_dot,
        TAG_VV: _dec_vv,
        TAG_DVVSET: _dec_dvvset,
        TAG_NODE_CLOCK: _dec_node_clock,
        TAG_CONTAINER: _dec_container,
        TAG_WATERMARK: _dec_watermark,
        TAG_DKM: _dec_dkm,
    },
}


def from_bytes(data: bytes | bytearray | memoryview) -> Decoded:
    """Decode what :func:`to_bytes` (of this or any older format version) produced.

    Raises :class:`~dvv.errors.DecodeError` for anything else.
    """
    try:
        raw = bytes(data)
    except Exception as exc:
        raise DecodeError(f"expected bytes, got {type(data).__name__}") from exc
    if len(raw) < 3:
        raise DecodeError(f"too short for a dvv encoding: {len(raw)} bytes")
    version, tag = raw[0], raw[1]
    readers = _DECODERS.get(version)
    if readers is None:
        raise DecodeError(f"unsupported format version {version} (known: {sorted(_DECODERS)})")
    reader = readers.get(tag)
    if reader is None:
        raise DecodeError(f"unknown type tag {tag} for format version {version}")
    try:
        payload = msgpack.unpackb(raw[2:], raw=False, strict_map_key=False, use_list=True)
        return reader(payload)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid {TAGS.get(tag, '?')} encoding: {type(exc).__name__}: {exc}") from exc
