"""The one error root of the node-to-node link layer, with the blame in the type.

`ClusterProtocolError`: the peer (or whatever is at the other end of the socket) sent bytes that break the
link protocol. Every subclass carries a `reason` string meant for the log line; the link is closed after it.
`ClusterUsageError`: we misused the API (sending before the handshake, a body that does not fit its frame
type, a bad constructor argument). It is a bug on our side, never caused by input from the network.

Handshake refusals (wrong cookie, name mismatch, ...) are not exceptions: they are results of the sans-I/O
handshake (`vmqpy.cluster.handshake.LinkRefused`) and close the link with a reason.
"""

from __future__ import annotations

__all__ = [
    "ClusterError",
    "ClusterProtocolError",
    "ClusterUsageError",
    "CommandRefused",
    "FrameTooLarge",
    "MalformedFrame",
    "UndecodableFrame",
    "UnknownFrameType",
    "UnsupportedVersion",
]


class ClusterError(Exception):
    """Root of every error raised on purpose by vmqpy.cluster."""


class CommandRefused(ClusterError):
    """An operator's cluster command (join, leave) that cannot be done; the message names the cause, `status`
    is the HTTP status the admin API answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ClusterProtocolError(ClusterError):
    """The remote end broke the link protocol. `reason` is a short text for the log; the link is closed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FrameTooLarge(ClusterProtocolError):
    """A length prefix announces more than the maximum frame size (raised before any of the body is read)."""

    def __init__(self, size: int, maximum: int, *, authenticated: bool = True) -> None:
        before = "" if authenticated else " before the link is authenticated"
        super().__init__(f"frame of {size} bytes exceeds the maximum frame size of {maximum} bytes{before}")
        self.size = size
        self.maximum = maximum


class UndecodableFrame(ClusterProtocolError):
    """The frame's payload is not one valid msgpack object (or holds msgpack extension types)."""


class MalformedFrame(ClusterProtocolError):
    """Valid msgpack that is not `[version, type, body]`, or a body of the wrong shape for its type."""


class UnsupportedVersion(ClusterProtocolError):
    """The frame's protocol version is not ours."""

    def __init__(self, version: int, supported: int) -> None:
        super().__init__(f"unsupported protocol version {version} (this node speaks {supported})")
        self.version = version


class UnknownFrameType(ClusterProtocolError):
    """The frame's type is not one of `FrameType`."""

    def __init__(self, frame_type: int) -> None:
        super().__init__(f"unknown frame type {frame_type}")
        self.frame_type = frame_type


class ClusterUsageError(ClusterError):
    """We misused the API: e.g. `Link.send` before the link is established, or a body that cannot be encoded."""
