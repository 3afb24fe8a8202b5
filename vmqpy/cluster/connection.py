"""The asyncio protocol of one node-link socket: moves bytes and time between a TCP connection and its `Link`.

A `LinkConnection` feeds what the socket reads into the sans-I/O `Link`, writes out what the link returns, arms
one timer at the link's next deadline, and hands the link's events to the links that own it (a `LinkHost`:
`PeerLinks` in peer_links.py). Bytes written during one turn of the event loop leave in one socket write at the
end of the turn (sooner once `CORK_LIMIT` bytes are collected). A closed link half-closes its socket and keeps
reading until the peer closes too, so the kernel does not discard the last frames (see `finish`).

One read can hold thousands of frames (a peer that wrote faster than this node handles, a backlog sent after a
reconnect), and handling a metadata frame costs far more than reading it. So the frames of a read are handled
`TURN_BUDGET` seconds at a time: what is left waits for the next turn of the loop with the socket's reading
paused, so that timers (heartbeats to every peer, keep-alives), clients and the other links run in between.
Without it a node that fell behind handled one read for more than `cluster.detect_timeout` and its peers
declared it silent while it was working (tests/unit/cluster/test_link_backlog.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import socket
import time
from typing import TYPE_CHECKING, Final, Protocol, cast

import structlog

from vmqpy.cluster.link import Event, Link
from vmqpy.cluster.link_counters import LinkCounters

if TYPE_CHECKING:
    from vmqpy.cluster.peer import Peer
    from vmqpy.cluster.pending_links import PendingLink

__all__ = ["CORK_LIMIT", "LinkConnection", "LinkHost", "clock"]

log = structlog.get_logger("vmqpy.cluster")

CORK_LIMIT: Final = 1 << 16  # write what was collected once it reaches this size (else at the end of the turn)
_WRITE_HIGH_WATER: Final = 1 << 18
_EARLY_LIMIT: Final = 1 << 16  # bytes kept from before connection_made (a HELLO is far smaller)
TURN_BUDGET: Final = 0.02  # seconds of frame handling per turn of the loop; the rest waits for the next turn
_SLICE: Final = 16  # events handed over between two looks at the clock

clock = time.monotonic  # the links' clock (uvloop's loop.time() only advances once per loop iteration)


class LinkHost(Protocol):
    """What a connection needs of the links that own it (peer_links.PeerLinks)."""

    own_name: str
    handshake_timeout: float
    counters: LinkCounters  # the connection counts the bytes it reads and writes

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def open_link(self, conn: LinkConnection) -> Link | None:
        """The socket of `conn` is connected: the link to run on it, or None to abort the socket."""
        ...

    def handle_events(self, conn: LinkConnection, events: list[Event]) -> None:
        """What the link of `conn` reported."""
        ...

    def resumed(self, conn: LinkConnection) -> None:
        """The socket of `conn` takes bytes again (after `pause_writing`)."""
        ...

    def socket_closed(self, conn: LinkConnection) -> None:
        """The socket of `conn` is closed: it is no longer open."""
        ...


class LinkConnection(asyncio.Protocol):
    """One TCP connection and its Link."""

    def __init__(self, host: LinkHost, peer: Peer | None) -> None:
        self.host = host
        self.peer = peer  # known from the start when we dial, after the handshake when we accept
        self.outgoing = peer is not None
        self.link: Link | None = None
        self.transport: asyncio.Transport | None = None
        self.remote: str = "?"
        self.paused = False
        self.dead = False  # the link is closed; the socket is closing
        self.replaces: list[LinkConnection] = []  # to close once this link is established (admit decision)
        self.pending: PendingLink | None = None  # an accepted socket's place among the pending links (pending_links.py)
        self._loop = host.loop
        self._counters = host.counters
        self._cork: list[bytes] = []
        self._cork_bytes = 0
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._linger: asyncio.TimerHandle | None = None
        # bytes that arrived before connection_made: over TLS, start_tls (tls_accept.py) may hand the first
        # application data to the protocol before the coroutine that awaited the handshake gets to run
        self._early = bytearray()
        # events of reads not handled yet (TURN_BUDGET); while there are any, the socket is not read
        self._backlog: collections.deque[Event] = collections.deque()
        self._held = False  # the socket's reading is paused until the backlog is handled

    # ---------------------------------------------------------------------------------------------- protocol

    def connection_made(self, base_transport: asyncio.BaseTransport) -> None:
        # a stream transport, but uvloop's are not subclasses of asyncio.Transport: no isinstance check
        transport = cast(asyncio.Transport, base_transport)
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
        link = self.host.open_link(self)
        if link is None:
            transport.abort()
            return
        self.link = link
        self.write(link.data_to_send())
        self._arm()
        if self._early:
            early = bytes(self._early)
            self._early.clear()
            self.data_received(early)

    def data_received(self, data: bytes) -> None:
        link = self.link
        if link is None or self.dead:
            if self.transport is None and not self.dead and len(self._early) < _EARLY_LIMIT:
                self._early += data
            return
        self._counters.bytes_in += len(data)
        try:
            events = link.receive_data(data, clock())
            pending = link.data_to_send()
            if pending:
                self.write(pending)
            self._backlog.extend(events)
            if not self._held:  # else a read that was already on its way when the reading stopped: it waits
                self._drain(clock() + TURN_BUDGET)
            if not self.dead:
                # A loop busy with input runs its timers late (uvloop reads many chunks per iteration), so
                # heartbeats and checks that are already due run here rather than wait for the timer.
                now = clock()
                due = link.get_timer()
                if due is not None and due <= now:
                    self._tick(now)
                else:
                    self._arm()
        except Exception:  # never let anything escape into the event loop
            log.exception("cluster link failed", node=self.host.own_name, remote=self.remote)
            self.close_link("internal error")

    # ---------------------------------------------------------------------------------------------- handling

    def _drain(self, deadline: float) -> None:
        """Hand the backlog to the host, `_SLICE` events at a time, until it is empty or `deadline` passed (at
        least one slice). What is left waits for the next turn of the loop with the socket's reading paused;
        once it is empty the socket is read again."""
        backlog = self._backlog
        first = True
        while backlog and not self.dead and (first or clock() < deadline):
            first = False
            self.host.handle_events(self, [backlog.popleft() for _ in range(min(_SLICE, len(backlog)))])
        if self.dead:
            backlog.clear()
            return
        if backlog or self._held:
            if self.link is not None:  # held frames: the peer's later ones wait unread, so no verdict yet
                self.link.hold_silence(clock())
            transport = self.transport
            if transport is not None and not transport.is_closing() and self._held != bool(backlog):
                with contextlib.suppress(Exception):
                    if backlog:
                        transport.pause_reading()
                    else:
                        transport.resume_reading()
            self._held = bool(backlog)
        if backlog:
            self._loop.call_soon(self._continue)

    def _continue(self) -> None:
        """The next part of the backlog, then the link's timers if they are due."""
        link = self.link
        if link is None or self.dead:
            self._backlog.clear()
            return
        try:
            self._drain(clock() + TURN_BUDGET)
            now = clock()
            due = link.get_timer()
            if not self.dead and due is not None and due <= now:
                self._tick(now)
        except Exception:
            log.exception("cluster link failed", node=self.host.own_name, remote=self.remote)
            self.close_link("internal error")

    def eof_received(self) -> bool | None:
        self._drain(math.inf)  # what the peer sent before its end first, in order
        if self.link is not None and not self.dead:
            self._deliver(self.link.receive_data(b"", clock()))
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._drain(math.inf)
        self.host.socket_closed(self)
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
        if not self.dead:
            self.host.resumed(self)

    # ---------------------------------------------------------------------------------------------- writing

    def write(self, data: bytes) -> None:
        """Queue bytes for the socket; they are written at the end of the loop turn (or at once when many)."""
        if not data or self.transport is None:
            return
        self._cork.append(data)
        self._cork_bytes += len(data)
        if self._cork_bytes >= CORK_LIMIT:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush)

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
        self._counters.bytes_out += len(data)
        if not self.transport.is_closing():
            try:
                self.transport.write(data)
            except RuntimeError:  # uvloop: the socket failed and its handle is closed, yet not "closing";
                pass  # connection_lost follows and reports the link down

    # ---------------------------------------------------------------------------------------------- closing

    def finish(self) -> None:
        """The link is closed: write what it still has (its BYE), then close without losing it.

        Closing a socket that still has unread input makes the kernel reset the connection and drop what we
        wrote that is still in its send buffer (the BYE and the frames before it). So we half-close (FIN
        after the buffered bytes) and keep reading, discarding, until the peer closes too (`eof_received`)
        or `handshake_timeout` seconds passed.
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
        self._linger = self._loop.call_later(self.host.handshake_timeout, self._linger_expired)

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

    def _deliver(self, events: list[Event]) -> None:
        if not events:
            return
        try:
            self.host.handle_events(self, events)
        except Exception:
            log.exception("cluster link failed", node=self.host.own_name, remote=self.remote)

    # ---------------------------------------------------------------------------------------------- timer

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
        self._timer = self._loop.call_later(max(0.0, when - clock()), self._on_timer)

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
            self._tick(max(clock(), self._timer_at))
        except Exception:
            log.exception("cluster link timer failed", node=self.host.own_name, remote=self.remote)
            self.close_link("internal error")

    def _tick(self, now: float) -> None:
        link = self.link
        assert link is not None
        self._answer(link, link.handle_timer(now))
        if not self.dead:
            self._arm()

    def _answer(self, link: Link, events: list[Event]) -> None:
        """After input or a timer: write what the link has to send, then report its events."""
        pending = link.data_to_send()
        if pending:
            self.write(pending)
        if events:
            self.host.handle_events(self, events)
