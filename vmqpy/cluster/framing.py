"""Sans-I/O framing of the node-to-node links.

A frame on the wire is a 4-byte big-endian unsigned length N followed by N bytes: one msgpack array
``[PROTOCOL_VERSION, type, body]``. ``type`` is a `FrameType`; the shape of ``body`` depends on the type:

=================== ===== =========================================================================
type                value body
=================== ===== =========================================================================
HELLO               1     map: ``name`` (str), ``incarnation`` (int), ``nonce`` (bin), ``listen``
                          ([host, port] or nil); checked by the handshake
CHALLENGE_RESPONSE  2     bin: the HMAC-SHA256 of the handshake (32 bytes)
HEARTBEAT           3     nil
METADATA            4     bin: opaque, one frame of the metadata store
FORWARD             5     bin: opaque, a forwarded publish encoded by the caller
CONTROL             6     map: join/leave/membership requests and answers, defined by the caller
REACHABILITY        7     array of str: the node names this node can reach
BYE                 8     str: why the sender closes the link (a map {reason, mac}: a refusal, handshake.py)
REPLICA             9     bin: opaque, a batch of queue replica operations (vmqpy.replicas), framed as FORWARD
=================== ===== =========================================================================

`FrameDecoder` is incremental: feed it any split of the byte stream with `receive_data` and call
`next_frame` until it returns `NEED_DATA`. Every problem with the input raises a subclass of
`ClusterProtocolError`, and nothing else; after one the decoder is dead and raises it again.

msgpack extension types are refused, except the msgpack timestamp (-1), which decodes to `msgpack.Timestamp`.

After the handshake every frame is followed by a 16-byte tag (frame_auth.py); once the link calls
`FrameDecoder.authenticate(opener)`, each frame's tag is checked before its msgpack is decoded, and a frame whose
tag does not verify raises `FrameAuthenticationFailed` (a `ClusterProtocolError`).

Until then (the handshake: nobody has proved the cookie yet) a frame may announce at most `HANDSHAKE_FRAME_MAX`
bytes, whatever the link's maximum frame size: the handshake frames take a few hundred bytes (a HELLO with the
longest names, nonce and intent is under 700), so a stranger on the cluster port gets a few KiB of this node's
memory per socket, not `incoming_clustering_buffer_size` (64 MiB) each.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn

import msgpack

from vmqpy.cluster.errors import (
    ClusterProtocolError,
    ClusterUsageError,
    FrameTooLarge,
    MalformedFrame,
    UndecodableFrame,
    UnknownFrameType,
    UnsupportedVersion,
)
from vmqpy.cluster.frame_auth import TAG_SIZE, FrameOpener

__all__ = [
    "DATA_TYPES",
    "HANDSHAKE_FRAME_MAX",
    "HEADER_SIZE",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "NeedBytes",
    "encode_frame",
]

PROTOCOL_VERSION: Final = 1
HEADER_SIZE: Final = 4
MAX_LENGTH: Final = 0xFFFFFFFF
_LENGTH = struct.Struct(">I")
#: The largest frame accepted before the link is authenticated (HELLO, CHALLENGE_RESPONSE, a refusing BYE).
HANDSHAKE_FRAME_MAX: Final = 4096
_COMPACT_AT = 1 << 16  # drop the consumed prefix of the buffer once it is this long


class FrameType(enum.IntEnum):
    """The type of a frame (second element of the msgpack array)."""

    HELLO = 1
    CHALLENGE_RESPONSE = 2
    HEARTBEAT = 3
    METADATA = 4
    FORWARD = 5
    CONTROL = 6
    REACHABILITY = 7
    BYE = 8
    REPLICA = 9


#: The types a caller sends and receives on an established link; the others belong to the link itself.
DATA_TYPES: Final = frozenset({FrameType.METADATA, FrameType.FORWARD, FrameType.CONTROL, FrameType.REACHABILITY,
                               FrameType.REPLICA})

_TYPES: Final = {int(t): t for t in FrameType}
_BYTES_BODIES: Final = frozenset({FrameType.METADATA, FrameType.FORWARD, FrameType.CHALLENGE_RESPONSE,
                                  FrameType.REPLICA})
# msgpack of ``[1, type, `` for each type: fixarray of 3, positive fixint version, positive fixint type
_ARRAY_HEAD: Final = {t: bytes((0x93, PROTOCOL_VERSION, int(t))) for t in FrameType}


class NeedBytes(enum.Enum):
    """`FrameDecoder.next_frame` has no complete frame yet."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedBytes.NEED_DATA


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame; `body` has the shape of its type (see the module docstring)."""

    type: FrameType
    body: Any


def _shape_error(frame_type: FrameType, body: Any) -> str | None:
    """Why `body` does not fit `frame_type`, or None when it does."""
    if frame_type in _BYTES_BODIES:
        ok = type(body) is bytes
        expected = "bytes"
    elif frame_type in (FrameType.HELLO, FrameType.CONTROL):
        ok = type(body) is dict
        expected = "a map"
    elif frame_type is FrameType.HEARTBEAT:
        ok = body is None
        expected = "nil"
    elif frame_type is FrameType.BYE:
        ok = type(body) is str or type(body) is dict  # a map: a verifiable refusal (handshake.py)
        expected = "a string or a map"
    else:  # REACHABILITY
        ok = type(body) is list and all(type(name) is str for name in body)
        expected = "a list of strings"
    if ok:
        return None
    return f"{frame_type.name} body must be {expected}, not {type(body).__name__}"


def _encode_bytes_frame(frame_type: FrameType, body: bytes) -> bytes:
    """The fast path for bytes bodies: msgpack written by hand (bin 8/16/32), one copy of the body."""
    n = len(body)
    if n < 0x100:
        head = bytes((0xC4, n))
    elif n < 0x10000:
        head = b"\xc5" + n.to_bytes(2, "big")
    elif n <= MAX_LENGTH - 8:
        head = b"\xc6" + n.to_bytes(4, "big")
    else:
        raise ClusterUsageError(f"frame of {n} bytes cannot be framed")
    return b"".join((_LENGTH.pack(3 + len(head) + n), _ARRAY_HEAD[frame_type], head, body))


def encode_frame(frame_type: FrameType, body: Any) -> bytes:
    """The wire bytes of one frame. Raises `ClusterUsageError` if `body` does not fit `frame_type`."""
    if type(frame_type) is not FrameType:
        checked = _TYPES.get(frame_type) if type(frame_type) is int else None
        if checked is None:
            raise ClusterUsageError(f"unknown frame type {frame_type!r}")
        frame_type = checked
    if frame_type in _BYTES_BODIES and type(body) is bytes:
        return _encode_bytes_frame(frame_type, body)
    problem = _shape_error(frame_type, body)
    if problem is not None:
        raise ClusterUsageError(problem)
    try:
        payload: bytes = msgpack.packb([PROTOCOL_VERSION, int(frame_type), body], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ClusterUsageError(f"{frame_type.name} body cannot be encoded: {exc}") from exc
    if len(payload) > MAX_LENGTH:
        raise ClusterUsageError(f"frame of {len(payload)} bytes cannot be framed")
    return _LENGTH.pack(len(payload)) + payload


def _reject_ext(code: int, data: bytes) -> NoReturn:
    raise UndecodableFrame(f"invalid msgpack: extension type {code} is not allowed")


def decode_payload(payload: bytes | bytearray | memoryview) -> Frame:
    """Decode the payload of one frame (the bytes after the length prefix)."""
    try:
        obj = msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=False, ext_hook=_reject_ext)
    except ClusterProtocolError:
        raise
    except Exception as exc:  # msgpack raises ValueError, TypeError, StackError, ... for bad input
        raise UndecodableFrame(f"invalid msgpack: {type(exc).__name__}: {exc}"[:200]) from None
    if type(obj) is list and len(obj) == 3:  # the fast path; anything odd takes the checks below
        version, raw_type, body = obj
        if type(version) is int and version == PROTOCOL_VERSION and type(raw_type) is int:
            frame_type = _TYPES.get(raw_type)
            if frame_type is not None and frame_type in _BYTES_BODIES and type(body) is bytes:
                return Frame(frame_type, body)
    if type(obj) is not list or not obj:
        raise MalformedFrame(f"frame is not [version, type, body] but {type(obj).__name__}")
    version = obj[0]
    if type(version) is not int:
        raise MalformedFrame(f"frame version is {type(version).__name__}, not an integer")
    if version != PROTOCOL_VERSION:
        raise UnsupportedVersion(version, PROTOCOL_VERSION)
    if len(obj) != 3:
        raise MalformedFrame(f"frame has {len(obj)} elements instead of [version, type, body]")
    raw_type, body = obj[1], obj[2]
    if type(raw_type) is not int:
        raise MalformedFrame(f"frame type is {type(raw_type).__name__}, not an integer")
    frame_type = _TYPES.get(raw_type)
    if frame_type is None:
        raise UnknownFrameType(raw_type)
    problem = _shape_error(frame_type, body)
    if problem is not None:
        raise MalformedFrame(problem)
    return Frame(frame_type, body)


class FrameDecoder:
    """Incremental decoder of the frame stream of one connection.

    Frames whose length prefix exceeds `max_frame_size` (before `authenticate`: `handshake_frame_size`, at most)
    are refused as soon as the prefix is read; the decoder then holds at most one partial frame plus the last
    chunk it was given.
    """

    def __init__(self, max_frame_size: int, handshake_frame_size: int = HANDSHAKE_FRAME_MAX) -> None:
        if max_frame_size < 1 or handshake_frame_size < 1:
            raise ClusterUsageError("max_frame_size must be positive")
        self.max_frame_size = max_frame_size
        self._limit = min(max_frame_size, handshake_frame_size)  # the full max_frame_size once authenticated
        self._buffer = bytearray()
        self._pos = 0
        self._error: ClusterProtocolError | None = None
        self._opener: FrameOpener | None = None
        self._trailer = 0  # bytes after each frame: its tag once authenticated

    def authenticate(self, opener: FrameOpener) -> None:
        """Every frame from now on is followed by its tag, which `opener` must accept (frame_auth.py)."""
        self._opener = opener
        self._trailer = TAG_SIZE
        self._limit = self.max_frame_size

    def receive_data(self, data: bytes) -> None:
        """Append bytes from the stream (ignored once the decoder has failed)."""
        if self._error is None and data:
            self._buffer += data

    def buffered(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame when `next_frame` said NEED_DATA)."""
        return len(self._buffer) - self._pos

    def next_frame(self) -> Frame | Literal[NeedBytes.NEED_DATA]:
        """The next complete frame, or `NEED_DATA`. Raises `ClusterProtocolError` for bad input."""
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        pos = self._pos
        available = len(buffer) - pos
        if available < HEADER_SIZE:
            self._compact()
            return NEED_DATA
        (length,) = _LENGTH.unpack_from(buffer, pos)
        if length > self._limit:
            self._fail(FrameTooLarge(length, self._limit, authenticated=self._opener is not None))
        if length == 0:
            self._fail(UndecodableFrame("invalid msgpack: empty frame"))
        end = pos + HEADER_SIZE + length
        if len(buffer) < end + self._trailer:
            self._compact()
            return NEED_DATA
        payload: bytearray | memoryview
        if self._opener is not None:
            frame = buffer[pos:end]  # a copy: the buffer is compacted later
            self._pos = end + TAG_SIZE
            try:
                self._opener.open(frame, buffer[end : end + TAG_SIZE])
            except ClusterProtocolError as exc:
                self._fail(exc)
            payload = memoryview(frame)[HEADER_SIZE:]  # no copy: `frame` is ours
        else:
            payload = buffer[pos + HEADER_SIZE : end]  # a copy: the buffer is compacted later
            self._pos = end
        try:
            return decode_payload(payload)
        except ClusterProtocolError as exc:
            self._fail(exc)

    def _fail(self, error: ClusterProtocolError) -> NoReturn:
        self._error = error
        self._buffer = bytearray()
        self._pos = 0
        raise error

    def _compact(self) -> None:
        pos = self._pos
        if pos == 0:
            return
        if pos >= len(self._buffer):
            self._buffer.clear()
            self._pos = 0
        elif pos >= _COMPACT_AT:
            del self._buffer[:pos]
            self._pos = 0
