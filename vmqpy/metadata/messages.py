"""Wire messages between replicas, their codec, and the storage-row codecs.

Every message is one msgpack array ``[VERSION, TYPE, field, ...]`` (positional fields, no names).
:func:`decode` keeps a reader per (version, type); it raises
:class:`~vmqpy.metadata.errors.DecodeError`, and nothing else, for any input that is not a valid
encoding.  A format change adds a version; it never edits one.

Version 1 messages::

    1 Push         [1, 1, prefix, key, node, counter, [value] | [], context]   a local write/delete
    2 SyncRequest  [1, 2, xid, limit, clock, watermark | nil]           exchange: "here is my node clock"
    3 SyncReply    [1, 3, xid, done, missing, base, objects, gaps, watermark | nil]
    4 SyncReject   [1, 4, xid, reason]

Version 2 (the exchange messages carry the sender's membership view: ``view`` is
:func:`view_digest` of its members, 8 bytes; see docs/replication.md section 4)::

    2 SyncRequest  [2, 2, xid, limit, clock, watermark | nil, view | nil]
    3 SyncReply    [2, 3, xid, done, missing, base, objects, gaps, watermark | nil, view | nil]

Version 1 exchange messages still decode (``view`` None: the sender's view is unknown).

    key        [item, ...]                 items are str, int or bytes (a Key is a tuple)
    container  [[node, counter, value, ...], [node, counter, ...]]   (versions, context)
    clock      dvv.codec bytes of a NodeClock      watermark  dvv.codec bytes of a Watermark
    base       [node, counter, ...]       (the responder's node-clock base, a version vector)
    objects    [[prefix, key, container, [node, counter, ...]], ...]   (stripped container, extra dots)
    gaps       [node, [start, stop, start, stop, ...], ...]     (counter runs, stop exclusive)

A ``Push`` is the container a local write produced: at most one version (the write's dot and value;
none for a delete) and the writer's whole causal context for the key (which covers the dot).  A ``SyncReply``
carries *stripped* containers plus the responder's base, which the requester fills them with, and
per object the requested dots that are not among the object's values (versions that object already
superseded).  ``gaps`` are requested dots the responder holds in its node clock but no longer
indexes (collected, or never written): the requester marks them as seen.

Storage rows (see ``docs/replication.md``) use :func:`pack_full_key` / :func:`pack_container` /
:func:`pack_dot` and their inverses, versioned by a leading byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import msgpack

import dvv
from dvv.causal_container import CausalContainer
from dvv.dots import Counters, Dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark
from vmqpy.metadata.errors import DecodeError, InvalidKeyError

__all__ = [
    "SYNC_VERSION",
    "VERSION",
    "VIEW_DIGEST_SIZE",
    "Key",
    "Message",
    "Push",
    "SyncObject",
    "SyncReject",
    "SyncReply",
    "SyncRequest",
    "check_key",
    "decode",
    "encode",
    "pack_container",
    "pack_dot",
    "pack_full_key",
    "pack_single",
    "unpack_container",
    "unpack_dot",
    "unpack_full_key",
    "view_digest",
]

VERSION = 1
SYNC_VERSION = 2  # SyncRequest and SyncReply since they carry the sender's membership view
VIEW_DIGEST_SIZE = 8
ROW_VERSION = 1
SYNC_VERSION = 2  # SyncRequest and SyncReply since they carry the sender's membership view
VIEW_DIGEST_SIZE = 8

Key: TypeAlias = tuple[Any, ...]
"""A key: a tuple of ``str`` / ``int`` / ``bytes`` (msgpack lists are turned back into tuples)."""

T_PUSH = 1
T_SYNC_REQUEST = 2
T_SYNC_REPLY = 3
T_SYNC_REJECT = 4


def check_key(prefix: object, key: object) -> Key:
    """Validate a prefix and a key; returns the key (a list is turned into a tuple)."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"a prefix is a str, got {type(prefix).__name__}")
    if isinstance(key, list):
        key = tuple(key)
    if not isinstance(key, tuple):
        raise InvalidKeyError(f"a key is a tuple of str/int/bytes, got {type(key).__name__}")
    for item in key:
        if not isinstance(item, str | int | bytes) or isinstance(item, bool):
            raise InvalidKeyError(f"key items are str, int or bytes, got {type(item).__name__} in {key!r}")
    return key


