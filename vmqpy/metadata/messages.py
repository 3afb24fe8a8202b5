"""Wire messages between replicas, their codec, and the storage-row codecs.

Every message is one msgpack array ``[VERSION, TYPE, field, ...]`` (positional fields, no names).
:func:`decode` keeps a reader per (version, type); it raises
:class:`~vmqpy.metadata.errors.MessageDecodeError`, and nothing else, for any input that is not a valid
encoding.  A format change adds a version; it never edits one.

Version 1 messages::

    1 Push         [1, 1, prefix, key, node, counter, [value] | [], context]   a local write/delete
    2 SyncRequest  [1, 2, xid, limit, clock, watermark | nil]           exchange: "here is my node clock"
    3 SyncReply    [1, 3, xid, done, missing, base, objects, gaps, watermark | nil]
    4 SyncReject   [1, 4, xid, reason]
    5 PushAck      [1, 5, [counter, ...]]                           "I applied these writes of yours"

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

A ``PushAck`` answers the pushes of the prefixes a replica is told to acknowledge (``acknowledged``): the
counters are the sender's own dots (the pushes' writer is the ack's receiver), applied and in the receiver's change
callbacks before the ack leaves (docs/cluster.md, "A SUBACK the cluster honours").

A ``Push`` is the container a local write produced: at most one version (the write's dot and value;
none for a delete) and the writer's whole causal context for the key (which covers the dot).  A ``SyncReply``
carries *stripped* containers plus the responder's base, which the requester fills them with, and
per object the requested dots that are not among the object's values (versions that object already
superseded).  ``gaps`` are requested dots the responder holds in its node clock but no longer
indexes (collected, or never written): the requester marks them as seen.

The keys, dots, version vectors and containers inside messages have the shapes of
:mod:`vmqpy.metadata.fields`, which the storage rows share.  The storage-row codecs live in
:mod:`vmqpy.metadata.rows`; :func:`pack_full_key`, :func:`pack_container`, :func:`pack_single`,
:func:`pack_dot` and their inverses are importable from here too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import msgpack

import dvv
from dvv.causal_container import CausalContainer
from dvv.codec import flatten
from dvv.dots import Counters, Dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark
from vmqpy.metadata.errors import MessageDecodeError
from vmqpy.metadata.fields import (
    Key,
    array,
    as_container,
    as_dots,
    as_dvv,
    as_int,
    as_key,
    as_str,
    as_vv,
    check_key,
    encode_extra,
    flat_container,
    unpack,
)
from vmqpy.metadata.rows import (
    pack_container,
    pack_dot,
    pack_full_key,
    pack_single,
    unpack_container,
    unpack_dot,
    unpack_full_key,
)

__all__ = [
    "SYNC_VERSION",
    "VERSION",
    "VIEW_DIGEST_SIZE",
    "Key",
    "Push",
    "PushAck",
    "StoreMessage",
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

T_PUSH = 1
T_SYNC_REQUEST = 2
T_SYNC_REPLY = 3
T_SYNC_REJECT = 4
T_PUSH_ACK = 5


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

    def runs(self) -> Iterator[tuple[str, int, int]]:
        """The counters this reply brings as ``(node, first, last)`` runs, in the order the requester adds
        them: the gaps, then the dots of each object (its versions', then its extra dots)."""
        for node, counters in self.gaps.items():
            for run in counters.runs:
                yield node, run.start, run.stop - 1
        for obj in self.objects:
            for node, counter in (*obj.container.dots(), *obj.extra):
                yield node, counter, counter


@dataclass(frozen=True, slots=True)
class SyncReject:
    """Exchange refused (``reason``: e.g. ``"not_a_member"``, ``"stopped"``)."""

    xid: int
    reason: str
    size: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class PushAck:
    """The receiver applied the pushes of the sender's writes ``counters`` (dots of the ack's receiver)."""

    counters: tuple[int, ...]
    size: int = field(default=0, compare=False, repr=False)


StoreMessage: TypeAlias = Push | SyncRequest | SyncReply | SyncReject | PushAck


# -- encoding -------------------------------------------------------------------------------------
def _payload(message: StoreMessage) -> list[Any]:
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
            flatten(message.context.items()),
        ]
    if isinstance(message, SyncRequest):
        wm = None if message.watermark is None else dvv.to_bytes(message.watermark)
        return [SYNC_VERSION, T_SYNC_REQUEST, message.xid, message.limit, dvv.to_bytes(message.clock), wm,
                message.view]
    if isinstance(message, SyncReply):
        objects = [
            [o.prefix, list(o.key), flat_container(o.container), flatten(o.extra)] for o in message.objects
        ]
        gaps = flatten(
            (node, flatten((run.start, run.stop) for run in counters.runs)) for node, counters in message.gaps.items()
        )
        wm = None if message.watermark is None else dvv.to_bytes(message.watermark)
        return [
            SYNC_VERSION,
            T_SYNC_REPLY,
            message.xid,
            message.done,
            message.missing,
            flatten(message.base.items()),
            objects,
            gaps,
            wm,
            message.view,
        ]
    if isinstance(message, SyncReject):
        return [VERSION, T_SYNC_REJECT, message.xid, message.reason]
    if isinstance(message, PushAck):
        return [VERSION, T_PUSH_ACK, list(message.counters)]
    raise TypeError(f"not a metadata message: {type(message).__name__}")


