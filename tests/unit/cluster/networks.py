"""`RecordingNetwork`: the cluster network a ForwardDriver sends through, recording what it sends (the forward
driver's and the replica transport's tests)."""

from __future__ import annotations

from typing import Any

from vmqpy.cluster.forwarding import unpack_batch
from vmqpy.cluster.framing import FrameType


class RecordingNetwork:
    """The cluster network as a forward driver sends through it: records the frames sent; `free` is the room every
    peer has, `refuse` makes every send fail."""

    def __init__(self, room: int = 1 << 40, max_frame: int = 1 << 20) -> None:
        self.frames: list[tuple[str, FrameType, Any]] = []
        self.free = room
        self.largest = max_frame
        self.refuse = False

    def send_frame(self, peer: str, type: FrameType, body: Any, *, flush: bool = False) -> bool:
        if self.refuse:
            return False
        self.frames.append((peer, type, body))
        return True

    def room(self, peer: str) -> int:
        return self.free

    @property
    def max_frame(self) -> int:
        return self.largest

    def batches(self, peer: str = "n2") -> list[tuple[int, int, list[tuple[int, Any]]]]:
        return [unpack_batch(body) for p, t, body in self.frames if p == peer and t is FrameType.FORWARD]
