"""Which connection carries each peer's link: admits incoming links, keeps one link per pair of nodes, takes
links up and down as their connections report, writes a peer's outgoing buffer to its link, and tells the
callbacks (docs/cluster-links.md, "One link per pair", "Errors and what the log says").

`PeerLinks` is the `LinkHost` of every `LinkConnection` of a node; `ClusterNetwork` (tcp.py) owns it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, Final

import structlog

from vmqpy.cluster.connection import LinkConnection
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.handshake import Admit
from vmqpy.cluster.link import CloseCause, Closed, DataFrame, Established, Event, Link, PeerSilent
from vmqpy.cluster.link_callbacks import LinkCallbacks
from vmqpy.cluster.link_counters import LinkCounters
from vmqpy.cluster.peer import Peer

__all__ = ["DUPLICATE_LINK", "PEER_REMOVED", "REPLACED", "SHUTTING_DOWN", "NewLink", "PeerLinks"]

log = structlog.get_logger("vmqpy.cluster")

DUPLICATE_LINK: Final = "duplicate link"
SHUTTING_DOWN: Final = "node shutting down"
PEER_REMOVED: Final = "peer removed"
REPLACED: Final = "replaced by a newer link"

DRAIN_CHUNK: Final = 1 << 18  # bytes of buffered frames handed to the socket per write

#: ``new_link(peer, admit)``: the Link for a new connection (dialed to `peer`, or accepted when None).
NewLink = Callable[[Peer | None, Admit | None], Link]


class PeerLinks:
    """The peers of one node (by name) and their links; the open connections.

    `new_link` builds the Link of a connection; `redial(peer)` is called when a peer has neither a link nor a
    connection shaking hands any more (the dialer decides whether and when to dial it again).
    """

    def __init__(
        self,
        own_name: str,
        *,
        outgoing_buffer: int,
        detect_timeout: float,
        handshake_timeout: float,
        counters: LinkCounters,
        callbacks: LinkCallbacks,
        new_link: NewLink,
        redial: Callable[[Peer], None],
    ) -> None:
        self.own_name = own_name
        self.outgoing_buffer = outgoing_buffer
        self.detect_timeout = detect_timeout
        self.handshake_timeout = handshake_timeout
        self.counters = counters
        self.callbacks = callbacks
        self.peers: dict[str, Peer] = {}
        self.conns: set[LinkConnection] = set()  # open sockets
        self.running = False  # new connections are aborted and dialers refused while False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._new_link = new_link
        self._redial = redial

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise ClusterUsageError("the cluster network is not started")
        return self._loop

    @loop.setter
    def loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # ---------------------------------------------------------------------------------------------- connections

    def open_link(self, conn: LinkConnection) -> Link | None:
        """`conn`'s socket is connected: the link to run on it, or None to abort the socket (not running; the
        peer we dialed was removed, or a link to it came up, while we were connecting)."""
        self.conns.add(conn)
        if not self.running:
            return None
        peer = conn.peer
        if peer is not None:
            if peer.removed or peer.active is not None:
                return None
            peer.dialing = conn
        return self._new_link(peer, None if conn.outgoing else functools.partial(self._admit, conn))

    def socket_closed(self, conn: LinkConnection) -> None:
        self.conns.discard(conn)
        if conn.pending is not None:
            conn.pending.release()

    def resumed(self, conn: LinkConnection) -> None:
        """`conn`'s socket takes bytes again: write the buffered frames if it carries its peer's link."""
        peer = conn.peer
        if peer is not None and peer.active is conn:
            self.drain(peer)

    def drain(self, peer: Peer) -> None:
        """Write the peer's buffered frames to its link, in order, until the socket pauses."""
        conn = peer.active
        outbox = peer.outbox
        if conn is None or conn.link is None:
            return
        link = conn.link
        while outbox and not conn.paused and not conn.dead and link.closed is None:  # each turn takes a frame
            chunk = outbox.take(DRAIN_CHUNK)
            conn.write(link.seal_all(chunk))
            conn.flush()  # the transport pauses us synchronously when its buffer passes the high-water mark
            self.counters.frames_out += len(chunk)

    def _admit(self, conn: LinkConnection, name: str, incarnation: int, intent: str | None) -> str | None:
        """Acceptor: the dialer `name` proved the cookie; keep this link (None) or refuse it (reason)?

        First the admission callback (membership: is the dialer one of ours?). Then one link per pair: between
        our own pending outgoing connection and this one, keep the connection dialed by the smaller name (both
        sides decide alike). An established link from an older incarnation,
        or one the peer dialed again (it gave the old one up), is replaced.
        """
        if not self.running:
            return SHUTTING_DOWN
        refusal = self.callbacks.admit(name, incarnation, intent)
        if refusal is not None:
            return refusal
        peer = self.peers.get(name)
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

    def handle_events(self, conn: LinkConnection, events: list[Event]) -> None:
        """What the link of `conn` reported, in order."""
        for event in events:
            if conn.dead and not isinstance(event, Closed):
                continue  # a callback closed the link: drop the rest
            if type(event) is DataFrame:
                self._on_message(conn, event)
            elif isinstance(event, Established):
                self._on_established(conn, event)
            elif isinstance(event, PeerSilent):
                self.counters.silent_peers += 1
                self._logger(peer=self._conn_peer(conn)).warning(
                    "cluster peer silent", silent_for=round(event.silent_for, 3), detect_timeout=self.detect_timeout
                )
            elif isinstance(event, Closed):
                self._on_closed(conn, event)

    def _on_message(self, conn: LinkConnection, message: DataFrame) -> None:
        peer = conn.peer
        if peer is None:
            return
        self.counters.frames_in += 1
        if message.type is FrameType.METADATA:
            if not self.callbacks.metadata(peer.name, message.body):
                self.counters.metadata_dropped += 1
            return
        self.callbacks.message(peer.name, message.type, message.body)

    def _on_established(self, conn: LinkConnection, event: Established) -> None:
        name = event.peer_name
        peer = self.peers.get(name)
        if peer is None:
            peer = self.peers[name] = Peer(name, None, self.outgoing_buffer)
        conn.peer = peer
        if conn.pending is not None:  # authenticated: no longer a stranger's socket
            conn.pending.release()
        if peer.dialing is conn:
            peer.dialing = None
        old = peer.active
        peer.active = conn
        peer.incarnation = event.peer_incarnation
        peer.attempts = 0
        peer.was_up = True
        self.counters.links_up += 1
        if peer.reconnect is not None:
            peer.reconnect.cancel()
            peer.reconnect = None
        if old is not None and old is not conn:
            old.peer = None  # its Closed must not touch the peer any more
            self._logger(peer=name).info("cluster link replaced", remote=old.remote)
            self.counters.links_down += 1
            self.callbacks.reachable(name, False)
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
            buffered_frames=len(peer.outbox),
        )
        self.drain(peer)
        if listen is not None:
            self.callbacks.connected(name, listen[0], listen[1], lambda: peer.active is conn)
        if peer.active is conn:
            self.callbacks.reachable(name, True)

    def _on_closed(self, conn: LinkConnection, event: Closed) -> None:
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
            self.counters.duplicate_links += event.reason == DUPLICATE_LINK
            logger.info("cluster connection not kept", direction="outgoing" if conn.outgoing else "incoming", **fields)
        elif event.cause is CloseCause.REFUSED:
            self.counters.handshakes_refused += 1
            logger.warning("cluster link refused", direction="outgoing" if conn.outgoing else "incoming", **fields)
            if event.verified and conn.outgoing and name is not None:
                self.callbacks.refused(name, event.reason)
        elif event.cause is CloseCause.PROTOCOL_ERROR:
            self.counters.malformed_frames += 1
            logger.warning("malformed cluster frame, link closed", established=established, **fields)
        elif event.cause is CloseCause.UNAUTHENTICATED:  # frame_auth.py: someone on the path altered the stream
            self.counters.malformed_frames += 1
            logger.warning("cluster frame authentication failed, link closed", **fields)
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
            self.counters.links_down += 1
            self.callbacks.reachable(peer.name, False)
        if peer.active is None and peer.dialing is None:
            self._redial(peer)

    @staticmethod
    def _conn_peer(conn: LinkConnection) -> str | None:
        if conn.peer is not None:
            return conn.peer.name
        link = conn.link
        if link is None:
            return None
        return link.peer_name or link.claimed_peer_name

    def _logger(self, **fields: Any) -> Any:
        return log.bind(node=self.own_name, **fields)
