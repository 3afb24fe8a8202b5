"""The write and merge path of a replica: local writes, and merging a container that a peer sent.

:class:`ReplicaWrites` is :class:`~vmqpy.metadata.state.ReplicaState` plus the two ways a key's object changes: a
local ``put``/``delete`` (a new dot over everything this node has seen of the key, pushed to the reachable peers)
and ``_apply`` (a filled remote container merged into the stored one, the new dots indexed, the versions that lost
their place kept indexed until GC).  Both keep the object stripped at rest, persist its row and report the change
(``Changed``, ``Logged``).  :class:`~vmqpy.metadata.replica.Replica` adds what drives them: messages, exchanges,
membership, timers and GC (design: ``docs/replication.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack

from dvv.causal_container import CausalContainer
from dvv.dots import Dot
from dvv.version_vector import VersionVector
from vmqpy.metadata.messages import Key, Push, check_key
from vmqpy.metadata.objects import EMPTY, NO_CONTEXT, FullKey, StoredObject
from vmqpy.metadata.outputs import Changed, Logged, Output, SendTo
from vmqpy.metadata.resolve import stamp_list
from vmqpy.metadata.rows import (
    InvalidValueError,
    object_row,
    pack_container,
    pack_full_key,
    pack_single,
    pack_value,
    pending_dot_row,
    reservation_row,
)
from vmqpy.metadata.state import ReplicaState

__all__ = ["ReplicaWrites"]


class ReplicaWrites(ReplicaState):
    """A replica's state with its write and merge path (see the module docstring)."""

    # -- local writes -----------------------------------------------------------------------------------
    def _clock_in(self, now: float, wall: float | None) -> None:
        """Take the time of a call: ``now`` for timers, ``wall`` (default ``now``) for HLC stamps."""
        self._now = now
        self._wall = now if wall is None else wall

    def put(self, prefix: str, key: Key, value: Any, now: float, wall: float | None = None) -> list[Output]:
        """Write ``value`` (msgpack-serialisable; stored as it comes back from msgpack: tuples become
        lists, stamps become ``[wall_ms, logical, node]``) over everything this node has seen of the key."""
        key = check_key(prefix, key)
        if value is None:
            raise InvalidValueError("None is not a value (use delete)")
        packed = pack_value(value)
        value = msgpack.unpackb(packed, raw=False, strict_map_key=False)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, value, packed, out, writeback=False)
        self._stats["puts"] += 1
        return out

    def delete(self, prefix: str, key: Key, now: float, wall: float | None = None) -> list[Output]:
        """Delete the key: removes every version this node has seen (a concurrent write elsewhere survives)."""
        key = check_key(prefix, key)
        self._clock_in(now, wall)
        out: list[Output] = []
        self._local_write(prefix, key, None, None, out, writeback=False)
        self._stats["deletes"] += 1
        return out

    # -- write path -------------------------------------------------------------------------------------
    def _local_write(
        self, prefix: str, key: Key, value: Any, packed: bytes | None, out: list[Output], *, writeback: bool
    ) -> None:
        """fill -> discard (this node's whole context) -> new dot -> add -> strip -> store -> index -> push.

        Discarding with the local object's filled context drops every version this node holds, so
        the new object is just ``{dot: value}`` (nothing for a delete) with context filled + {dot}."""
        fk = (prefix, key)
        node = self.node_id
        stored = self._objects.get(prefix, key)
        old = self._resolve(prefix, stored)
        context = dict(self._clock.base)  # the filled context the write supersedes
        if stored is not None and stored.ctx:
            for n, c in stored.ctx.items():
                if c > context.get(n, 0):
                    context[n] = c
        counter, reserved = self._clock.issue()
        dot = (node, counter)
        if reserved is not None:
            out.append(reservation_row(reserved))
        base_d = self._clock.base
        if stored is None or not stored.ctx:
            rest_ctx = NO_CONTEXT if base_d.get(node, 0) >= counter else VersionVector({node: counter})
        else:
            rest_ctx = stored.ctx.add(dot).filter_ids(lambda n, c: c > base_d.get(n, 0))
        at_rest = StoredObject(() if value is None else ((dot, value),), rest_ctx)
        fkb = pack_full_key(prefix, key)
        # index: the versions this write supersedes (and a delete's own dot) wait for GC
        if stored is not None:
            for old_dot in stored.dots():
                self._supersede(old_dot, fk, fkb, out)
        self._index.add(dot, fk)
        if value is None:
            self._supersede(dot, fk, fkb, out)
        self._store(fk, at_rest, out, fkb, None if at_rest.is_empty() else pack_single(node, counter, packed, rest_ctx))
        if value != old:
            out.append(Changed(prefix, key, old, value))
        stamp = stamp_list(value)
        if stamp is not None:
            self.hlc.witness_parts(stamp[0], stamp[1])
        else:
            stamp = self.hlc.now(self._wall).to_list()
        fields: dict[str, Any] = {"prefix": prefix, "key": key, "dot": [node, counter],
                                  "op": "delete" if value is None else "put", "value": packed, "context": context,
                                  "hlc": stamp}
        if writeback:
            fields["writeback"] = True
        out.append(Logged("md_write", fields))
        self._writebacks.drop(fk)
        reachable = self._membership.reachable
        if reachable:
            push = Push(prefix, key, dot, value, context)
            for peer in self._membership.peers:
                if peer in reachable:
                    out.append(SendTo(peer, push))
                    self._stats["pushes_sent"] += 1

    def _supersede(self, dot: Dot, fk: FullKey, fkb: bytes | None, out: list[Output]) -> None:
        """``dot`` (indexed under ``fk``) is no longer live: keep it indexed until every peer holds it."""
        self._index.supersede(dot, fk)
        out.append(pending_dot_row(dot, fkb if fkb is not None else pack_full_key(*fk)))

    def _store(
        self, fk: FullKey, at_rest: StoredObject, out: list[Output], fkb: bytes | None = None, row: bytes | None = None
    ) -> None:
        """Keep ``at_rest`` (stripped) as the key's object and persist it; an empty one is dropped."""
        if self._objects.keep(fk, at_rest):
            value = None if at_rest.is_empty() else row or pack_container(at_rest)
            out.append(object_row(fkb or pack_full_key(*fk), value))

    # -- receive path -----------------------------------------------------------------------------------
    def _apply(
        self, prefix: str, key: Key, remote: CausalContainer, dots: Iterable[Dot], via: str, out: list[Output]
    ) -> bool:
        """Merge a *filled* remote container; ``dots`` are the dots it brings (its versions' dots plus
        the write's or the requested ones).  Returns True when the key's versions changed."""
        fk = (prefix, key)
        stored = self._objects.get(prefix, key)
        fresh = self._clock.unseen(dots)
        local = EMPTY if stored is None else stored
        local_filled = CausalContainer(local.versions, local.ctx.merge(self._clock.base_vv()))
        synced = local_filled.sync(remote)
        if fresh:
            self._clock.see(fresh)
        before = set(local.dots())
        after = synced.dots()
        after_set = set(after)
        changed = before != after_set
        at_rest = StoredObject.of(synced.strip(self._clock.current()))
        if not fresh and at_rest == local:
            return False
        # index: versions that lost their place wait for GC; new versions are live; other new dots wait
        for d in local.dots():
            if d not in after_set:
                self._supersede(d, fk, None, out)
        for d in fresh:
            self._index.add(d, fk)
            if d not in after_set:
                self._supersede(d, fk, None, out)
        if at_rest != local:
            self._store(fk, at_rest, out)
        if changed:
            old = self._resolve(prefix, stored)
            new = self._resolve(prefix, at_rest if len(at_rest) else None)
            if old != new:
                out.append(Changed(prefix, key, old, new))
            for value in synced.values():
                stamp = stamp_list(value)
                if stamp is not None:
                    self.hlc.witness_parts(stamp[0], stamp[1])
            newest = max(fresh) if fresh else max(after_set ^ before)
            fields = {"origin": newest[0], "prefix": prefix, "key": key, "dot": [newest[0], newest[1]], "via": via,
                      "siblings": len(after), "hlc": self.hlc.now(self._wall).to_list()}
            out.append(Logged("md_apply", fields))
            self._stats["objects_applied"] += 1
        if len(after) > 1 and self._writebacks.enabled and self._owns(after):
            self._writebacks.want(fk, self._now)
        elif len(after) <= 1:
            self._writebacks.drop(fk)
        return changed
