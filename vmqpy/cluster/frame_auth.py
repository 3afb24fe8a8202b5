"""Sans-I/O authentication of every frame a node link carries after its handshake.

The handshake (handshake.py) proves that both ends know the cookie; it does not protect what follows. From the
moment a side is established, every frame it sends carries a tag, and every frame it receives must carry the
right one, so a man in the middle can neither inject, alter, replay, reorder nor drop a frame without the link
closing.

The cookie key. Neither the handshake's MACs nor the session keys use the cookie itself as their HMAC key but
`cookie_key(cookie)`::

    cookie key = scrypt(cookie as UTF-8, salt = b"vmqpy-cluster-v1 cookie", n = 2**14, r = 8, p = 1, 32 bytes)

computed once per process and cookie (about 16 MiB and some tens of milliseconds; cached). One recorded
plain handshake lets an observer test guesses of the cookie offline; with the plain HMAC a guess cost a
microsecond, with scrypt each guess costs what it costs the node once, and memory, so a cookie of a few words is
no longer found in minutes (docs/security.md). A long random cookie stays the real defence.

Keys. Each connection gets two fresh keys, one per direction, derived from the cookie key and the handshake::

    session = HMAC-SHA256(key = cookie key,
                          msg = b"vmqpy-cluster-v1 session" || lp(dialer nonce) || lp(acceptor nonce)
                                || lp(dialer name) || lp(acceptor name)
                                || u64(dialer incarnation) || u64(acceptor incarnation))
    key(D->A) = HMAC-SHA256(session, b"D"),   key(A->D) = HMAC-SHA256(session, b"A")

Both nonces are fresh random bytes of each connection, so keys never repeat across connections, and a frame
recorded on one link (or in one direction) does not verify on another.

Tags. A sealed frame is the frame's wire bytes (length prefix included, framing.py) followed by a 16-byte tag::

    tag = HMAC-SHA256(key of the direction, u64(sequence) || frame wire bytes)[:16]

The HMAC's inner and outer SHA-256 states are computed once per key and copied per frame (RFC 2104 written out:
the same tags as `hmac`, without hashing the key again for every frame). Keyed BLAKE2b was measured as the
alternative: cheaper for frames under about 1 KiB, dearer above (docs/performance.md, "Cluster links: frame
authentication and TLS"), and forwarded publishes travel in batches.

`sequence` counts the sealed frames of that direction from 0; it is not sent: each side keeps its own count, so
a replayed, reordered or dropped frame is checked against the wrong number and fails like an altered one. The
receiver checks the tag before it decodes a byte of the frame's msgpack.

`SessionKeys`, `FrameSealer` and `FrameOpener` are pure: no clock, no sockets.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from vmqpy.cluster.errors import ClusterProtocolError, ClusterUsageError

__all__ = [
    "COOKIE_SALT",
    "KEY_SIZE",
    "SESSION_CONTEXT",
    "TAG_SIZE",
    "FrameAuthenticationFailed",
    "FrameOpener",
    "FrameSealer",
    "SessionKeys",
    "cookie_key",
    "derive_keys",
    "frame_tag",
]

TAG_SIZE: Final = 16
KEY_SIZE: Final = 32
SESSION_CONTEXT: Final = b"vmqpy-cluster-v1 session"
SEQUENCE_LIMIT: Final = 1 << 64
COOKIE_SALT: Final = b"vmqpy-cluster-v1 cookie"
_SCRYPT_N: Final = 1 << 14  # scrypt's cost: 128 * r * n = 16 MiB of memory per derivation
_SCRYPT_R: Final = 8
_BLOCK: Final = 64  # SHA-256's block size
_INNER: Final = bytes(b ^ 0x36 for b in range(256))  # translation tables of the HMAC pads
_OUTER: Final = bytes(b ^ 0x5C for b in range(256))

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class FrameAuthenticationFailed(ClusterProtocolError):
    """A frame after the handshake whose tag does not verify: altered, injected, replayed, reordered or cut."""

    def __init__(self, sequence: int) -> None:
        super().__init__(f"frame authentication failed (frame {sequence} after the handshake): altered, injected, "
                         "replayed or out of order")
        self.sequence = sequence


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The two keys of one connection, as one side sees them."""

    send: bytes
    receive: bytes


