"""The replica side: the copies of other owners' persistent sessions kept on this node.

Operations (ops.py) from an owner are applied to the `replica` table of the node's storage and to an index in
memory, keyed by (owner node, client id): the same client id may have copies from two owners (its old and its
new one during a handover). Keys are ``owner NUL client_id NUL kind [suffix]`` (node names and MQTT strings
hold no NUL): kind ``m`` + 8-byte seq for a message, ``i`` + 2-byte packet id for an incoming QoS 2 id, ``s``
for the session record, ``l`` + 8-byte index for a batch of lineage names (a `lin` operation, kept as it came:
vmqpy.replicas.lineage). Deleting a session's copy is one prefix delete.

Operations may arrive out of order (a batch lost with a broken link is sent again after newer ones went on the
next link), so each is applied with its number in the owner's numbering (its `version`): an entry, or its
deletion, is only replaced by an operation with a higher number. A deletion leaves a tombstone (its number, in
memory) until every operation numbered below it has arrived (`prune(owner, settled)`); a new run of the owner
numbers from 1 again and starts afresh (`new_run`). After a restart of this node the versions start at 0.

A `sync` numbered v (the owner's whole state of the session, sent by its rebalancer) is a `drop` numbered v
followed by that state written at v: what was numbered below v is gone, what arrived numbered above v stays
(it is newer than the snapshot), and an operation numbered below v that arrives later is ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

from vmqpy.replicas.ops import Op

__all__ = ["REPLICA_TABLE", "Copy", "ReplicaCopies"]

REPLICA_TABLE = "replica"


class KeyValue(Protocol):
    """What the copies need of the node's storage (vmqpy.storage.Storage)."""

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> None: ...

    def delete_prefix(self, table: str, prefix: bytes) -> None: ...

    def load(self, table: str) -> list[tuple[bytes, bytes]]: ...


@dataclass(slots=True)
class Copy:
    """One owner's copy of one session: its session record, its messages by seq, its incoming QoS 2 ids, and the
    batches of names of messages the owner took from older owners (its lineage, by index)."""

    session: bytes | None = None
    messages: dict[int, bytes] = field(default_factory=dict)
    incoming: set[int] = field(default_factory=set)
    versions: dict[tuple[str, int], int] = field(default_factory=dict)  # entries and tombstones: their number
    lineage: dict[int, bytes] = field(default_factory=dict)

    def empty(self) -> bool:
        return self.session is None and not self.messages and not self.incoming


def _prefix(owner: str, client_id: str) -> bytes:
    return owner.encode() + b"\0" + client_id.encode() + b"\0"


