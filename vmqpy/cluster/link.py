"""Sans-I/O state machine of one node link (one TCP connection), with heartbeats and silence detection.

The driver feeds it bytes and time and writes out what it returns; the link never reads a clock::

    link = Link(own_name, own_incarnation, cookie, expected_peer, nonce, detect_timeout, max_frame_size,
                now=loop.time())
    write(link.data_to_send())                      # our HELLO
    for event in link.receive_data(data, now): ...  # Established, DataFrame, Closed, PeerSilent
    write(link.data_to_send())                      # handshake answers, BYE
    write(link.send(FrameType.METADATA, body))      # only once established
    write(link.seal(encode_frame(...)))             # a frame the driver encoded itself (its outgoing buffer)
    at link.get_timer(): events = link.handle_timer(now); write(link.data_to_send())

Rules:

* `data_to_send()` must be written before any later `send()` result (`send()` itself prepends whatever
  is pending, so writing each returned byte string in order is always right).
* A heartbeat goes out every ``detect_timeout / 4`` seconds unless something else was sent since the
  previous heartbeat tick (the driver reports frames it wrote itself with `mark_sent`), so the gap between two
  frames we send is at most ``detect_timeout / 2``.
* The peer is silent once ``detect_timeout`` passed without any frame from it: `handle_timer` returns
  `PeerSilent` then `Closed(SILENT)` and queues a BYE. If our own timer ran more than two heartbeat intervals
  late (our event loop stalled), the verdict waits one more interval, so frames that arrived during the stall
  are read first. While the driver still holds frames it read and has not handled yet (it spreads a large read
  over several turns of its loop and reads nothing meanwhile), it says so with `hold_silence`: the peer is not
  silent before `detect_timeout` after the driver last held such frames.
* The handshake must finish within `handshake_timeout` (default ``2 * detect_timeout``).
* Malformed input closes the link with `Closed(PROTOCOL_ERROR, reason)` where reason is the decoder's; a
  BYE carrying the reason is queued for the peer. After `Closed`, the link ignores all input.
* Every frame after the handshake is sealed and checked (frame_auth.py, with the handshake's session keys):
  `send`, `seal`, `seal_all`, heartbeats and BYE seal what they return, in the order it must be written. A frame
  whose tag fails (altered, injected, replayed, reordered) closes the link with `Closed(UNAUTHENTICATED)`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Final

from vmqpy.cluster.errors import ClusterProtocolError, ClusterUsageError
from vmqpy.cluster.frame_auth import FrameAuthenticationFailed, FrameOpener, FrameSealer
from vmqpy.cluster.framing import (
    DATA_TYPES,
    HEADER_SIZE,
    NEED_DATA,
    FrameDecoder,
    FrameType,
    encode_frame,
)
from vmqpy.cluster.handshake import BYE_REASON_MAX, Admit, Established, Handshake, LinkRefused

__all__ = ["CloseCause", "Closed", "DataFrame", "Established", "Event", "Link", "LinkState", "PeerSilent"]

_HEARTBEAT: Final = encode_frame(FrameType.HEARTBEAT, None)


class LinkState(enum.Enum):
    HANDSHAKE = "handshake"
    ESTABLISHED = "established"
    CLOSED = "closed"


class CloseCause(enum.StrEnum):
    """Why a link closed (the `reason` of `Closed` gives the detail)."""

    REFUSED = "refused"  # the handshake refused the peer, or the peer refused us (wrong cookie, ...)
    PROTOCOL_ERROR = "protocol error"  # malformed input: bad length, bad msgpack, unknown type, truncated frame
    UNAUTHENTICATED = "frame authentication failed"  # a frame after the handshake with a wrong tag (frame_auth.py)
    PEER_BYE = "peer closed"  # the peer sent BYE on an established link
    SILENT = "peer silent"  # no frame for detect_timeout
    HANDSHAKE_TIMEOUT = "handshake timeout"
    CONNECTION_LOST = "connection lost"  # EOF or socket error without a BYE
    LOCAL = "closed locally"  # Link.close()


@dataclass(frozen=True, slots=True)
class DataFrame:
    """A data frame (METADATA, FORWARD, CONTROL or REACHABILITY) from the peer."""

    type: FrameType
    body: Any


@dataclass(frozen=True, slots=True)
class Closed:
    """The link is closed; nothing more will come from it."""

    cause: CloseCause
    reason: str
    detail: str = ""
    verified: bool = False  # REFUSED by the peer with a refusal that proves it knows the cookie (handshake.py)


@dataclass(frozen=True, slots=True)
class PeerSilent:
    """No frame from the peer for `silent_for` seconds (>= detect_timeout). Always followed by Closed(SILENT)."""

    silent_for: float


Event = Established | DataFrame | Closed | PeerSilent


class Link:
    """One node link. `expected_peer` is the node the dialer wants to reach; None on the accepting side.

    `nonce`: fresh random bytes (16..64) from the caller. `now`: the current time on the driver's clock.
    `listen`: the cluster listener address advertised in our HELLO. `admit`: asked on the acceptor once the
    dialer proved the cookie (see `vmqpy.cluster.handshake.Admit`). `intent`: the dialer's (handshake.JOIN
    when it comes to join the acceptor's cluster).
    """

    def __init__(
        self,
        own_name: str,
        own_incarnation: int,
        cookie: str,
        expected_peer: str | None,
        nonce: bytes,
        detect_timeout: float,
        max_frame_size: int,
        *,
        now: float,
        listen: tuple[str, int] | None = None,
        handshake_timeout: float | None = None,
        admit: Admit | None = None,
        intent: str | None = None,
    ) -> None:
        if not detect_timeout > 0 or math.isinf(detect_timeout):
            raise ClusterUsageError("detect_timeout must be a positive number of seconds")
        if handshake_timeout is None:
            handshake_timeout = 2 * detect_timeout
        if not handshake_timeout > 0:
            raise ClusterUsageError("handshake_timeout must be positive")
        self._handshake = Handshake(
            own_name, own_incarnation, cookie, nonce, expected_peer, listen=listen, admit=admit, intent=intent
        )
        self._decoder = FrameDecoder(max_frame_size)
        self._sealer: FrameSealer | None = None  # once established
        self.max_frame_size = max_frame_size
        self.detect_timeout = detect_timeout
        self.heartbeat_interval = detect_timeout / 4
        self.state = LinkState.HANDSHAKE
        self.established: Established | None = None
        self.closed: Closed | None = None
        self._out = bytearray(self._handshake.start())
        self._handshake_deadline = now + handshake_timeout
        self._last_rx = now
        self._last_tick = now
        self._next_heartbeat = math.inf
        self._grace_until = -math.inf
        self._sent_since_tick = False
        self.frames_received = 0
        self.frames_sent = 0  # data frames (send() and mark_sent())
        self.heartbeats_sent = 0

    # ---------------------------------------------------------------------------------------------- properties

    @property
    def is_dialer(self) -> bool:
        return self._handshake.is_dialer

    @property
    def expected_peer(self) -> str | None:
        return self._handshake.expected_peer

    @property
    def peer_name(self) -> str | None:
        """The authenticated peer's name (None until established)."""
        return self.established.peer_name if self.established is not None else None

    @property
    def peer_incarnation(self) -> int | None:
        return self.established.peer_incarnation if self.established is not None else None

    @property
    def claimed_peer_name(self) -> str | None:
        """The name in the peer's HELLO, before it is authenticated (for log lines about refusals)."""
        return self._handshake.peer_name

    # ---------------------------------------------------------------------------------------------- input

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Bytes from the socket; ``b""`` means the peer closed its side (EOF)."""
        if self.state is LinkState.CLOSED:
            return []
        self._last_tick = now
        if not data:
            return self.connection_lost("connection closed by peer")
        self._decoder.receive_data(data)
        events: list[Event] = []
        decoder = self._decoder
        while self.state is not LinkState.CLOSED:  # every turn consumes a frame or leaves the loop
            try:
                frame = decoder.next_frame()
            except FrameAuthenticationFailed as exc:
                events.append(self._close(CloseCause.UNAUTHENTICATED, exc.reason, "", bye=True))
                break
            except ClusterProtocolError as exc:
                events.append(self._close(CloseCause.PROTOCOL_ERROR, exc.reason, type(exc).__name__, bye=True))
                break
            if frame is NEED_DATA:
                break
            self._last_rx = now
            self.frames_received += 1
            frame_type = frame.type
            if self.state is LinkState.ESTABLISHED:
                if frame_type in DATA_TYPES:
                    events.append(DataFrame(frame_type, frame.body))
                elif frame_type is FrameType.HEARTBEAT:
                    pass
                elif frame_type is FrameType.BYE:
                    body = frame.body if type(frame.body) is str else str(frame.body.get("reason", ""))
                    reason = body[:BYE_REASON_MAX] or "bye"
                    events.append(self._close(CloseCause.PEER_BYE, reason, "", bye=False))
                else:
                    reason = f"{frame_type.name} frame on an established link"
                    events.append(self._close(CloseCause.PROTOCOL_ERROR, reason, "", bye=True))
                continue
            out, result = self._handshake.receive(frame)
            self._out += out
            if isinstance(result, Established):
                keys = self._handshake.session_keys()
                self._sealer = FrameSealer(keys.send)  # after our last handshake frame, already in _out
                decoder.authenticate(FrameOpener(keys.receive))  # the frames after the peer's last one
                self.state = LinkState.ESTABLISHED
                self.established = result
                self._next_heartbeat = now + self.heartbeat_interval
                events.append(result)
            elif isinstance(result, LinkRefused):
                events.append(self._close(CloseCause.REFUSED, result.reason, result.detail, bye=False,
                                          verified=result.verified))
        return events

    def connection_lost(self, reason: str = "connection lost") -> list[Event]:
        """The socket closed or failed. A partial frame in the buffer makes it a truncated frame."""
        if self.state is LinkState.CLOSED:
            return []
        partial = self._decoder.buffered()
        if partial:
            detail = f"connection closed with {partial} bytes of an incomplete frame"
            return [self._close(CloseCause.PROTOCOL_ERROR, "truncated frame", detail, bye=False)]
        return [self._close(CloseCause.CONNECTION_LOST, reason, "", bye=False)]

    # ---------------------------------------------------------------------------------------------- output

    def send(self, frame_type: FrameType, body: Any) -> bytes:
        """The bytes of one data frame (plus anything pending before it). Only once established."""
        if self.state is not LinkState.ESTABLISHED:
            raise ClusterUsageError(f"cannot send on a link in state {self.state.value!r}")
        if frame_type not in DATA_TYPES:
            raise ClusterUsageError(f"{FrameType(frame_type).name} frames are sent by the link itself")
        frame = encode_frame(frame_type, body)
        if len(frame) - HEADER_SIZE > self.max_frame_size:
            raise ClusterUsageError(f"frame of {len(frame) - HEADER_SIZE} bytes exceeds the maximum frame size")
        return self.seal(frame)

    def seal(self, frame: bytes) -> bytes:
        """The bytes to write for one data frame the driver encoded itself (`encode_frame`), sealed, plus
        anything pending before it. Only once established."""
        sealer = self._sealer
        if sealer is None or self.state is not LinkState.ESTABLISHED:
            raise ClusterUsageError(f"cannot send on a link in state {self.state.value!r}")
        self._sent_since_tick = True
        self.frames_sent += 1
        sealed = sealer.seal(frame)
        if self._out:
            pending = bytes(self._out) + sealed
            self._out.clear()
            return pending
        return sealed

    def seal_all(self, frames: list[bytes]) -> bytes:
        """`seal` for several frames, in order, as one byte string."""
        sealer = self._sealer
        if sealer is None or self.state is not LinkState.ESTABLISHED:
            raise ClusterUsageError(f"cannot send on a link in state {self.state.value!r}")
        self._sent_since_tick = True
        self.frames_sent += len(frames)
        sealed = sealer.seal_all(frames)
        if self._out:
            pending = bytes(self._out) + sealed
            self._out.clear()
            return pending
        return sealed

    def data_to_send(self) -> bytes:
        """Handshake, heartbeat and BYE bytes produced since the last call (write them before anything else)."""
        if not self._out:
            return b""
        data = bytes(self._out)
        self._out.clear()
        return data

    def hold_silence(self, now: float) -> None:
        """The driver holds frames from the peer it has not handled yet and reads nothing until it has: the
        peer's later frames wait in the socket, unseen, so no silence verdict before `detect_timeout` from now."""
        self._grace_until = max(self._grace_until, now + self.detect_timeout)

    def close(self, reason: str) -> list[Event]:
        """Close from our side: queues BYE(reason) and returns [Closed(LOCAL)] (or [] if already closed)."""
        if self.state is LinkState.CLOSED:
            return []
        return [self._close(CloseCause.LOCAL, reason, "", bye=True)]

    # ---------------------------------------------------------------------------------------------- time

    def get_timer(self) -> float | None:
        """When `handle_timer` must be called next (None once closed)."""
        if self.state is LinkState.HANDSHAKE:
            return self._handshake_deadline
        if self.state is LinkState.ESTABLISHED:
            return min(self._next_heartbeat, max(self._last_rx + self.detect_timeout, self._grace_until))
        return None

    def handle_timer(self, now: float) -> list[Event]:
        """Handshake deadline, heartbeats and silence detection. Safe to call early or repeatedly."""
        if self.state is LinkState.CLOSED:
            return []
        stalled = now - self._last_tick > 2 * self.heartbeat_interval
        self._last_tick = now
        if self.state is LinkState.HANDSHAKE:
            if now < self._handshake_deadline:
                return []
            out, refused = self._handshake.timeout()
            self._out += out
            return [self._close(CloseCause.HANDSHAKE_TIMEOUT, refused.reason, "", bye=False)]
        if now >= max(self._last_rx + self.detect_timeout, self._grace_until):
            if stalled:
                self._grace_until = now + self.heartbeat_interval
            else:
                silent_for = now - self._last_rx
                detail = f"no frame for {silent_for:.3f} s (detect_timeout {self.detect_timeout} s)"
                return [PeerSilent(silent_for), self._close(CloseCause.SILENT, "peer silent", detail, bye=True)]
        if now >= self._next_heartbeat:
            if not self._sent_since_tick:
                assert self._sealer is not None
                self._out += self._sealer.seal(_HEARTBEAT)
                self.heartbeats_sent += 1
            self._sent_since_tick = False
            self._next_heartbeat = now + self.heartbeat_interval
        return []

    # ---------------------------------------------------------------------------------------------- inside

    def _close(self, cause: CloseCause, reason: str, detail: str, *, bye: bool, verified: bool = False) -> Closed:
        self.state = LinkState.CLOSED
        if bye:
            frame = encode_frame(FrameType.BYE, reason[:BYE_REASON_MAX])
            self._out += frame if self._sealer is None else self._sealer.seal(frame)
        closed = Closed(cause, reason, detail, verified)
        self.closed = closed
        return closed