def view_digest(members: Iterable[str]) -> bytes:
    """The 8-byte digest of a membership view (the set of replica ids, this node included)."""
    packed: bytes = msgpack.packb(sorted(set(members)), use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=VIEW_DIGEST_SIZE).digest()


# -- message types ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Push:
    """A write of ``value`` (a delete when ``value`` is None) coordinated under ``dot``, broadcast."""

    prefix: str
    key: Key
    dot: Dot
    value: Any  # None for a delete
    context: Mapping[str, int]  # the writer's whole causal context for the key, covering ``dot``
    size: int = field(default=0, compare=False, repr=False)  # encoded bytes, set by decode()

    def container(self) -> CausalContainer:
        """The pushed object as a (filled) causal container."""
        versions = () if self.value is None else ((self.dot, self.value),)
        ctx = self.context if isinstance(self.context, VersionVector) else VersionVector(self.context)
        return CausalContainer(versions, ctx.add(self.dot))


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """Exchange step: the requester's node clock; "send me what I miss (at most ``limit`` objects)"."""

    xid: int
    limit: int
    clock: NodeClock
    watermark: Watermark | None = None
    view: bytes | None = None  # digest of the requester's membership view (None: a version 1 peer)
    size: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class SyncObject:
    """One object of a :class:`SyncReply`: a stripped container and the requested dots it superseded."""

    prefix: str
    key: Key
    container: CausalContainer
    extra: tuple[Dot, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncReply:
    """Exchange step: the objects for (a batch of) the dots the requester misses."""

    xid: int
    done: bool
    missing: int  # dots the requester missed when the responder answered (this batch and later ones)
    base: VersionVector  # responder's node-clock base: fills the stripped containers
    objects: tuple[SyncObject, ...]
    gaps: Mapping[str, Counters]
    watermark: Watermark | None = None  # on the last batch
    view: bytes | None = None  # digest of the responder's membership view (None: a version 1 peer)
    size: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class SyncReject:
    """Exchange refused (``reason``: e.g. ``"not_a_member"``, ``"stopped"``)."""

    xid: int
    reason: str
    size: int = field(default=0, compare=False, repr=False)


Message: TypeAlias = Push | SyncRequest | SyncReply | SyncReject


# -- encoding -------------------------------------------------------------------------------------
class ContainerLike(Protocol):
    """What :func:`pack_container` needs: versions sorted by dot, and a context."""

    def items(self) -> tuple[tuple[Dot, Any], ...]: ...

    def context(self) -> VersionVector: ...


def _flat_container(c: ContainerLike) -> list[Any]:
    versions: list[Any] = []
    for (node, counter), value in c.items():
        versions += (node, counter, value)
    ctx: list[Any] = []
    for node, counter in c.context().items():
        ctx += (node, counter)
    return [versions, ctx]


def _flat_vv(vv: Mapping[str, int]) -> list[Any]:
    out: list[Any] = []
    for node, counter in vv.items():
        out += (node, counter)
    return out


def _flat_dots(dots: tuple[Dot, ...]) -> list[Any]:
    out: list[Any] = []
    for node, counter in dots:
        out += (node, counter)
    return out


def _payload(message: Message) -> list[Any]:
    if isinstance(message, Push):
        node, counter = message.dot
        return [
            VERSION,
            T_PUSH,
            message.prefix,
            list(message.key),
            node,
            counter,
            [] if message.value is None else [message.value],
            _flat_vv(message.context),
        ]
    if isinstance(message, SyncRequest):
        wm = None if message.watermark is None else dvv.to_bytes(message.watermark)
        return [SYNC_VERSION, T_SYNC_REQUEST, message.xid, message.limit, dvv.to_bytes(message.clock), wm,
                message.view]
    if isinstance(message, SyncReply):
        objects = [
            [o.prefix, list(o.key), _flat_container(o.container), _flat_dots(o.extra)] for o in message.objects
        ]
        gaps: list[Any] = []
        for node, counters in message.gaps.items():
            runs: list[int] = []
            for run in counters.runs:
                runs += (run.start, run.stop)
            gaps += (node, runs)
        wm = None if message.watermark is None else dvv.to_bytes(message.watermark)
        return [
            SYNC_VERSION,
            T_SYNC_REPLY,
            message.xid,
            message.done,
            message.missing,
            _flat_vv(message.base),
            objects,
            gaps,
            wm,
            message.view,
        ]
    if isinstance(message, SyncReject):
        return [VERSION, T_SYNC_REJECT, message.xid, message.reason]
    raise TypeError(f"not a metadata message: {type(message).__name__}")


def _default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return list(obj)
    to_list = getattr(obj, "to_list", None)  # an HLC Stamp
    if to_list is not None:
        return to_list()
    raise TypeError(f"cannot encode {type(obj).__name__}")


def encode(message: Message) -> bytes:
    """The wire bytes of ``message`` (values must be msgpack-serialisable)."""
    packed: bytes = msgpack.packb(_payload(message), use_bin_type=True, default=_default)
    return packed


# -- decoding -------------------------------------------------------------------------------------
def _list(obj: Any, what: str, *, multiple: int = 1, length: int | None = None) -> list[Any]:
    if not isinstance(obj, list):
        raise DecodeError(f"{what}: expected an array, got {type(obj).__name__}")
    if length is not None and len(obj) != length:
        raise DecodeError(f"{what}: expected {length} items, got {len(obj)}")
    if len(obj) % multiple:
        raise DecodeError(f"{what}: length {len(obj)} is not a multiple of {multiple}")
    return obj


def _int(obj: Any, what: str, minimum: int = 0) -> int:
    if not isinstance(obj, int) or isinstance(obj, bool) or obj < minimum:
        raise DecodeError(f"{what}: expected an int >= {minimum}, got {obj!r}")
    return obj


def _str(obj: Any, what: str) -> str:
    if not isinstance(obj, str):
        raise DecodeError(f"{what}: expected a str, got {type(obj).__name__}")
    return obj


def _key(obj: Any) -> Key:
    items = _list(obj, "key")
    for item in items:
        if not isinstance(item, str | int | bytes) or isinstance(item, bool):
            raise DecodeError(f"key items are str, int or bytes, got {type(item).__name__}")
    return tuple(items)


def _dots(flat: Any, what: str) -> tuple[Dot, ...]:
    items = _list(flat, what, multiple=2)
    return tuple(
        (_str(items[i], what), _int(items[i + 1], what, 1)) for i in range(0, len(items), 2)
    )


def _vv(flat: Any, what: str) -> VersionVector:
    dots = _dots(flat, what)
    nodes = [n for n, _ in dots]
    if len(set(nodes)) != len(nodes):
        raise DecodeError(f"{what}: duplicate node id")
    return VersionVector(dots)


def _container(obj: Any) -> CausalContainer:
    versions, ctx = _list(obj, "container", length=2)
    flat = _list(versions, "container versions", multiple=3)
    items = [
        ((_str(flat[i], "dot node"), _int(flat[i + 1], "dot counter", 1)), flat[i + 2]) for i in range(0, len(flat), 3)
    ]
    if len({d for d, _ in items}) != len(items):
        raise DecodeError("container: duplicate dot")
    return CausalContainer(items, _vv(ctx, "container context"))


def _dvv(obj: Any, kind: type) -> Any:
    if not isinstance(obj, bytes):
        raise DecodeError(f"expected dvv bytes for {kind.__name__}, got {type(obj).__name__}")
    try:
        value = dvv.from_bytes(obj)
    except dvv.DecodeError as exc:
        raise DecodeError(f"bad {kind.__name__}: {exc}") from exc
    if not isinstance(value, kind):
        raise DecodeError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value


def _gaps(obj: Any) -> dict[str, Counters]:
    flat = _list(obj, "gaps", multiple=2)
    out: dict[str, Counters] = {}
    for i in range(0, len(flat), 2):
        node = _str(flat[i], "gap node")
        if node in out:
            raise DecodeError("gaps: duplicate node")
        bounds = _list(flat[i + 1], "gap runs", multiple=2)
        runs = [
            range(_int(bounds[j], "run start", 1), _int(bounds[j + 1], "run stop", 1)) for j in range(0, len(bounds), 2)
        ]
        if not runs or any(not run for run in runs):
            raise DecodeError("gaps: empty run")
        out[node] = Counters.from_runs(runs)
    return out


def _dec_push(f: list[Any], size: int) -> Push:
    prefix, key, node, counter, value, ctx = _list(f, "Push", length=6)
    dot = (_str(node, "node"), _int(counter, "counter", 1))
    values = _list(value, "Push value")
    if len(values) > 1 or (values and values[0] is None):
        raise DecodeError("Push: at most one value, never nil")
    return Push(_str(prefix, "prefix"), _key(key), dot, values[0] if values else None, _vv(ctx, "Push context"), size)


def _view(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, bytes) or len(obj) != VIEW_DIGEST_SIZE:
        raise DecodeError(f"view: expected {VIEW_DIGEST_SIZE} bytes, got {obj!r:.40}")
    return obj


def _dec_sync_request(f: list[Any], size: int) -> SyncRequest:
    xid, limit, clock, wm = _list(f, "SyncRequest", length=4)
    return SyncRequest(
        _int(xid, "xid"),
        _int(limit, "limit", 1),
        _dvv(clock, NodeClock),
        None if wm is None else _dvv(wm, Watermark),
        None,
        size,
    )


def _dec_sync_request_2(f: list[Any], size: int) -> SyncRequest:
    *v1, view = _list(f, "SyncRequest", length=5)
    request = _dec_sync_request(v1, size)
    return SyncRequest(request.xid, request.limit, request.clock, request.watermark, _view(view), size)


def _dec_sync_reply_2(f: list[Any], size: int) -> SyncReply:
    *v1, view = _list(f, "SyncReply", length=8)
    r = _dec_sync_reply(v1, size)
    return SyncReply(r.xid, r.done, r.missing, r.base, r.objects, r.gaps, r.watermark, _view(view), size)


def _dec_sync_reply(f: list[Any], size: int) -> SyncReply:
    xid, done, missing, base, objects, gaps, wm = _list(f, "SyncReply", length=7)
    if not isinstance(done, bool):
        raise DecodeError("SyncReply: done must be a bool")
    objs = []
    for o in _list(objects, "objects"):
        prefix, key, container, extra = _list(o, "object", length=4)
        objs.append(SyncObject(_str(prefix, "prefix"), _key(key), _container(container), _dots(extra, "extra dots")))
    return SyncReply(
        _int(xid, "xid"),
        done,
        _int(missing, "missing"),
        _vv(base, "base"),
        tuple(objs),
        _gaps(gaps),
        None if wm is None else _dvv(wm, Watermark),
        None,
        size,
    )


def _dec_sync_reject(f: list[Any], size: int) -> SyncReject:
    xid, reason = _list(f, "SyncReject", length=2)
    return SyncReject(_int(xid, "xid"), _str(reason, "reason"), size)


_READERS: dict[int, dict[int, Callable[[list[Any], int], Message]]] = {
    1: {
        T_PUSH: _dec_push,
        T_SYNC_REQUEST: _dec_sync_request,
        T_SYNC_REPLY: _dec_sync_reply,
        T_SYNC_REJECT: _dec_sync_reject,
    },
    SYNC_VERSION: {
        T_SYNC_REQUEST: _dec_sync_request_2,
        T_SYNC_REPLY: _dec_sync_reply_2,
    },
}


def _unpack(data: Any) -> Any:
    try:
        raw = bytes(data)
    except Exception as exc:
        raise DecodeError(f"expected bytes, got {type(data).__name__}") from exc
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:
        raise DecodeError(f"not msgpack: {type(exc).__name__}: {exc}") from exc


def decode(data: bytes | bytearray | memoryview) -> Message:
    """Decode what :func:`encode` produced; raises :class:`DecodeError` (only) for anything else."""
    try:
        obj = _unpack(data)
        fields = _list(obj, "message")
        if len(fields) < 2:
            raise DecodeError("message: too short")
        version, kind = fields[0], fields[1]
        readers = _READERS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
        if readers is None:
            raise DecodeError(f"unsupported message version {version!r}")
        reader = readers.get(kind) if isinstance(kind, int) and not isinstance(kind, bool) else None
        if reader is None:
            raise DecodeError(f"unknown message type {kind!r}")
        return reader(fields[2:], len(data))
    except DecodeError:
        raise
    except Exception as exc:  # a dvv invariant, a bad range, a recursion limit...: all bad input
        raise DecodeError(f"invalid message: {type(exc).__name__}: {exc}") from exc


# -- storage rows -----------------------------------------------------------------------------------
def _pack_row(payload: Any) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True, default=_default)
    return bytes((ROW_VERSION,)) + packed


