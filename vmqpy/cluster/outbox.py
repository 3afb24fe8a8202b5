"""The outgoing buffer of one peer: which frames to write now, which wait for the link, which are refused.

Pure: frames and the state of the peer's link (up and writable, or not) go in; what to write, or that the frame
was refused, comes out. No asyncio, no sockets; time is an argument.

The rules (docs/cluster-links.md, "Buffering"):

* a frame for a link that is up and writable, with nothing waiting before it, is written at once;
* otherwise it waits here, after every frame before it, as long as the waiting frames stay within `limit`
  bytes (wire bytes); a frame that does not fit is refused, and the sender learns it (`send_frame` returns
  False) instead of the frame being dropped silently;
* waiting frames leave in order (`take`), before any newer frame;
* refusals are reported to the log at most once per `report_interval` seconds, with how many frames were
  refused since the previous report.
"""

from __future__ import annotations

import enum
import sys
from collections import deque
from typing import Final

__all__ = ["REPORT_INTERVAL", "Offer", "PeerOutbox"]

REPORT_INTERVAL: Final = 10.0  # at most one "buffer full" report per peer per this many seconds


class Offer(enum.Enum):
    """What becomes of a frame offered to the outbox."""

    WRITE = "write"  # write it to the link now: nothing waits before it
    QUEUED = "queued"  # it waits in the outbox (write the outbox out while the link is writable)
    REFUSED = "refused"  # the outbox is full: the frame is not sent


class PeerOutbox:
    """Frames waiting for one peer's link, at most `limit` bytes of them."""

    __slots__ = ("_frames", "_refused", "_report_interval", "_reported_at", "_size", "limit")

    def __init__(self, limit: int, report_interval: float = REPORT_INTERVAL) -> None:
        self.limit = limit
        self._frames: deque[bytes] = deque()
        self._size = 0
        self._report_interval = report_interval
        self._reported_at = -report_interval  # the first refusal is reported at once
        self._refused = 0  # frames refused since the last report

    def __len__(self) -> int:
        """Frames waiting."""
        return len(self._frames)

    @property
    def size(self) -> int:
        """Bytes waiting."""
        return self._size

    def room(self, writable: bool) -> int:
        """Bytes of frames the outbox takes now: unbounded while the link is `writable` and nothing waits (they
        are written at once), what is left of `limit` otherwise."""
        if writable and not self._frames:
            return sys.maxsize
        return max(0, self.limit - self._size)

    def offer(self, frame: bytes, writable: bool) -> Offer:
        """Offer one frame; `writable`: the peer's link is up and its socket takes bytes."""
        if writable and not self._frames:
            return Offer.WRITE
        if self._size + len(frame) > self.limit:
            return Offer.REFUSED
        self._frames.append(frame)
        self._size += len(frame)
        return Offer.QUEUED

    def take(self, chunk: int) -> list[bytes]:
        """The oldest waiting frames, in order, until they reach `chunk` bytes (at least one frame, none when
        nothing waits); they no longer wait."""
        frames = self._frames
        taken: list[bytes] = []
        size = 0
        while frames and size < chunk:
            frame = frames.popleft()
            taken.append(frame)
            size += len(frame)
        self._size -= size
        return taken

    def clear(self) -> None:
        """Drop every waiting frame."""
        self._frames.clear()
        self._size = 0

    def refusal(self, now: float) -> int | None:
        """Count one refused frame. When a report is due (none in the last `report_interval` seconds): the
        number of frames refused since the previous report, this one included; else None."""
        self._refused += 1
        if now - self._reported_at < self._report_interval:
            return None
        refused, self._refused = self._refused, 0
        self._reported_at = now
        return refused