def _lp(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


@functools.lru_cache(maxsize=8)
def cookie_key(cookie: str) -> bytes:
    """The HMAC key of the handshake and of the session keys: the cookie stretched with scrypt (see the module
    docstring); computed once per process and cookie."""
    if not cookie:
        raise ClusterUsageError("cookie must not be empty")
    return hashlib.scrypt(cookie.encode(), salt=COOKIE_SALT, n=_SCRYPT_N, r=_SCRYPT_R, p=1,
                          maxmem=4 * 128 * _SCRYPT_R * _SCRYPT_N, dklen=KEY_SIZE)


def derive_keys(
    cookie: str,
    *,
    dialer: bool,
    dialer_name: str,
    dialer_incarnation: int,
    dialer_nonce: bytes,
    acceptor_name: str,
    acceptor_incarnation: int,
    acceptor_nonce: bytes,
) -> SessionKeys:
    """The keys of one connection for the dialer (`dialer` True) or the acceptor (see the module docstring)."""
    if not cookie:
        raise ClusterUsageError("cookie must not be empty")
    message = b"".join(
        (
            SESSION_CONTEXT,
            _lp(dialer_nonce),
            _lp(acceptor_nonce),
            _lp(dialer_name.encode()),
            _lp(acceptor_name.encode()),
            _U64.pack(dialer_incarnation),
            _U64.pack(acceptor_incarnation),
        )
    )
    session = hmac.digest(cookie_key(cookie), message, hashlib.sha256)
    to_acceptor = hmac.digest(session, b"D", hashlib.sha256)
    to_dialer = hmac.digest(session, b"A", hashlib.sha256)
    if dialer:
        return SessionKeys(send=to_acceptor, receive=to_dialer)
    return SessionKeys(send=to_dialer, receive=to_acceptor)


class _Keyed:
    """HMAC-SHA256 under one key, its inner and outer states computed once (RFC 2104)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if type(key) is not bytes or len(key) != KEY_SIZE:
            raise ClusterUsageError(f"a frame key is {KEY_SIZE} bytes")
        block = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(block.translate(_INNER))
        self._outer = hashlib.sha256(block.translate(_OUTER))

    def tag(self, sequence: int, frame: bytes | bytearray) -> bytes:
        inner = self._inner.copy()
        inner.update(_U64.pack(sequence))
        inner.update(frame)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:TAG_SIZE]


def frame_tag(key: bytes, sequence: int, frame: bytes) -> bytes:
    """The tag of `frame` (its wire bytes) as frame number `sequence` of the direction keyed by `key`."""
    return _Keyed(key).tag(sequence, frame)


class FrameSealer:
    """The sending half: appends the tag of the next sequence number to each frame, in the order written."""

    __slots__ = ("_keyed", "sequence")

    def __init__(self, key: bytes) -> None:
        self._keyed = _Keyed(key)
        self.sequence = 0  # the sequence number of the next frame sealed

    def seal(self, frame: bytes) -> bytes:
        """`frame` (its wire bytes) followed by its tag. Frames must be written in the order they are sealed."""
        sequence = self.sequence
        if sequence >= SEQUENCE_LIMIT:
            raise ClusterUsageError("sequence numbers of this link are exhausted")
        self.sequence = sequence + 1
        return frame + self._keyed.tag(sequence, frame)

    def seal_all(self, frames: Iterable[bytes]) -> bytes:
        """The sealed frames, in order, as one byte string."""
        return b"".join([self.seal(frame) for frame in frames])


class FrameOpener:
    """The receiving half: checks each frame's tag against the next sequence number."""

    __slots__ = ("_keyed", "sequence")

    def __init__(self, key: bytes) -> None:
        self._keyed = _Keyed(key)
        self.sequence = 0  # the sequence number the next frame must carry

    def open(self, frame: bytes | bytearray, tag: bytes | bytearray) -> None:
        """Accept `frame` (its wire bytes) with `tag`, or raise `FrameAuthenticationFailed` (the link must then
        close: the count of a failed frame is not advanced, so nothing after it verifies either)."""
        sequence = self.sequence
        if not hmac.compare_digest(self._keyed.tag(sequence, frame), bytes(tag)):
            raise FrameAuthenticationFailed(sequence)
        self.sequence = sequence + 1
