"""The counters of one node's links since its network started (`ClusterNetwork.stats()`, docs/cluster-links.md)."""

from __future__ import annotations

import dataclasses

__all__ = ["LinkCounters"]


@dataclasses.dataclass(slots=True)
class LinkCounters:
    """Every field counts up from 0; `as_dict` gives them in this order, under these names."""

    frames_in: int = 0  # data frames received (handshake, heartbeat and BYE frames are not counted)
    frames_out: int = 0  # data frames written to sockets
    bytes_in: int = 0  # all bytes read from sockets
    bytes_out: int = 0  # all bytes written to sockets
    overflows: int = 0  # frames refused because a peer's outgoing buffer was full
    oversized: int = 0  # frames refused for exceeding the maximum frame size
    unknown_peer: int = 0  # frames refused for a peer that is not known (or while not running)
    handshakes_refused: int = 0  # by us or by the peer (wrong cookie, name mismatch, self connection, ...)
    duplicate_links: int = 0  # connections refused to keep one link per pair
    malformed_frames: int = 0  # connections closed for a protocol error (length, msgpack, version, type, body)
    silent_peers: int = 0  # links closed because the peer was silent for detect_timeout
    links_up: int = 0  # links established
    links_down: int = 0  # links lost
    reconnects: int = 0  # dial attempts after a failed attempt or a lost link
    dial_attempts: int = 0  # TCP connects tried
    dial_failures: int = 0  # TCP connects failed
    metadata_dropped: int = 0  # METADATA frames received before set_receiver
    bytes_dropped: int = 0  # bytes of data frames not sent: refused (buffer full, too large) or buffered for a
    #                         peer and dropped (the peer was removed, the network stopped)
    pending_refused: int = 0  # accepted sockets closed at once: cluster.max_pending_links were before their handshake
    pending_refused_address: int = 0  # the same: their address held cluster.max_pending_links_per_address

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)
