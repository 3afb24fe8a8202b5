"""The asyncio TCP driver of the node links: one listener, one dialer per known peer, one `Link` per socket.

`ClusterNetwork` only moves bytes and time into the sans-I/O `Link` and its events out to callbacks. It
keeps at most one authenticated link per peer, dials every peer added with `add_peer` (reconnecting with
exponential backoff while the peer stays added) and accepts connections from any node that proves the
cookie. It implements the metadata store's `Transport` (METADATA frames).

Delivery (see docs/cluster-links.md):

* `send_frame` writes at once when the peer's link is up and its socket is not paused; otherwise the frame
  goes into the peer's outgoing buffer (at most `outgoing_buffer` bytes), which is written in order, before
  any newer frame, on the next established link to that peer. When the frame does not fit, `send_frame`
  returns False (counted as an overflow; logged at most every 10 s per peer) and the frame is dropped.
* A frame written to a socket is delivered only if that link stays up until the peer has read it. If the
  link breaks, frames already written to it may be lost and are not sent again (at-most-once).
* The outgoing buffer of a peer is dropped by `remove_peer` and by `stop`.

All callbacks run on the event loop, synchronously, and must not block. Exceptions they raise are logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import secrets
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, cast

import structlog

from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import DATA_TYPES, HEADER_SIZE, FrameType, encode_frame
from vmqpy.cluster.handshake import NONCE_MIN
from vmqpy.cluster.link import CloseCause, Closed, Established, Event, Link, Message, PeerSilent

__all__ = [
    "ClusterNetwork",
    "ConnectCallback",
    "MessageCallback",
    "ReachabilityCallback",
    "Receiver",
]

log = structlog.get_logger("vmqpy.cluster")

#: ``callback(peer, frame_type, body)`` for every FORWARD, CONTROL and REACHABILITY frame.
MessageCallback = Callable[[str, FrameType, Any], None]
#: ``callback(peer, reachable)``: True when a link to the peer is established, False when it is lost.
ReachabilityCallback = Callable[[str, bool], None]
#: ``callback(peer, host, port)`` on every established link: the cluster listener address the peer advertised.
ConnectCallback = Callable[[str, str, int], None]
#: ``receiver(peer, data)`` for every METADATA frame (the metadata `Transport` protocol).
Receiver = Callable[[str, bytes], None]
#: ``admission(peer, incarnation, intent)`` on every incoming link whose dialer proved the cookie: None to
#: accept it, or the reason to refuse it (sent to the dialer with a MAC: see handshake.py).
Admission = Callable[[str, int, str | None], str | None]
#: ``callback(peer, reason)`` when a peer we dialed refused us with a verified refusal (it knows the cookie).
RefusedCallback = Callable[[str, str], None]

DUPLICATE_LINK: Final = "duplicate link"
SHUTTING_DOWN: Final = "node shutting down"
PEER_REMOVED: Final = "peer removed"
REPLACED: Final = "replaced by a newer link"

_CORK_LIMIT: Final = 1 << 16  # write what was collected once it reaches this size (else at the end of the turn)
_DRAIN_CHUNK: Final = 1 << 18  # bytes of buffered frames handed to the socket per write
_WRITE_HIGH_WATER: Final = 1 << 18
_STOP_GRACE: Final = 1.0  # stop() waits at most this long for sockets to finish closing
_OVERFLOW_LOG_INTERVAL: Final = 10.0  # at most one "buffer full" line per peer per this many seconds

_now = time.monotonic  # the links' clock (uvloop's loop.time() only advances once per loop iteration)


def _source_address(host: str) -> tuple[str, int] | None:
    """Dial from the listener's IP when it is a concrete address (so peers see connections come from it)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if ip.is_unspecified else (host, 0)


class _Peer:
    """What the network keeps per peer name: dial address, outgoing buffer, the active link."""

    __slots__ = (
        "active",
        "address",
        "attempts",
        "dial_task",
        "dialing",
        "incarnation",
        "intent",
        "name",
        "overflow_logged_at",
        "queue",
        "queued_bytes",
        "reconnect",
        "refused_since_log",
        "removed",
        "was_up",
    )

    def __init__(self, name: str, address: tuple[str, int] | None) -> None:
        self.name = name
        self.address = address  # set by add_peer: we dial it
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.active: _Connection | None = None  # the established link in use
        self.dialing: _Connection | None = None  # our outgoing connection while it shakes hands
        self.dial_task: asyncio.Task[None] | None = None  # our TCP connect in progress
        self.reconnect: asyncio.TimerHandle | None = None
        self.attempts = 0  # dial attempts since the last established link
        self.incarnation: int | None = None
        self.intent: str | None = None  # stated in the HELLO of our dials (handshake.JOIN while joining)
        self.overflow_logged_at = -_OVERFLOW_LOG_INTERVAL
        self.refused_since_log = 0  # frames refused since the last "buffer full" log line
        self.removed = False
        self.was_up = False


