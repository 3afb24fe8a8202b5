"""The asyncio TCP driver of the node links: one listener, one dialer per known peer, one `Link` per socket.

`ClusterNetwork` and its parts only move bytes and time into the sans-I/O `Link` and its events out to callbacks. It
keeps at most one authenticated link per peer, dials every peer added with `add_peer` (reconnecting with
exponential backoff while the peer stays added) and accepts connections from any node that proves the
cookie. It implements the metadata store's `Transport` (METADATA frames).

Its parts: connection.py (the asyncio protocol of one socket and its link), peer_links.py (which connection
carries each peer's link, one per pair), peer.py (what is kept per peer), outbox.py (a peer's outgoing buffer
and its rules), dialer.py and backoff.py (dialing, and when to dial again), link_callbacks.py (who hears about
messages, reachability, connects and refusals), link_counters.py (the counters of `stats`), pending_links.py
(accepted sockets before their handshake: how many, node-wide and per address).

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
import ipaddress
import secrets
import ssl
from collections.abc import Callable
from typing import Any, Final

import structlog

from vmqpy.cluster.connection import LinkConnection, clock
from vmqpy.cluster.dialer import Dialer
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.frame_auth import cookie_key
from vmqpy.cluster.framing import DATA_TYPES, HEADER_SIZE, FrameType, encode_frame
from vmqpy.cluster.handshake import NONCE_MIN, Admit
from vmqpy.cluster.link import Link
from vmqpy.cluster.link_callbacks import (
    Admission,
    ConnectCallback,
    LinkCallbacks,
    MessageCallback,
    ReachabilityCallback,
    Receiver,
    RefusedCallback,
)
from vmqpy.cluster.link_counters import LinkCounters
from vmqpy.cluster.outbox import Offer
from vmqpy.cluster.peer import Peer
from vmqpy.cluster.peer_links import DUPLICATE_LINK, PEER_REMOVED, REPLACED, SHUTTING_DOWN, PeerLinks
from vmqpy.cluster.pending_links import PendingGate, PendingLink, PendingLinks
from vmqpy.cluster.tls_accept import TlsAcceptor

__all__ = [
    "DUPLICATE_LINK",
    "PEER_REMOVED",
    "REPLACED",
    "SHUTTING_DOWN",
    "Admission",
    "ClusterNetwork",
    "ConnectCallback",
    "MessageCallback",
    "ReachabilityCallback",
    "Receiver",
    "RefusedCallback",
]

log = structlog.get_logger("vmqpy.cluster")

_STOP_GRACE: Final = 1.0  # stop() waits at most this long for sockets to finish closing
_WRITE, _REFUSED = Offer.WRITE, Offer.REFUSED  # looked up once: an enum member lookup is slow on Python 3.11


def _source_address(host: str) -> tuple[str, int] | None:
    """Dial from the listener's IP when it is a concrete address (so peers see connections come from it)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if ip.is_unspecified else (host, 0)


