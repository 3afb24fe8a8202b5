"""Who hears what the node links report: the callbacks registered with a `ClusterNetwork`, and their calls.

All callbacks run on the event loop, synchronously, and must not block. One that raises is logged (error, with
its traceback) and the link goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from vmqpy.cluster.framing import FrameType

__all__ = [
    "Admission",
    "ConnectCallback",
    "LinkCallbacks",
    "MessageCallback",
    "ReachabilityCallback",
    "Receiver",
    "RefusedCallback",
]

log = structlog.get_logger("vmqpy.cluster")

#: ``callback(peer, frame_type, body)`` for every FORWARD, REPLICA, CONTROL and REACHABILITY frame (one callback:
#: the node's control table, vmqpy.cluster.controls).
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


class LinkCallbacks:
    """The callbacks of one node's links (`node` names it in the log lines of failed callbacks)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.frames: MessageCallback | None = None  # the one callback of the data frames other than METADATA
        self.reachability: list[ReachabilityCallback] = []
        self.connects: list[ConnectCallback] = []
        self.refusals: list[RefusedCallback] = []
        self.receiver: Receiver | None = None
        self.admission: Admission | None = None

    def admit(self, peer: str, incarnation: int, intent: str | None) -> str | None:
        """The admission's answer for a dialer that proved the cookie (None, accepted, without an admission)."""
        return None if self.admission is None else self.admission(peer, incarnation, intent)

    def metadata(self, peer: str, data: bytes) -> bool:
        """A METADATA frame to the receiver; False when there is none yet (the frame is dropped)."""
        receiver = self.receiver
        if receiver is None:
            return False
        try:  # not through _call: this is the path of every replicated write
            receiver(peer, data)
        except Exception:
            log.exception("metadata receiver failed", node=self.node, peer=peer)
        return True

    def message(self, peer: str, frame_type: FrameType, body: Any) -> None:
        """A FORWARD, REPLICA, CONTROL or REACHABILITY frame to the one frame callback (dropped when there is none)."""
        frames = self.frames
        if frames is None:
            return
        try:  # not through _call: this is the path of every forward and acknowledgement
            frames(peer, frame_type, body)
        except Exception:
            log.exception("cluster message callback failed", node=self.node, peer=peer)

    def reachable(self, peer: str, reachable: bool) -> None:
        for callback in list(self.reachability):
            self._call("cluster reachability callback failed", peer, callback, peer, reachable)

    def connected(self, peer: str, host: str, port: int, current: Callable[[], bool]) -> None:
        """The peer advertised its listener on a new link; stops early once `current()` is False (a callback
        closed or replaced that link)."""
        for callback in list(self.connects):
            if not current():
                break
            self._call("cluster connect callback failed", peer, callback, peer, host, port)

    def refused(self, peer: str, reason: str) -> None:
        for callback in list(self.refusals):
            self._call("cluster refusal callback failed", peer, callback, peer, reason)

    def _call(self, failure: str, peer: str, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:
            log.exception(failure, node=self.node, peer=peer)
