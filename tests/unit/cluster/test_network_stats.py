"""The names and order of `ClusterNetwork.stats()` (shown with a `links.` prefix by `vmq-admin metrics show`),
and what it reports before the network started: no socket is opened here."""

from __future__ import annotations

from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.tcp import ClusterNetwork

from .helpers import COOKIE

NAMES = [
    "frames_in", "frames_out", "bytes_in", "bytes_out", "overflows", "oversized", "unknown_peer",
    "handshakes_refused", "duplicate_links", "malformed_frames", "silent_peers", "links_up", "links_down",
    "reconnects", "dial_attempts", "dial_failures", "metadata_dropped", "bytes_dropped", "pending_refused",
    "pending_refused_address", "connections", "pending_links", "reachable", "buffered_frames", "buffered_bytes",
]


def test_stats_names_and_order() -> None:
    net = ClusterNetwork("a", 1, COOKIE, ("127.0.0.1", 0))
    assert list(net.stats()) == NAMES


def test_frames_before_start_are_refused_and_counted() -> None:
    net = ClusterNetwork("a", 1, COOKIE, ("127.0.0.1", 0))
    net.add_peer("b", "127.0.0.1", 1)
    assert net.room("b") == 0
    assert not net.send_frame("b", FrameType.METADATA, b"x")  # not running
    net.send("c", b"x")  # not even known
    assert net.stats()["unknown_peer"] == 2
    assert net.peer_stats() == {
        "b": {"reachable": False, "address": "127.0.0.1:1", "incarnation": None, "buffered_frames": 0,
              "buffered_bytes": 0}
    }