def _unpack_row(data: bytes, what: str) -> Any:
    if not data or data[0] != ROW_VERSION:
        raise DecodeError(f"{what}: unknown row version")
    return _unpack(memoryview(data)[1:])


def pack_full_key(prefix: str, key: Key) -> bytes:
    """Storage key of an object (and the value of an index row): ``v1 + msgpack([prefix, [key...]])``."""
    return _pack_row([prefix, list(key)])


def unpack_full_key(data: bytes) -> tuple[str, Key]:
    """Inverse of :func:`pack_full_key`."""
    try:
        prefix, key = _list(_unpack_row(data, "full key"), "full key", length=2)
        return _str(prefix, "prefix"), _key(key)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid full key: {exc}") from exc


def pack_container(container: ContainerLike) -> bytes:
    """Storage value of an object: ``v1 + msgpack([[node, counter, value, ...], [node, counter, ...]])``."""
    return _pack_row(_flat_container(container))


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
    ctx_bytes = _EMPTY_CTX if not ctx else msgpack.packb(_flat_vv(ctx))
    if packed_value is None:
        return b"%c\x92\x90%b" % (ROW_VERSION, ctx_bytes)
    return b"%c\x92\x93%b%b%b%b" % (ROW_VERSION, _packed_node(node), _packed_uint(counter), packed_value, ctx_bytes)


def unpack_container(data: bytes) -> CausalContainer:
    """Inverse of :func:`pack_container`."""
    try:
        return _container(_unpack_row(data, "container"))
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid container: {exc}") from exc


def pack_dot(dot: Dot) -> bytes:
    """Storage key of an index row: ``v1 + msgpack([node, counter])``."""
    return b"%c\x92%b%b" % (ROW_VERSION, _packed_node(dot[0]), _packed_uint(dot[1]))


def unpack_dot(data: bytes) -> Dot:
    """Inverse of :func:`pack_dot`."""
    try:
        node, counter = _list(_unpack_row(data, "dot"), "dot", length=2)
        return _str(node, "node"), _int(counter, "counter", 1)
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"invalid dot: {exc}") from exc