class _Connection(asyncio.Protocol):
    """One TCP connection and its Link."""

    def __init__(self, net: ClusterNetwork, peer: _Peer | None) -> None:
        self.net = net
        self.peer = peer  # known from the start when we dial, after the handshake when we accept
        self.outgoing = peer is not None
        self.link: Link | None = None
        self.transport: asyncio.Transport | None = None
        self.remote: str = "?"
        self.paused = False
        self.dead = False  # the link is closed; the socket is closing
        self.replaces: list[_Connection] = []  # to close once this link is established (admit decision)
        self._cork: list[bytes] = []
        self._cork_bytes = 0
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._linger: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------------------------------------- protocol

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        # a stream transport, but uvloop's are not subclasses of asyncio.Transport: no isinstance check
        transport = cast(asyncio.Transport, base_transport)
        net = self.net
        self.transport = transport
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and len(peername) >= 2:
            self.remote = f"{peername[0]}:{peername[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(Exception):
            transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        net._conns.add(self)
        if not net._running:
            transport.abort()
            return
        if self.peer is not None:
            if self.peer.removed or self.peer.active is not None:
                transport.abort()  # the peer was removed, or a link came up, while we were connecting
                return
            self.peer.dialing = self
        self.link = Link(
            net.own_name,
            net.incarnation,
            net._cookie,
            self.peer.name if self.peer is not None else None,
            secrets.token_bytes(NONCE_MIN),
            net.detect_timeout,
            net.incoming_buffer,
            now=_now(),
            listen=net._advertised(),
            handshake_timeout=net.handshake_timeout,
            admit=None if self.outgoing else self._admit,
            intent=self.peer.intent if self.peer is not None else None,
        )
        self.write(self.link.data_to_send())
        self._arm()

    def data_received(self, data: bytes) -> None:
        link = self.link
        if link is None or self.dead:
            return
        net = self.net
        net._bytes_in += len(data)
        try:
            events = link.receive_data(data, _now())
            pending = link.data_to_send()
            if pending:
                self.write(pending)
            if events:
                net._handle_events(self, events)
            if not self.dead:
                # A loop busy with input runs its timers late (uvloop reads many chunks per iteration), so
                # heartbeats and checks that are already due run here rather than wait for the timer.
                now = _now()
                due = link.get_timer()
                if due is not None and due <= now:
                    self._tick(now)
                else:
                    self._arm()
        except Exception:  # never let anything escape into the event loop
            log.exception("cluster link failed", node=net.own_name, remote=self.remote)
            self.close_link("internal error")

    def eof_received(self) -> bool | None:
        if self.link is not None and not self.dead:
            self._deliver(self.link.receive_data(b"", _now()))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.net._conns.discard(self)
        self._cancel_timer()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self.link is not None and not self.dead:
            reason = f"connection lost: {exc}" if exc is not None else "connection closed by peer"
            self._deliver(self.link.connection_lost(reason))
        self.dead = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        peer = self.peer
        if peer is not None and peer.active is self and not self.dead:
            self.net._drain(peer)

    # ---------------------------------------------------------------------------------------------- helpers

    def _admit(self, peer_name: str, peer_incarnation: int, intent: str | None) -> str | None:
        return self.net._admit(self, peer_name, peer_incarnation, intent)

    def _deliver(self, events: list[Event]) -> None:
        if not events:
            return
        try:
            self.net._handle_events(self, events)
        except Exception:
            log.exception("cluster link failed", node=self.net.own_name, remote=self.remote)

    def write(self, data: bytes) -> None:
        """Queue bytes for the socket; they are written at the end of the loop turn (or at once when many)."""
        if not data or self.transport is None:
            return
        self._cork.append(data)
        self._cork_bytes += len(data)
        if self._cork_bytes >= _CORK_LIMIT:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.net._loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        cork = self._cork
        if not cork or self.transport is None:
            return
        data = cork[0] if len(cork) == 1 else b"".join(cork)
        cork.clear()
        self._cork_bytes = 0
        self.net._bytes_out += len(data)
        if not self.transport.is_closing():
            try:
                self.transport.write(data)
            except RuntimeError:  # uvloop: the socket failed and its handle is closed, yet not "closing";
                pass  # connection_lost follows and reports the link down

    def finish(self) -> None:
        """The link is closed: write what it still has (its BYE), then close without losing it.

        Closing a socket that still has unread input makes the kernel reset the connection and drop what we
        wrote that is still in its send buffer (the BYE and the frames before it). So we half-close (FIN
        after the buffered bytes) and keep reading, discarding, until the peer closes too (`eof_received`)
        or `linger` seconds passed.
        """
        self.dead = True
        self._cancel_timer()
        if self.link is not None:
            self.write(self.link.data_to_send())
        self.flush()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            if not transport.can_write_eof():
                transport.close()
                return
            transport.write_eof()
        except Exception:  # the socket is already broken
            transport.abort()
            return
        self._linger = self.net._loop.call_later(self.net.handshake_timeout, self._linger_expired)

    def _linger_expired(self) -> None:
        self._linger = None
        if self.transport is not None:
            self.transport.abort()  # the peer neither closed nor read: give up on what is left

    def close_link(self, reason: str) -> None:
        """Close our side of the link with BYE(reason), delivering the resulting events."""
        if self.link is None or self.dead:
            self.dead = True
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()
            return
        self._deliver(self.link.close(reason))

    def _arm(self) -> None:
        link = self.link
        when = link.get_timer() if link is not None else None
        if when is None:
            self._cancel_timer()
            return
        if self._timer is not None:
            if when >= self._timer_at:
                return  # the armed timer fires first; handle_timer is safe to call early
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.net._loop.call_later(max(0.0, when - _now()), self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self.link is None or self.dead:
            return
        try:
            # the loop may run a timer a little early on our clock: it is due, so use its deadline
            self._tick(max(_now(), self._timer_at))
        except Exception:
            log.exception("cluster link timer failed", node=self.net.own_name, remote=self.remote)
            self.close_link("internal error")

    def _tick(self, now: float) -> None:
        link = self.link
        assert link is not None
        events = link.handle_timer(now)
        pending = link.data_to_send()
        if pending:
            self.write(pending)
        if events:
            self.net._handle_events(self, events)
        if not self.dead:
            self._arm()


class ClusterNetwork:
    """All node links of one node. See the module docstring and docs/cluster-links.md.

    `listen`: (host, port) of the cluster listener (port 0 picks a free port: see `bound_address`).
    `advertise`: the (host, port) other nodes should dial, sent in our HELLO (default: the bound address).
    `incoming_buffer`: the largest frame accepted (bytes of msgpack after the length prefix); every node of a
    cluster must use the same value, as frames larger than it are refused by `send_frame`.
    `outgoing_buffer`: bytes buffered per peer while it is unreachable or its socket is paused.
    """

    def __init__(
        self,
        own_name: str,
        incarnation: int,
        cookie: str,
        listen: tuple[str, int],
        *,
        detect_timeout: float = 1.0,
        incoming_buffer: int = 1 << 20,
        outgoing_buffer: int = 10 << 20,
        reconnect_min: float = 0.05,
        reconnect_max: float = 2.0,
        handshake_timeout: float | None = None,
        advertise: tuple[str, int] | None = None,
        seed: int | None = None,
    ) -> None:
        if not own_name:
            raise ClusterUsageError("own_name must not be empty")
        if not cookie:
            raise ClusterUsageError("cookie must not be empty")
        if not detect_timeout > 0:
            raise ClusterUsageError("detect_timeout must be positive")
        if incoming_buffer < 64 or outgoing_buffer < 0:
            raise ClusterUsageError("incoming_buffer must be >= 64 bytes and outgoing_buffer >= 0")
        if not 0 < reconnect_min <= reconnect_max:
            raise ClusterUsageError("need 0 < reconnect_min <= reconnect_max")
        self.own_name = own_name
        self.incarnation = incarnation
        self._cookie = cookie
        self.listen = listen
        self.detect_timeout = detect_timeout
        self.incoming_buffer = incoming_buffer
        self.outgoing_buffer = outgoing_buffer
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.handshake_timeout = handshake_timeout if handshake_timeout is not None else max(2 * detect_timeout, 1.0)
        self.connect_timeout = self.handshake_timeout
        self._advertise = advertise
        self._local_addr = _source_address(listen[0])
        self._rng = random.Random(seed)
        self._peers: dict[str, _Peer] = {}
        self._conns: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._loop_ref: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._stopped = False
        self._message_callbacks: list[MessageCallback] = []
        self._reachability_callbacks: list[ReachabilityCallback] = []
        self._connect_callbacks: list[ConnectCallback] = []
        self._receiver: Receiver | None = None
        self._admission: Admission | None = None
        self._refused_callbacks: list[RefusedCallback] = []
        # counters (see stats())
        self._frames_in = 0
        self._frames_out = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._overflows = 0
        self._oversized = 0
        self._unknown_peer = 0
        self._refused = 0
        self._duplicates = 0
        self._malformed = 0
        self._silent = 0
        self._links_up = 0
        self._links_down = 0
        self._dial_attempts = 0
        self._dial_failures = 0
        self._reconnects = 0
        self._metadata_dropped = 0

    # ---------------------------------------------------------------------------------------------- lifecycle

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        if self._loop_ref is None:
            raise ClusterUsageError("the cluster network is not started")
        return self._loop_ref

    async def start(self) -> None:
        """Open the listener and start dialing the peers added so far."""
        if self._running or self._stopped:
            raise ClusterUsageError("a ClusterNetwork starts once")
        self._loop_ref = asyncio.get_running_loop()
        host, port = self.listen
        self._server = await self._loop_ref.create_server(
            lambda: _Connection(self, None), host, port, reuse_address=True
        )
        self._running = True
        self._logger().info("cluster listener started", address=self.bound_address())
        for peer in self._peers.values():
            self._schedule_dial(peer)

    async def stop(self) -> None:
        """Close the listener and every link (each with BYE), cancel dials and timers. Idempotent.

        Reachability callbacks fire (False) for every peer that was reachable. Buffered frames are dropped.
        Returns once every socket is closed, or after about a second.
        """
        if self._stopped:
            return
        self._stopped = True
        was_running = self._running
        self._running = False
        if self._server is not None:
            self._server.close()
        tasks = []
        for peer in self._peers.values():
            self._cancel_dial(peer)
            if peer.dial_task is not None:
                tasks.append(peer.dial_task)
        for conn in list(self._conns):
            conn.close_link(SHUTTING_DOWN)
        for peer in self._peers.values():
            peer.queue.clear()
            peer.queued_bytes = 0
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if was_running:
            deadline = self._loop.time() + _STOP_GRACE
            while self._conns and self._loop.time() < deadline:
                await asyncio.sleep(0.01)
            for conn in list(self._conns):
                if conn.transport is not None:
                    conn.transport.abort()
            self._logger().info("cluster listener stopped")

    def bound_address(self) -> tuple[str, int]:
        """The (host, port) the listener is bound to (after start)."""
        if self._server is None or not self._server.sockets:
            raise ClusterUsageError("the cluster network is not started")
        name = self._server.sockets[0].getsockname()
        return (str(name[0]), int(name[1]))

    def _advertised(self) -> tuple[str, int] | None:
        if self._advertise is not None:
            return self._advertise
        try:
            return self.bound_address()
        except ClusterUsageError:
            return None

    # ---------------------------------------------------------------------------------------------- peers

    def add_peer(self, name: str, host: str, port: int, intent: str | None = None) -> None:
        """Dial `name` at (host, port) and keep a link to it (reconnecting) until `remove_peer(name)`; our HELLO
        states `intent` (handshake.JOIN while this node is not yet known as a member)."""
        if name == self.own_name:
            raise ClusterUsageError("a node does not link to itself")
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = _Peer(name, (host, port))
        else:
            peer.address = (host, port)
        peer.removed = False
        peer.intent = intent
        if self._running:
            self._schedule_dial(peer)

    def remove_peer(self, name: str) -> None:
        """Stop dialing `name`, close its link with BYE and drop its outgoing buffer.

        The peer can still connect to us later (membership is the caller's decision)."""
        peer = self._peers.pop(name, None)
        if peer is None:
            return
        peer.removed = True
        peer.address = None
        self._cancel_dial(peer)
        for conn in (peer.dialing, peer.active):
            if conn is not None:
                conn.close_link(PEER_REMOVED)
        peer.queue.clear()
        peer.queued_bytes = 0

    def set_intent(self, intent: str | None) -> None:
        """The intent our next dials to every peer state (links already up are kept)."""
        for peer in self._peers.values():
            peer.intent = intent

    def set_incarnation(self, incarnation: int) -> None:
        """This node starts again as a new incarnation (it left its cluster and joins again): every link and
        dial of the old one is closed; new handshakes carry the new incarnation."""
        self.incarnation = incarnation
        for name in list(self._peers):
            self.remove_peer(name)

    def set_admission(self, admission: Admission | None) -> None:
        """Who may link to us (see `Admission`); None admits every node that proves the cookie."""
        self._admission = admission

    def on_refused(self, callback: RefusedCallback) -> None:
        """Register `callback(peer, reason)` for verified refusals of our dials."""
        self._refused_callbacks.append(callback)

    def peers(self) -> dict[str, tuple[str, int] | None]:
        """Every peer the network knows: added ones with their dial address, accepted ones with None."""
        return {name: peer.address for name, peer in self._peers.items()}

    def reachable(self) -> set[str]:
        """The peers with an established link."""
        return {name for name, peer in self._peers.items() if peer.active is not None}

    def room(self, peer: str) -> int:
        """Bytes of frames `send_frame` takes for `peer` now: unbounded while its link is up and writable,
        what is left of the outgoing buffer otherwise, 0 for an unknown peer."""
        entry = self._peers.get(peer)
        if entry is None or not self._running:
            return 0
        conn = entry.active
        if conn is not None and not conn.paused and not entry.queue:
            return sys.maxsize
        return max(0, self.outgoing_buffer - entry.queued_bytes)

    @property
    def max_frame(self) -> int:
        """The largest frame body `send_frame` sends (the cluster's `incoming_buffer`)."""
        return self.incoming_buffer

    def incarnation_of(self, name: str) -> int | None:
        """The incarnation the peer proved on its last established link (None if never linked)."""
        peer = self._peers.get(name)
        return peer.incarnation if peer is not None else None

    # ---------------------------------------------------------------------------------------------- callbacks

    def on_message(self, callback: MessageCallback) -> None:
        """Call `callback(peer, frame_type, body)` for every FORWARD, CONTROL and REACHABILITY frame."""
        self._message_callbacks.append(callback)

    def on_reachability(self, callback: ReachabilityCallback) -> None:
        """Call `callback(peer, True)` when a link to the peer is established, `callback(peer, False)` when the
        link is lost (peer silent, BYE, socket closed, removed, stop). A replaced link gives False then True."""
        self._reachability_callbacks.append(callback)

    def on_connect(self, callback: ConnectCallback) -> None:
        """Call `callback(peer, host, port)` on every established link, with the listener the peer advertised
        (lets a node learn a joining node, whose connection it accepted, and dial it back later). Not called
        when the peer advertised no listener."""
        self._connect_callbacks.append(callback)

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None:
        """Metadata `Transport`: call `receiver(peer, data)` for every METADATA frame."""
        self._receiver = receiver

    # ---------------------------------------------------------------------------------------------- sending

    def send(self, peer: str, data: bytes) -> None:
        """Metadata `Transport`: one METADATA frame to `peer` (buffered while unreachable, dropped on overflow)."""
        self.send_frame(peer, FrameType.METADATA, data)

    def send_frame(self, peer: str, frame_type: FrameType, body: Any, *, flush: bool = False) -> bool:
        """Send one data frame (METADATA, FORWARD, CONTROL or REACHABILITY) to `peer`. With `flush` it is
        written to the socket at once rather than at the end of the event loop's turn.

        True: written to the peer's link, or buffered to be written on the next link. False: not sent and
        not buffered (the outgoing buffer is full, the frame exceeds the maximum frame size, the peer is
        unknown, or the network is not running). Raises `ClusterUsageError` for a body that does not fit
        its type.
        """
        if frame_type not in DATA_TYPES:
            raise ClusterUsageError(f"{frame_type!r} is not a data frame type")
        entry = self._peers.get(peer)
        if entry is None or not self._running:
            self._unknown_peer += 1
            return False
        frame = encode_frame(frame_type, body)
        size = len(frame)
        if size - HEADER_SIZE > self.incoming_buffer:
            self._oversized += 1
            self._logger(peer=peer).warning(
                "cluster frame too large, not sent",
                frame_type=frame_type.name,
                size=size - HEADER_SIZE,
                maximum=self.incoming_buffer,
            )
            return False
        conn = entry.active
        direct = conn is not None and not conn.paused and not entry.queue
        if not direct and entry.queued_bytes + size > self.outgoing_buffer:
            self._overflows += 1
            entry.refused_since_log += 1
            now = _now()
            if now - entry.overflow_logged_at >= _OVERFLOW_LOG_INTERVAL:
                self._logger(peer=peer).warning(
                    "cluster outgoing buffer full, refusing frames",
                    refused_frames=entry.refused_since_log,
                    buffered_bytes=entry.queued_bytes,
                    limit=self.outgoing_buffer,
                    reachable=conn is not None,
                )
                entry.overflow_logged_at = now
                entry.refused_since_log = 0
            return False
        if direct:
            assert conn is not None and conn.link is not None
            conn.write(frame)
            if flush:
                conn.flush()
            conn.link.mark_sent()
            self._frames_out += 1
            return True
        entry.queue.append(frame)
        entry.queued_bytes += size
        if conn is not None and not conn.paused:
            self._drain(entry)
        return True

    def _drain(self, peer: _Peer) -> None:
        """Write the peer's buffered frames to its link, in order, until the socket pauses."""
        conn = peer.active
        queue = peer.queue
        if conn is None or conn.link is None:
            return
        link = conn.link
        while queue and not conn.paused and not conn.dead:  # every turn removes at least one frame
            chunk: list[bytes] = []
            size = 0
            while queue and size < _DRAIN_CHUNK:
                frame = queue.popleft()
                chunk.append(frame)
                size += len(frame)
            peer.queued_bytes -= size
            conn.write(b"".join(chunk))
            conn.flush()  # the transport pauses us synchronously when its buffer passes the high-water mark
            link.mark_sent(len(chunk))
            self._frames_out += len(chunk)

    # ---------------------------------------------------------------------------------------------- dialing

    def _cancel_dial(self, peer: _Peer) -> None:
        if peer.reconnect is not None:
            peer.reconnect.cancel()
            peer.reconnect = None
        if peer.dial_task is not None and not peer.dial_task.done():
            peer.dial_task.cancel()

    def _schedule_dial(self, peer: _Peer) -> None:
        if (
            not self._running
            or peer.removed
            or peer.address is None
            or peer.active is not None
            or peer.dialing is not None
            or peer.dial_task is not None
            or peer.reconnect is not None
        ):
            return
        if peer.attempts == 0:
            delay = 0.0
        else:
            base = min(self.reconnect_max, self.reconnect_min * 2 ** min(peer.attempts - 1, 30))
            delay = base * (0.5 + 0.5 * self._rng.random())
        peer.reconnect = self._loop.call_later(delay, self._dial, peer)

    def _dial(self, peer: _Peer) -> None:
        peer.reconnect = None
        if not self._running or peer.removed or peer.address is None or peer.active is not None:
            return
        if peer.dialing is not None or peer.dial_task is not None:
            return
        peer.attempts += 1
        self._dial_attempts += 1
        if peer.was_up or peer.attempts > 1:
            self._reconnects += 1
        peer.dial_task = self._loop.create_task(self._connect(peer, peer.address))

    async def _connect(self, peer: _Peer, address: tuple[str, int]) -> None:
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._loop.create_connection(
                    lambda: _Connection(self, peer), address[0], address[1], local_addr=self._local_addr
                )
        except Exception as exc:  # OSError, TimeoutError, ...; CancelledError is not an Exception
            self._dial_failures += 1
            if peer.attempts & (peer.attempts - 1) == 0:  # attempts 1, 2, 4, 8, ...: do not flood the log
                self._logger(peer=peer.name).warning(
                    "cluster dial failed",
                    address=f"{address[0]}:{address[1]}",
                    attempt=peer.attempts,
                    error=str(exc) or type(exc).__name__,
                )
            peer.dial_task = None
            self._schedule_dial(peer)
            return
        finally:
            if peer.dial_task is asyncio.current_task():
                peer.dial_task = None

    def _admit(self, conn: _Connection, name: str, incarnation: int, intent: str | None) -> str | None:
        """Acceptor: the dialer `name` proved the cookie; keep this link (None) or refuse it (reason)?

        First the admission callback (membership: is the dialer one of ours?). Then one link per pair: between
        our own pending outgoing connection and this one, keep the connection dialed by the smaller name (both
        sides decide alike). An established link from an older incarnation,
        or one the peer dialed again (it gave the old one up), is replaced.
        """
        if not self._running:
            return SHUTTING_DOWN
        if self._admission is not None:
            refusal = self._admission(name, incarnation, intent)
            if refusal is not None:
                return refusal
        peer = self._peers.get(name)
        if peer is None:
            return None
        active = peer.active
        if active is not None and active.link is not None:
            if active.outgoing and active.link.peer_incarnation == incarnation and name > self.own_name:
                return DUPLICATE_LINK
            return None  # replaced in _on_established
        if peer.dialing is not None or peer.dial_task is not None:
            if name > self.own_name:
                return DUPLICATE_LINK
            if peer.dial_task is not None:
                peer.dial_task.cancel()
                peer.dial_task = None
            if peer.dialing is not None:
                conn.replaces.append(peer.dialing)
        return None

    # ---------------------------------------------------------------------------------------------- events

    def _handle_events(self, conn: _Connection, events: list[Event]) -> None:
        for event in events:
            if conn.dead and not isinstance(event, Closed):
                continue  # a callback closed the link: drop the rest
            if type(event) is Message:
                self._on_message(conn, event)
            elif isinstance(event, Established):
                self._on_established(conn, event)
            elif isinstance(event, PeerSilent):
                self._silent += 1
                self._logger(peer=self._conn_peer(conn)).warning(
                    "cluster peer silent", silent_for=round(event.silent_for, 3), detect_timeout=self.detect_timeout
                )
            elif isinstance(event, Closed):
                self._on_closed(conn, event)

    def _on_message(self, conn: _Connection, message: Message) -> None:
        peer = conn.peer
        if peer is None:
            return
        self._frames_in += 1
        if message.type is FrameType.METADATA:
            receiver = self._receiver
            if receiver is None:
                self._metadata_dropped += 1
                return
            try:
                receiver(peer.name, message.body)
            except Exception:
                log.exception("metadata receiver failed", node=self.own_name, peer=peer.name)
            return
        for callback in self._message_callbacks:
            try:
                callback(peer.name, message.type, message.body)
            except Exception:
                log.exception("cluster message callback failed", node=self.own_name, peer=peer.name)

    def _on_established(self, conn: _Connection, event: Established) -> None:
        name = event.peer_name
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = _Peer(name, None)
        conn.peer = peer
        if peer.dialing is conn:
            peer.dialing = None
        old = peer.active
        peer.active = conn
        peer.incarnation = event.peer_incarnation
        peer.attempts = 0
        peer.was_up = True
        self._links_up += 1
        if peer.reconnect is not None:
            peer.reconnect.cancel()
            peer.reconnect = None
        if old is not None and old is not conn:
            old.peer = None  # its Closed must not touch the peer any more
            self._logger(peer=name).info("cluster link replaced", remote=old.remote)
            self._links_down += 1
            self._fire_reachability(name, False)
            old.close_link(REPLACED)
        for other in conn.replaces:
            if other is not conn:
                if peer.dialing is other:
                    peer.dialing = None
                other.close_link(DUPLICATE_LINK)
        conn.replaces = []
        listen = event.peer_listen
        self._logger(peer=name).info(
            "cluster link up",
            direction="outgoing" if conn.outgoing else "incoming",
            remote=conn.remote,
            incarnation=event.peer_incarnation,
            listen=f"{listen[0]}:{listen[1]}" if listen is not None else None,
            buffered_frames=len(peer.queue),
        )
        self._drain(peer)
        if listen is not None:
            for callback in list(self._connect_callbacks):
                if peer.active is not conn:
                    break
                try:
                    callback(name, listen[0], listen[1])
                except Exception:
                    log.exception("cluster connect callback failed", node=self.own_name, peer=name)
        if peer.active is conn:
            self._fire_reachability(name, True)

    def _on_closed(self, conn: _Connection, event: Closed) -> None:
        link = conn.link
        established = link is not None and link.established is not None
        conn.finish()
        peer = conn.peer
        name = self._conn_peer(conn)
        logger = self._logger(peer=name)
        fields: dict[str, Any] = {"reason": event.reason, "remote": conn.remote}
        if event.detail:
            fields["detail"] = event.detail
        if event.cause is CloseCause.REFUSED and event.reason in (DUPLICATE_LINK, SHUTTING_DOWN):
            self._duplicates += event.reason == DUPLICATE_LINK
            logger.info("cluster connection not kept", direction="outgoing" if conn.outgoing else "incoming", **fields)
        elif event.cause is CloseCause.REFUSED:
            self._refused += 1
            logger.warning("cluster link refused", direction="outgoing" if conn.outgoing else "incoming", **fields)
            if event.verified and conn.outgoing and name is not None:
                for refused in list(self._refused_callbacks):
                    try:
                        refused(name, event.reason)
                    except Exception:
                        log.exception("cluster refusal callback failed", node=self.own_name, peer=name)
        elif event.cause is CloseCause.PROTOCOL_ERROR:
            self._malformed += 1
            logger.warning("malformed cluster frame, link closed", established=established, **fields)
        elif event.cause is CloseCause.HANDSHAKE_TIMEOUT:
            logger.warning("cluster handshake timed out", **fields)
        elif established:
            level = logger.info if event.cause in (CloseCause.LOCAL, CloseCause.PEER_BYE) else logger.warning
            level("cluster link down", cause=event.cause.value, **fields)
        else:
            logger.info("cluster connection closed during handshake", cause=event.cause.value, **fields)
        if peer is None:
            return
        if peer.dialing is conn:
            peer.dialing = None
        if peer.active is conn:
            peer.active = None
            self._links_down += 1
            self._fire_reachability(peer.name, False)
        if peer.active is None and peer.dialing is None:
            self._schedule_dial(peer)

    def _fire_reachability(self, name: str, reachable: bool) -> None:
        for callback in list(self._reachability_callbacks):
            try:
                callback(name, reachable)
            except Exception:
                log.exception("cluster reachability callback failed", node=self.own_name, peer=name)

    @staticmethod
    def _conn_peer(conn: _Connection) -> str | None:
        if conn.peer is not None:
            return conn.peer.name
        link = conn.link
        if link is None:
            return None
        return link.peer_name or link.claimed_peer_name

    def _logger(self, **fields: Any) -> Any:
        return log.bind(node=self.own_name, **fields)

    # ---------------------------------------------------------------------------------------------- stats

    def stats(self) -> dict[str, int]:
        """Counters since start (all ints).

        frames_in / frames_out: data frames received / written to sockets (handshake, heartbeat and BYE
        frames are not counted); bytes_in / bytes_out: all bytes read from / written to sockets;
        overflows: frames refused because a peer's outgoing buffer was full; oversized: frames refused for
        exceeding the maximum frame size; unknown_peer: frames refused for a peer that is not known (or while
        not running); handshakes_refused: handshakes refused by us or by the peer (wrong cookie, name
        mismatch, self connection, ...); duplicate_links: connections refused to keep one link per pair;
        malformed_frames: connections closed for a protocol error (bad length, msgpack, version, type, body
        shape, truncated frame); silent_peers: links closed because the peer was silent for detect_timeout;
        links_up / links_down: links established / lost; reconnects: dial attempts after a failed attempt or
        a lost link; dial_attempts / dial_failures: TCP connects tried / failed; metadata_dropped: METADATA
        frames received before set_receiver; connections: open sockets; reachable: peers with a link;
        buffered_frames / buffered_bytes: in all outgoing buffers.
        """
        return {
            "frames_in": self._frames_in,
            "frames_out": self._frames_out,
            "bytes_in": self._bytes_in,
            "bytes_out": self._bytes_out,
            "overflows": self._overflows,
            "oversized": self._oversized,
            "unknown_peer": self._unknown_peer,
            "handshakes_refused": self._refused,
            "duplicate_links": self._duplicates,
            "malformed_frames": self._malformed,
            "silent_peers": self._silent,
            "links_up": self._links_up,
            "links_down": self._links_down,
            "reconnects": self._reconnects,
            "dial_attempts": self._dial_attempts,
            "dial_failures": self._dial_failures,
            "metadata_dropped": self._metadata_dropped,
            "connections": len(self._conns),
            "reachable": sum(1 for peer in self._peers.values() if peer.active is not None),
            "buffered_frames": sum(len(peer.queue) for peer in self._peers.values()),
            "buffered_bytes": sum(peer.queued_bytes for peer in self._peers.values()),
        }

    def peer_stats(self) -> dict[str, dict[str, Any]]:
        """Per known peer: reachable, dial address, incarnation, buffered frames and bytes."""
        return {
            name: {
                "reachable": peer.active is not None,
                "address": f"{peer.address[0]}:{peer.address[1]}" if peer.address is not None else None,
                "incarnation": peer.incarnation,
                "buffered_frames": len(peer.queue),
                "buffered_bytes": peer.queued_bytes,
            }
            for name, peer in self._peers.items()
        }
