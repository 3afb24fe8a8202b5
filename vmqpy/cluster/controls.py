"""Who handles each frame that arrives on the node links: one table, filled by node.py.

A FORWARD, REPLICA or REACHABILITY frame goes to the one handler registered for its frame type; a CONTROL frame
(a msgpack map with an `op`) goes to the one handler registered for its op. A second handler for a frame type or
an op is refused (`ClusterUsageError`): one frame, one handler, never a chain where every handler filters for
itself. A CONTROL op nobody registered comes from a peer of a newer version (or of a feature this node runs
without): it is dropped, counted per op in `dropped`, and logged at warning once per op.

The services say what they take (`ClusterService.control_ops`, `ForwardDriver.control_ops`, `Departure.CONTROL_OPS`,
...); node.py registers them, and hands `deliver` to the links as their one message callback.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import structlog

from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import FrameType

__all__ = ["ControlHandler", "ControlTable", "FrameHandler"]

log = structlog.get_logger("vmqpy.cluster")

#: ``handler(peer, body)`` for a CONTROL frame whose op it registered (`body` is the frame's map, `op` included).
ControlHandler = Callable[[str, dict[str, Any]], None]
#: ``handler(peer, body)`` for a FORWARD, REPLICA or REACHABILITY frame.
FrameHandler = Callable[[str, Any], None]

#: the frame types a handler may be registered for (CONTROL goes by its op; the others are the links' own)
ROUTED: Final = frozenset({FrameType.FORWARD, FrameType.REPLICA, FrameType.REACHABILITY})


class ControlTable:
    """(frame type) -> handler and (CONTROL op) -> handler for the frames of one node (`node` names it in the log)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.dropped: Counter[str] = Counter()  # CONTROL frames no handler took, per op
        self._ops: dict[str, ControlHandler] = {}
        self._frames: dict[FrameType, FrameHandler] = {}

    def add(self, op: str, handler: ControlHandler) -> None:
        """`handler` takes every CONTROL frame of `op`; a second handler for one op is refused."""
        if op in self._ops:
            raise ClusterUsageError(f"CONTROL op {op!r} has a handler already")
        self._ops[op] = handler

    def add_ops(self, ops: Mapping[str, ControlHandler]) -> None:
        """Each op of `ops` with its handler (`add`)."""
        for op, handler in ops.items():
            self.add(op, handler)

    def add_all(self, ops: Iterable[str], handler: ControlHandler) -> None:
        """One handler for several ops (a service that tells them apart itself, by the op in the body)."""
        for op in ops:
            self.add(op, handler)

    def add_frame(self, frame_type: FrameType, handler: FrameHandler) -> None:
        """`handler` takes every frame of `frame_type` (FORWARD, REPLICA or REACHABILITY); one per type."""
        if frame_type not in ROUTED:
            raise ClusterUsageError(f"{frame_type!r} frames are not routed by type")
        if frame_type in self._frames:
            raise ClusterUsageError(f"{frame_type.name} frames have a handler already")
        self._frames[frame_type] = handler

    def ops(self) -> frozenset[str]:
        """The CONTROL ops that have a handler."""
        return frozenset(self._ops)

    def deliver(self, peer: str, frame_type: FrameType, body: Any) -> None:
        """A frame from `peer` to its one handler (the links' message callback); a type nobody took is dropped."""
        if frame_type is not FrameType.CONTROL:
            frame_handler = self._frames.get(frame_type)
            if frame_handler is not None:
                frame_handler(peer, body)
            return
        if not isinstance(body, dict):
            return  # not a CONTROL map: nothing to route it by
        op = body.get("op")
        handler = self._ops.get(op) if isinstance(op, str) else None
        if handler is not None:
            handler(peer, body)
            return
        name = str(op)
        if name not in self.dropped:
            log.warning("CONTROL op nobody handles: dropped (a peer of a newer version?)", node=self.node, peer=peer,
                        op=name)
        self.dropped[name] += 1