class ReplicaCopies:
    """The copies this node keeps for other owners, on disk and indexed in memory."""

    def __init__(self, storage: KeyValue) -> None:
        self._storage = storage
        self._copies: dict[tuple[str, str], Copy] = {}
        self._by_client: dict[str, set[str]] = {}  # client id -> owners with a copy here
        self._dropped: dict[tuple[str, str], int] = {}  # (owner, client id) -> number of its drop: a tombstone

    def load(self) -> None:
        """Read every copy from storage (at start)."""
        for key, value in self._storage.load(REPLICA_TABLE):
            owner_b, _, rest = key.partition(b"\0")
            client_b, _, tail = rest.partition(b"\0")
            copy = self._copy(owner_b.decode(), client_b.decode())
            if tail[:1] == b"m" and len(tail) == 9:
                copy.messages[struct.unpack(">Q", tail[1:])[0]] = value
            elif tail[:1] == b"i" and len(tail) == 3:
                copy.incoming.add(struct.unpack(">H", tail[1:])[0])
            elif tail == b"s":
                copy.session = value
            elif tail[:1] == b"l" and len(tail) == 9:
                copy.lineage[struct.unpack(">Q", tail[1:])[0]] = value

    def _copy(self, owner: str, client_id: str) -> Copy:
        copy = self._copies.get((owner, client_id))
        if copy is None:
            copy = self._copies[(owner, client_id)] = Copy()
            self._by_client.setdefault(client_id, set()).add(owner)
        return copy

    def apply(self, owner: str, op: Op, version: int = 0) -> bool:
        """Apply `owner`'s operation `op`, its number `version` (its storage write is queued; the caller's
        barrier confirms it). False: an operation numbered higher already replaced it (it is not applied)."""
        key = (owner, op.client_id)
        if version and version < self._dropped.get(key, 0):
            return False
        if op.kind in ("drop", "sync"):
            if version:
                self._dropped[key] = version
            copy = self._copies.get(key)
            if copy is not None and version and any(v > version for v in copy.versions.values()):
                self._drop_older(owner, op.client_id, copy, version)  # newer operations overtook the drop
            else:
                self.forget(owner, op.client_id)
            if op.kind == "sync":  # the state from here on: this record and these ids (messages follow)
                self._apply_entry(owner, Op("session", op.client_id, value=op.value), version)
                for packet_id in op.incoming:
                    self._apply_entry(owner, Op("in", op.client_id, packet_id=packet_id, present=True), version)
            return True
        return self._apply_entry(owner, op, version)

    def _apply_entry(self, owner: str, op: Op, version: int) -> bool:
        """Apply a put, del, in or session operation numbered `version` (not when a higher one replaced it)."""
        copy = self._copy(owner, op.client_id)
        entry = {"put": "m", "del": "m", "in": "i", "session": "s", "lin": "l"}[op.kind]
        if entry == "l":  # names are only ever added: each batch is a new entry
            item = ("l", max(copy.lineage, default=0) + 1)
        else:
            item = (entry, op.seq if entry == "m" else op.packet_id)
        if version and version < copy.versions.get(item, 0):
            return False
        if version:
            copy.versions[item] = version
        prefix = _prefix(owner, op.client_id)
        store = self._storage
        if op.kind == "put":
            copy.messages[op.seq] = op.value
            store.put(REPLICA_TABLE, prefix + b"m" + struct.pack(">Q", op.seq), op.value)
        elif op.kind == "del":
            copy.messages.pop(op.seq, None)
            store.delete(REPLICA_TABLE, prefix + b"m" + struct.pack(">Q", op.seq))
        elif op.kind == "in":
            key_bytes = prefix + b"i" + struct.pack(">H", op.packet_id)
            if op.present:
                copy.incoming.add(op.packet_id)
                store.put(REPLICA_TABLE, key_bytes, b"")
            else:
                copy.incoming.discard(op.packet_id)
                store.delete(REPLICA_TABLE, key_bytes)
        elif op.kind == "lin":
            copy.lineage[item[1]] = op.value
            store.put(REPLICA_TABLE, prefix + b"l" + struct.pack(">Q", item[1]), op.value)
        else:
            copy.session = op.value
            store.put(REPLICA_TABLE, prefix + b"s", op.value)
        return True

    def _drop_older(self, owner: str, client_id: str, copy: Copy, version: int) -> None:
        """Delete what `owner`'s copy of `client_id` holds from operations numbered below `version`."""
        prefix = _prefix(owner, client_id)
        for seq in [s for s in copy.messages if copy.versions.get(("m", s), 0) < version]:
            del copy.messages[seq]
            self._storage.delete(REPLICA_TABLE, prefix + b"m" + struct.pack(">Q", seq))
        for packet_id in [p for p in copy.incoming if copy.versions.get(("i", p), 0) < version]:
            copy.incoming.discard(packet_id)
            self._storage.delete(REPLICA_TABLE, prefix + b"i" + struct.pack(">H", packet_id))
        if copy.session is not None and copy.versions.get(("s", 0), 0) < version:
            copy.session = None
            self._storage.delete(REPLICA_TABLE, prefix + b"s")
        for index in [i for i in copy.lineage if copy.versions.get(("l", i), 0) < version]:
            del copy.lineage[index]
            self._storage.delete(REPLICA_TABLE, prefix + b"l" + struct.pack(">Q", index))
        copy.versions = {item: v for item, v in copy.versions.items() if v > version}

    def prune(self, owner: str, settled: int) -> None:
        """Every operation of `owner` numbered up to `settled` arrived: forget the tombstones it covers."""
        self._dropped = {k: v for k, v in self._dropped.items() if k[0] != owner or v > settled}
        for (copy_owner, client_id), copy in list(self._copies.items()):
            if copy_owner != owner:
                continue
            copy.versions = {item: v for item, v in copy.versions.items() if v > settled or self._live(copy, item)}
            if copy.empty() and not copy.versions:
                self._remove(owner, client_id)

    def new_run(self, owner: str) -> None:
        """`owner` started again: its numbering starts at 1 (the copies stay; their numbers are forgotten)."""
        self._dropped = {k: v for k, v in self._dropped.items() if k[0] != owner}
        for (copy_owner, client_id), copy in list(self._copies.items()):
            if copy_owner == owner:
                copy.versions.clear()
                if copy.empty():
                    self._remove(owner, client_id)

    @staticmethod
    def _live(copy: Copy, item: tuple[str, int]) -> bool:
        kind, n = item
        if kind == "m":
            return n in copy.messages
        if kind == "i":
            return n in copy.incoming
        if kind == "l":
            return n in copy.lineage
        return copy.session is not None

    def forget(self, owner: str, client_id: str) -> None:
        """Delete `owner`'s copy of `client_id` (if any)."""
        self._storage.delete_prefix(REPLICA_TABLE, _prefix(owner, client_id))
        self._remove(owner, client_id)

    def _remove(self, owner: str, client_id: str) -> None:
        if self._copies.pop((owner, client_id), None) is not None:
            owners = self._by_client.get(client_id, set())
            owners.discard(owner)
            if not owners:
                self._by_client.pop(client_id, None)

    def copies_of(self, client_id: str) -> dict[str, Copy]:
        """Every owner's copy of `client_id` kept here (not the empty ones)."""
        copies = {owner: self._copies[(owner, client_id)] for owner in sorted(self._by_client.get(client_id, ()))}
        return {owner: copy for owner, copy in copies.items() if not copy.empty()}

    def counts_for(self, owner: str) -> dict[str, int]:
        """client id -> messages held here for `owner`'s session of it."""
        return {cid: len(c.messages) for (o, cid), c in self._copies.items() if o == owner and c.messages}

    def messages(self) -> int:
        """How many messages the copies here hold."""
        return sum(len(c.messages) for c in self._copies.values())

    def sessions(self) -> int:
        return sum(1 for c in self._copies.values() if not c.empty())

    def lineage_batches(self) -> int:
        """How many batches of lineage names the copies here hold (`lin` operations)."""
        return sum(len(c.lineage) for c in self._copies.values())

    def tombstones(self) -> int:
        """Entries remembered only by their number (deleted), and dropped sessions."""
        dead = sum(1 for c in self._copies.values() for item in c.versions if not self._live(c, item))
        return len(self._dropped) + dead
