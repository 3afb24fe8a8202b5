"""Recent cluster events of one node, for the status page: members joining and leaving, netsplits detected and
resolved, sessions whose owner moved to another node (`session_moved`: a client that connected there, which may
be a takeover, or a handover when a node leaves; "takeover" is the metric's word alone, docs/operations.md).

A bounded ring (the newest `capacity` events, oldest dropped first), kept in memory only: a restarted node
starts with an empty list. Each event is a plain dict `{"at": <unix seconds>, "kind": ..., "detail": ...}`
so that it travels as JSON unchanged. node.py feeds it from three places it already watches: the store's
membership and session records (`on_membership`, `on_session`) and the cluster view (`on_view`). The clock is
an argument, so the adapters are table-tested without waiting.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from vmqpy.cluster.view import View
from vmqpy.sessions import records

__all__ = ["CAPACITY", "KINDS", "ClusterEvents"]

CAPACITY: Final = 50
KINDS: Final = ("member_joined", "member_left", "netsplit_detected", "netsplit_resolved", "session_moved")

Event = dict[str, Any]


class ClusterEvents:
    """The newest `capacity` events, oldest first in `recent()`."""

    def __init__(self, capacity: int = CAPACITY, clock: Callable[[], float] = time.time) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._events: deque[Event] = deque(maxlen=capacity)
        self._clock = clock

    def record(self, kind: str, detail: str, at: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown cluster event kind {kind!r} (one of {', '.join(KINDS)})")
        self._events.append({"at": self._clock() if at is None else at, "kind": kind, "detail": detail})

    def recent(self) -> list[Event]:
        return [dict(event) for event in self._events]

    # -- adapters for the hooks node.py installs --------------------------------------------------------------

    def on_membership(self, key: Any, old: Any, new: Any) -> None:
        """A membership record changed in the store (metadata `on_change`): a join or a leave."""
        name = str(key[0]) if isinstance(key, tuple | list) and key else str(key)
        if old is None and new is not None:
            self.record("member_joined", f"{name} joined the cluster")
        elif old is not None and new is None:
            self.record("member_left", f"{name} left the cluster")

    def on_session(self, key: Any, old: Any, new: Any) -> None:
        """A session owner record changed: when its owner moved from one node to another, a session move."""
        if old is None or new is None:
            return
        before, after = records.session_owner(old), records.session_owner(new)
        if before != after:
            client = str(key[1]) if isinstance(key, tuple | list) and len(key) > 1 else str(key)
            self.record("session_moved", f"the session of client {client!r} moved from {before} to {after}")

    def on_view(self, old: View | None, new: View) -> None:
        """The cluster view changed: a netsplit is detected when the node stops being ready (the detail names
        the members it does not reach), resolved when it is ready again."""
        was_ready = True if old is None else old.ready
        if was_ready and not new.ready:
            missing = sorted(set(new.members) - set(new.reachable))
            self.record("netsplit_detected", f"{new.node} does not reach {', '.join(missing)}")
        elif not was_ready and new.ready:
            self.record("netsplit_resolved", f"{new.node} reaches all {len(new.members)} members again")
