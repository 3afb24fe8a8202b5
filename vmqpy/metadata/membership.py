"""The cluster as one replica sees it: its members, the ones it can reach now, the digest of its membership
view, and the watermark of what each member is known to hold (which decides what GC may forget).

New members enter the watermark at 0 (nothing they lack is collected until they caught up); removed ones
are retired (their column is dropped, so GC proceeds without them; their row stays while their dots live
in the data).  With ``reset_watermark``, a membership change also forgets what peers reported under the
old view (docs/replication.md section 4).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dvv.node_clock import NodeClock
from dvv.watermark import Watermark
from vmqpy.metadata.errors import InvalidKeyError
from vmqpy.metadata.messages import view_digest

__all__ = ["Change", "Membership"]


@dataclass(frozen=True, slots=True)
class Change:
    """What a membership change did."""

    added: list[str]
    removed: list[str]
    usable_before: list[str]  # the members that were reachable before it


class Membership:
    """Members, reachable peers, membership view and watermark of replica ``node``."""

    __slots__ = ("_persisted", "_sent", "_usable", "members", "node", "peers", "reachable", "view", "watermark")

    def __init__(self, node: str) -> None:
        self.node = node
        self.peers: list[str] = []  # the members other than this node, sorted
        self.members: frozenset[str] = frozenset((node,))
        self.view = view_digest(self.members)  # sent with every exchange message
        self.reachable: frozenset[str] = frozenset()
        self._usable: list[str] | None = None
        self.watermark = Watermark.new([node])
        self._persisted: Watermark | None = None  # the watermark last saved
        self._sent: dict[str, Watermark] = {}  # the watermark last sent to each peer

    def restore(self, watermark: Watermark) -> None:
        """Start from a saved watermark: its peers are the members."""
        self.watermark = self._persisted = watermark
        self._set_peers(sorted(p for p in watermark.peers() if p != self.node))

    def _set_peers(self, peers: list[str]) -> None:
        self.peers = peers
        self.members = frozenset((self.node, *peers))
        self.view = view_digest(self.members)

    def change(self, peers: Iterable[str], *, reset_watermark: bool) -> Change | None:
        """The members other than this node are now ``peers`` (None: they already were)."""
        new = sorted({p for p in peers if p != self.node})
        for p in new:
            if not isinstance(p, str):
                raise InvalidKeyError(f"peer ids are str, got {p!r}")
        old = set(self.peers)
        added = [p for p in new if p not in old]
        removed = [p for p in self.peers if p not in set(new)]
        if not added and not removed:
            return None
        usable_before = self.usable()
        wm = self.watermark
        members = [self.node, *new]
        for p in removed:
            wm = wm.retire_peer(p)
        for p in added:
            if p in wm.retired():
                wm = wm.remove_peer(p)
            wm = wm.add_peer(p, members)
        if reset_watermark:
            wm = wm.reset()  # what peers reported under the old view no longer counts (section 4)
        self.watermark = wm
        self._set_peers(new)
        self._usable = None
        return Change(added, removed, usable_before)

    def reach(self, peers: Iterable[str]) -> list[str]:
        """This node can reach ``peers`` now.  Returns the members it could reach before."""
        usable_before = self.usable()
        self.reachable = frozenset(p for p in peers if p != self.node)
        self._usable = None
        return usable_before

    def usable(self) -> list[str]:
        """Members this node can reach now, sorted (cached: membership and reachability change rarely)."""
        if self._usable is None:
            self._usable = [p for p in self.peers if p in self.reachable]
        return self._usable

    def reachable_member(self, peer: str) -> bool:
        return peer in self.members and peer in self.reachable

    # -- watermark ------------------------------------------------------------------------------------
    def learn(self, peer: str, clock: NodeClock) -> None:
        """``peer`` holds every dot of ``clock``."""
        self.watermark = self.watermark.update_peer(peer, clock)

    def adopt(self, other: Watermark) -> None:
        """Merge another node's watermark (only the rules before docs/replication.md section 4 do)."""
        self.watermark = self.watermark.left_join(other)

    def prepare_gc(self, nodes: Iterable[str], clock: NodeClock) -> None:
        """Give every one of ``nodes`` (the nodes with dots awaiting GC) a watermark row (unknown nodes: a
        retired row), and record that this node holds ``clock``."""
        wm = self.watermark
        known = set(wm.peers()) | set(wm.retired())
        unknown = [n for n in nodes if n not in known]
        if unknown:
            cols = dict.fromkeys(wm.peers(), 0)
            retired = wm.retired_rows()
            for n in unknown:
                retired[n] = dict(cols)
            wm = Watermark(wm.active_rows(), retired)
        self.watermark = wm.update_peer(self.node, clock)

    def unsaved(self) -> Watermark | None:
        """The watermark, when it changed since it was last returned here (the caller saves it)."""
        if self.watermark == self._persisted:
            return None
        self._persisted = self.watermark
        return self.watermark

    def unsent(self, peer: str) -> Watermark | None:
        """The watermark, when it changed since it was last returned here for ``peer`` (it only speeds GC up:
        each exchange already tells both sides the other's clock)."""
        if self._sent.get(peer) == self.watermark:
            return None
        self._sent[peer] = self.watermark
        return self.watermark