class ClusterNetwork:
    """All node links of one node. See the module docstring and docs/cluster-links.md.

    `listen`: (host, port) of the cluster listener (port 0 picks a free port: see `bound_address`).
    `advertise`: the (host, port) other nodes should dial, sent in our HELLO (default: the bound address).
    `incoming_buffer`: the largest frame accepted (bytes of msgpack after the length prefix); every node of a
    cluster must use the same value, as frames larger than it are refused by `send_frame`.
    `outgoing_buffer`: bytes buffered per peer while it is unreachable or its socket is paused.
    `tls_server` / `tls_client`: the TLS contexts in force (asked again for every connection, so a reload
    reaches new links) of the listener and of our dials; with them every link runs over TLS and both ends verify
    the other's certificate (docs/security.md, "Cluster links"). Frames are authenticated with or without TLS.
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
        tls_server: Callable[[], ssl.SSLContext] | None = None,
        tls_client: Callable[[], ssl.SSLContext] | None = None,
        max_pending_links: int = 64,
        max_pending_links_per_address: int = 8,
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
        if (tls_server is None) != (tls_client is None):
            raise ClusterUsageError("cluster TLS needs both the server and the client context")
        if max_pending_links < 1 or max_pending_links_per_address < 1:
            raise ClusterUsageError("max_pending_links and max_pending_links_per_address must be >= 1")
        self.own_name = own_name
        self.incarnation = incarnation
        self._cookie = cookie
        cookie_key(cookie)  # stretched once now (scrypt, frame_auth.py), not during the first handshake
        self.listen = listen
        self.detect_timeout = detect_timeout
        self.incoming_buffer = incoming_buffer
        self.outgoing_buffer = outgoing_buffer
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.handshake_timeout = handshake_timeout if handshake_timeout is not None else max(2 * detect_timeout, 1.0)
        # a dial (TCP connect and its TLS handshake) to a peer that does not answer is given up as before, so that
        # dials resume soon after a partition heals and a stuck TLS handshake is retried on a new connection;
        # the challenge-response and the accepting side's TLS handshake have handshake_timeout
        self.connect_timeout = max(2 * detect_timeout, 1.0)
        self._advertise = advertise
        self._tls_server = tls_server
        self._tls_pending: set[asyncio.Task[None]] = set()  # TLS handshakes of accepted sockets under way
        self._server: asyncio.Server | None = None
        self._stopped = False
        self._callbacks = LinkCallbacks(own_name)
        self._counters = LinkCounters()
        self._pending = PendingLinks(own_name, max_pending_links, max_pending_links_per_address, self._counters)
        self._links = PeerLinks(
            own_name,
            outgoing_buffer=outgoing_buffer,
            detect_timeout=detect_timeout,
            handshake_timeout=self.handshake_timeout,
            counters=self._counters,
            callbacks=self._callbacks,
            new_link=self._new_link,
            redial=self._schedule_dial,
        )
        self._peers = self._links.peers
        self._conns = self._links.conns
        self._dialer = Dialer(
            self._links,
            shortest=reconnect_min,
            longest=reconnect_max,
            connect_timeout=self.connect_timeout,
            local_addr=_source_address(listen[0]),
            seed=seed,
            tls=tls_client,  # a dial's TLS handshake shares its connect timeout: a stuck one is retried at once
        )

    # ---------------------------------------------------------------------------------------------- lifecycle

    @property
    def _running(self) -> bool:
        return self._links.running

    async def start(self) -> None:
        """Open the listener and start dialing the peers added so far."""
        if self._running or self._stopped:
            raise ClusterUsageError("a ClusterNetwork starts once")
        loop = self._links.loop = asyncio.get_running_loop()
        host, port = self.listen
        tls = self._tls_server

        def admitted(place: PendingLink) -> asyncio.Protocol:
            if tls is not None:
                return TlsAcceptor(self._links, tls, self.handshake_timeout, self._tls_pending, place)
            conn = LinkConnection(self._links, None)
            conn.pending = place
            return conn

        pending = self._pending
        self._server = await loop.create_server(lambda: PendingGate(pending, admitted), host, port,
                                                reuse_address=True)
        self._links.running = True
        self._logger().info("cluster listener started", address=self.bound_address(), tls=tls is not None)
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
        self._links.running = False
        if self._server is not None:
            self._server.close()
        tasks = []
        for peer in self._peers.values():
            self._dialer.cancel(peer)
            if peer.dial_task is not None:
                tasks.append(peer.dial_task)
        for conn in list(self._conns):
            conn.close_link(SHUTTING_DOWN)
        for peer in self._peers.values():
            self._counters.bytes_dropped += peer.outbox.size
            peer.outbox.clear()
        for handshake in list(self._tls_pending):
            handshake.cancel()
            tasks.append(handshake)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if was_running:
            loop = self._links.loop
            deadline = loop.time() + _STOP_GRACE
            while self._conns and loop.time() < deadline:
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
            peer = self._peers[name] = Peer(name, (host, port), self.outgoing_buffer)
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
        self._dialer.cancel(peer)
        for conn in (peer.dialing, peer.active):
            if conn is not None:
                conn.close_link(PEER_REMOVED)
        self._counters.bytes_dropped += peer.outbox.size
        peer.outbox.clear()

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
        self._callbacks.admission = admission

    def on_refused(self, callback: RefusedCallback) -> None:
        """Register `callback(peer, reason)` for verified refusals of our dials."""
        self._callbacks.refusals.append(callback)

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
        return entry.outbox.room(entry.writable)

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
        """Call `callback(peer, frame_type, body)` for every FORWARD, REPLICA, CONTROL and REACHABILITY frame: one
        callback (the node's control table, vmqpy.cluster.controls); a later call replaces it."""
        self._callbacks.frames = callback

    def on_reachability(self, callback: ReachabilityCallback) -> None:
        """Call `callback(peer, True)` when a link to the peer is established, `callback(peer, False)` when the
        link is lost (peer silent, BYE, socket closed, removed, stop). A replaced link gives False then True."""
        self._callbacks.reachability.append(callback)

    def on_connect(self, callback: ConnectCallback) -> None:
        """Call `callback(peer, host, port)` on every established link, with the listener the peer advertised
        (lets a node learn a joining node, whose connection it accepted, and dial it back later). Not called
        when the peer advertised no listener."""
        self._callbacks.connects.append(callback)

    def set_receiver(self, receiver: Receiver) -> None:
        """Metadata `Transport`: call `receiver(peer, data)` for every METADATA frame."""
        self._callbacks.receiver = receiver

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
            self._counters.unknown_peer += 1
            return False
        frame = encode_frame(frame_type, body)
        size = len(frame)
        if size - HEADER_SIZE > self.incoming_buffer:
            self._counters.oversized += 1
            self._counters.bytes_dropped += size
            self._logger(peer=peer).warning(
                "cluster frame too large, not sent",
                frame_type=frame_type.name,
                size=size - HEADER_SIZE,
                maximum=self.incoming_buffer,
            )
            return False
        conn = entry.active
        # a link that closed while its events are being delivered takes no more frames (they wait for the next)
        writable = conn is not None and not conn.paused and conn.link is not None and conn.link.closed is None
        offer = entry.outbox.offer(frame, writable)
        if offer is _REFUSED:
            self._counters.overflows += 1
            self._counters.bytes_dropped += size
            refused = entry.outbox.refusal(clock())
            if refused is not None:
                self._logger(peer=peer).warning(
                    "cluster outgoing buffer full, refusing frames",
                    refused_frames=refused,
                    buffered_bytes=entry.outbox.size,
                    limit=self.outgoing_buffer,
                    reachable=conn is not None,
                )
            return False
        if offer is _WRITE:
            assert conn is not None and conn.link is not None
            conn.write(conn.link.seal(frame))
            if flush:
                conn.flush()
            self._counters.frames_out += 1
        elif writable:
            self._links.drain(entry)
        return True

    # ---------------------------------------------------------------------------------------------- wiring

    def _new_link(self, peer: Peer | None, admit: Admit | None) -> Link:
        """The Link of a new connection: dialed to `peer`, or accepted (None) and then checked with `admit`."""
        return Link(
            self.own_name,
            self.incarnation,
            self._cookie,
            peer.name if peer is not None else None,
            secrets.token_bytes(NONCE_MIN),
            self.detect_timeout,
            self.incoming_buffer,
            now=clock(),
            listen=self._advertised(),
            handshake_timeout=self.handshake_timeout,
            admit=admit,
            intent=peer.intent if peer is not None else None,
        )

    def _schedule_dial(self, peer: Peer) -> None:
        self._dialer.schedule(peer)

    def _logger(self, **fields: Any) -> Any:
        return log.bind(node=self.own_name, **fields)

    # ---------------------------------------------------------------------------------------------- stats

    def stats(self) -> dict[str, int]:
        """Counters since start (all ints): those of `LinkCounters` (link_counters.py), then connections (open
        sockets), pending_links (accepted sockets before their handshake is done), reachable (peers with a link),
        buffered_frames / buffered_bytes (in all outgoing buffers)."""
        return {
            **self._counters.as_dict(),
            "connections": len(self._conns),
            "pending_links": self._pending.live,
            "reachable": sum(1 for peer in self._peers.values() if peer.active is not None),
            "buffered_frames": sum(len(peer.outbox) for peer in self._peers.values()),
            "buffered_bytes": sum(peer.outbox.size for peer in self._peers.values()),
        }

    def peer_stats(self) -> dict[str, dict[str, Any]]:
        """Per known peer: reachable, dial address, incarnation, buffered frames and bytes."""
        return {
            name: {
                "reachable": peer.active is not None,
                "address": f"{peer.address[0]}:{peer.address[1]}" if peer.address is not None else None,
                "incarnation": peer.incarnation,
                "buffered_frames": len(peer.outbox),
                "buffered_bytes": peer.outbox.size,
            }
            for name, peer in self._peers.items()
        }
