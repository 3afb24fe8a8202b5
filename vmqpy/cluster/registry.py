"""The leader's side of registration: one lock per client id, granted to one registering node at a time.

A node that registers a CONNECT asks the client id's leader for its lock, does the takeover while it holds it,
and releases it naming the new owner. Requests for a held lock wait in arrival order. A lock whose holder
went silent is taken back after its lease, or at once when the holder becomes unreachable, so a dead node
cannot block a client id. The leader remembers the owner named at each release, which may be fresher than
its replica of the store, and hands it to the next holder.

Pure: requests, releases and `now` in; grants out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LEASE = 10.0
MAX_WAITING = 1000
MAX_OWNERS = 100_000


@dataclass(frozen=True, slots=True)
class Grant:
    """The lock of `client_id` now belongs to `request` of `node`; `owner` is the last owner the leader knows,
    `stamp` the stamp of that owner's record (None when unknown)."""

    client_id: str
    node: str
    request: int
    owner: str | None
    stamp: Any = None


@dataclass(slots=True)
class _Hold:
    node: str
    request: int
    deadline: float


class Busy(Exception):
    """Too many registrations of one client id are waiting."""


class Registry:
    def __init__(self, lease: float = LEASE, max_waiting: int = MAX_WAITING) -> None:
        self.lease = lease
        self.max_waiting = max_waiting
        self.held: dict[str, _Hold] = {}
        self.waiting: dict[str, deque[tuple[str, int]]] = {}
        self.owners: dict[str, tuple[str, Any]] = {}  # client id -> (owner, stamp of its owner record)
        self.expired = 0

    def request(self, client_id: str, node: str, request: int, now: float) -> list[Grant]:
        """`node` asks for the lock of `client_id`; the grant comes now or when the lock is free (Busy when
        the waiting line is full)."""
        if client_id not in self.held:
            return [self._grant(client_id, node, request, now)]
        line = self.waiting.setdefault(client_id, deque())
        if len(line) >= self.max_waiting:
            raise Busy(client_id)
        line.append((node, request))
        return []

    def release(self, client_id: str, node: str, request: int, owner: str | None, now: float,
                stamp: Any = None) -> list[Grant]:
        """The holder is done; `owner` is where the client id lives now (None: the connect failed before it
        registered), `stamp` the stamp of the owner record it wrote. A release of a lock not held is ignored."""
        hold = self.held.get(client_id)
        if hold is None or hold.node != node or hold.request != request:
            self._drop_waiting(client_id, lambda n, r: n == node and r == request)
            return []
        if owner is not None:
            self._remember(client_id, owner, stamp)
        del self.held[client_id]
        return self._next(client_id, now)

    def node_down(self, node: str, now: float) -> list[Grant]:
        """`node` is unreachable: its locks are free and its waiting requests are dropped."""
        grants: list[Grant] = []
        for client_id in [c for c, line in self.waiting.items() if any(n == node for n, _r in line)]:
            self._drop_waiting(client_id, lambda n, _r: n == node)
        for client_id in [c for c, hold in self.held.items() if hold.node == node]:
            del self.held[client_id]
            grants.extend(self._next(client_id, now))
        return grants

    def expire(self, now: float) -> list[Grant]:
        """Take back the locks whose lease ran out."""
        grants: list[Grant] = []
        for client_id in [c for c, hold in self.held.items() if hold.deadline <= now]:
            del self.held[client_id]
            self.expired += 1
            grants.extend(self._next(client_id, now))
        return grants

    def next_deadline(self) -> float | None:
        return min((hold.deadline for hold in self.held.values()), default=None)

    def note_record(self, client_id: str, owner: str, stamp: Any) -> None:
        """An owner record reached the leader's replica: a newer one than the owner it remembers (the session
        moved without a registration: a node left, a duplicate was resolved) replaces it."""
        known = self.owners.get(client_id)
        if known is not None and _newer(stamp, known[1]):
            self.owners[client_id] = (owner, stamp)

    # ------------------------------------------------------------------------------------------ internals

    def _grant(self, client_id: str, node: str, request: int, now: float) -> Grant:
        self.held[client_id] = _Hold(node, request, now + self.lease)
        known = self.owners.get(client_id)
        return Grant(client_id, node, request, None, None) if known is None else Grant(client_id, node, request, *known)

    def _next(self, client_id: str, now: float) -> list[Grant]:
        line = self.waiting.get(client_id)
        if not line:
            self.waiting.pop(client_id, None)
            return []
        node, request = line.popleft()
        if not line:
            del self.waiting[client_id]
        return [self._grant(client_id, node, request, now)]

    def _drop_waiting(self, client_id: str, match: Callable[[str, int], bool]) -> None:
        line = self.waiting.get(client_id)
        if line is None:
            return
        kept = deque(item for item in line if not match(*item))
        if kept:
            self.waiting[client_id] = kept
        else:
            del self.waiting[client_id]

    def _remember(self, client_id: str, owner: str, stamp: Any) -> None:
        self.owners.pop(client_id, None)
        self.owners[client_id] = (owner, stamp)
        if len(self.owners) > MAX_OWNERS:
            del self.owners[next(iter(self.owners))]


def _newer(stamp: Any, than: Any) -> bool:
    """Stamps are HLC lists [wall, logical, node]; an unknown stamp is never newer and always older."""
    if stamp is None:
        return False
    if than is None:
        return True
    try:
        return bool(list(stamp) > list(than))
    except TypeError:
        return False


__all__ = ["Busy", "Grant", "Registry"]