def encode(message: StoreMessage) -> bytes:
    """The wire bytes of ``message`` (values must be msgpack-serialisable)."""
    packed: bytes = msgpack.packb(_payload(message), use_bin_type=True, default=encode_extra)
    return packed


# -- decoding -------------------------------------------------------------------------------------
def _gaps(obj: Any) -> dict[str, Counters]:
    flat = array(obj, "gaps", multiple=2)
    out: dict[str, Counters] = {}
    for i in range(0, len(flat), 2):
        node = as_str(flat[i], "gap node")
        if node in out:
            raise MessageDecodeError("gaps: duplicate node")
        bounds = array(flat[i + 1], "gap runs", multiple=2)
        runs = [
            range(as_int(bounds[j], "run start", 1), as_int(bounds[j + 1], "run stop", 1))
            for j in range(0, len(bounds), 2)
        ]
        if not runs or any(not run for run in runs):
            raise MessageDecodeError("gaps: empty run")
        out[node] = Counters.from_runs(runs)
    return out


def _dec_push(f: list[Any], size: int) -> Push:
    prefix, key, node, counter, value, ctx = array(f, "Push", length=6)
    dot = (as_str(node, "node"), as_int(counter, "counter", 1))
    values = array(value, "Push value")
    if len(values) > 1 or (values and values[0] is None):
        raise MessageDecodeError("Push: at most one value, never nil")
    value = values[0] if values else None
    return Push(as_str(prefix, "prefix"), as_key(key), dot, value, as_vv(ctx, "Push context"), size)


def _view(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, bytes) or len(obj) != VIEW_DIGEST_SIZE:
        raise MessageDecodeError(f"view: expected {VIEW_DIGEST_SIZE} bytes, got {obj!r:.40}")
    return obj


def _dec_sync_request(f: list[Any], size: int) -> SyncRequest:
    xid, limit, clock, wm = array(f, "SyncRequest", length=4)
    return SyncRequest(
        as_int(xid, "xid"),
        as_int(limit, "limit", 1),
        as_dvv(clock, NodeClock),
        None if wm is None else as_dvv(wm, Watermark),
        None,
        size,
    )


def _dec_sync_request_2(f: list[Any], size: int) -> SyncRequest:
    *v1, view = array(f, "SyncRequest", length=5)
    request = _dec_sync_request(v1, size)
    return SyncRequest(request.xid, request.limit, request.clock, request.watermark, _view(view), size)


def _dec_sync_reply_2(f: list[Any], size: int) -> SyncReply:
    *v1, view = array(f, "SyncReply", length=8)
    r = _dec_sync_reply(v1, size)
    return SyncReply(r.xid, r.done, r.missing, r.base, r.objects, r.gaps, r.watermark, _view(view), size)


def _dec_sync_reply(f: list[Any], size: int) -> SyncReply:
    xid, done, missing, base, objects, gaps, wm = array(f, "SyncReply", length=7)
    if not isinstance(done, bool):
        raise MessageDecodeError("SyncReply: done must be a bool")
    objs = []
    for o in array(objects, "objects"):
        prefix, key, container, extra = array(o, "object", length=4)
        objs.append(
            SyncObject(as_str(prefix, "prefix"), as_key(key), as_container(container), as_dots(extra, "extra dots"))
        )
    return SyncReply(
        as_int(xid, "xid"),
        done,
        as_int(missing, "missing"),
        as_vv(base, "base"),
        tuple(objs),
        _gaps(gaps),
        None if wm is None else as_dvv(wm, Watermark),
        None,
        size,
    )


def _dec_sync_reject(f: list[Any], size: int) -> SyncReject:
    xid, reason = array(f, "SyncReject", length=2)
    return SyncReject(as_int(xid, "xid"), as_str(reason, "reason"), size)


def _dec_push_ack(f: list[Any], size: int) -> PushAck:
    (counters,) = array(f, "PushAck", length=1)
    return PushAck(tuple(as_int(c, "counter", 1) for c in array(counters, "PushAck counters")), size)


_READERS: dict[int, dict[int, Callable[[list[Any], int], StoreMessage]]] = {
    1: {
        T_PUSH: _dec_push,
        T_SYNC_REQUEST: _dec_sync_request,
        T_SYNC_REPLY: _dec_sync_reply,
        T_SYNC_REJECT: _dec_sync_reject,
        T_PUSH_ACK: _dec_push_ack,
    },
    SYNC_VERSION: {
        T_SYNC_REQUEST: _dec_sync_request_2,
        T_SYNC_REPLY: _dec_sync_reply_2,
    },
}


def decode(data: bytes | bytearray | memoryview) -> StoreMessage:
    """Decode what :func:`encode` produced; raises :class:`MessageDecodeError` (only) for anything else."""
    try:
        obj = unpack(data)
        fields = array(obj, "message")
        if len(fields) < 2:
            raise MessageDecodeError("message: too short")
        version, kind = fields[0], fields[1]
        readers = _READERS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
        if readers is None:
            raise MessageDecodeError(f"unsupported message version {version!r}")
        reader = readers.get(kind) if isinstance(kind, int) and not isinstance(kind, bool) else None
        if reader is None:
            raise MessageDecodeError(f"unknown message type {kind!r}")
        return reader(fields[2:], len(data))
    except MessageDecodeError:
        raise
    except Exception as exc:  # a dvv invariant, a bad range, a recursion limit...: all bad input
        raise MessageDecodeError(f"invalid message: {type(exc).__name__}: {exc}") from exc
