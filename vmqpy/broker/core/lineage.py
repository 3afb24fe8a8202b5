"""Divergent copies: which messages of a session this node already took from an old owner's copies.

A node that recovered a session from the queue replicas (vmqpy.replicas.failover) holds the later copy of its
queue; the old owner may come back with its old disk and hand its own, older copy over (a takeover). The rule
(docs/replication.md, "Divergent copies"): the later owner's queue wins, and the old owner's handover adds only
the messages this node never had. A message is named by its old owner's sequence number for the session (the
key of its replica copy, and the number the handover carries) and a digest of its record (`fingerprint`), and
remembered with that owner: two owners' sequence numbers overlap, so a name guards only against its own owner.

`Lineage` remembers, per client id, the names of the messages recovered from replicas, and of those handed
over to a session that has some; `admit` keeps only the messages it has not seen from that owner. It is
persisted in the node's storage (table `lineage`), travels with the session when it moves on to another node
(`carried`, `inherit`: that node may be the one the old owner hands over to) and, through `on_added`, with the
session's queue replicas (a node that recovers the session from this node's copies inherits it), and is
forgotten when the session leaves this node or the old owner leaves the cluster (`prune`). It is session state
the broker keeps (vmqpy.broker.core.migration); the names' wire form, shared with the session image, is
vmqpy.sessions.names. Pure: no I/O beyond the storage port.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable
from typing import Protocol

import msgpack

from vmqpy.sessions.message import Message
from vmqpy.sessions.names import Entry, Name, pack_entries, unpack_entries

__all__ = [
    "CARRIED_MAX", "HANDED_OVER", "LINEAGE_TABLE", "Lineage", "LineageStorage", "entries_of", "fingerprint",
    "names_record",
]

LINEAGE_TABLE = "lineage"
# The owner recorded for a message handed over by a node this one did not know (entries of earlier versions):
# such an entry guards against every owner.
HANDED_OVER = ""
CARRIED_MAX = 20_000  # names carried with a session to its next node (about 20 bytes each in the frame)


def fingerprint(message: Message) -> bytes:
    """8 bytes that name a message's content (its packed record, forward id included)."""
    return hashlib.blake2b(msgpack.packb(message.pack()), digest_size=8).digest()


class LineageStorage(Protocol):
    """What the lineage needs of the node's storage (vmqpy.storage.Storage)."""

    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    def delete(self, table: str, key: bytes) -> None: ...

    def delete_prefix(self, table: str, prefix: bytes) -> None: ...

    def load(self, table: str) -> list[tuple[bytes, bytes]]: ...


def _text(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">H", len(data)) + data


def _prefix(client_id: str) -> bytes:
    return _text(client_id)


def _key(client_id: str, owner: str, seq: int) -> bytes:
    return _prefix(client_id) + _text(owner) + struct.pack(">Q", seq)


def _parse(key: bytes) -> tuple[str, str, int]:
    (n,) = struct.unpack_from(">H", key, 0)
    client_id = key[2:2 + n].decode()
    (m,) = struct.unpack_from(">H", key, 2 + n)
    owner = key[4 + n:4 + n + m].decode()
    (seq,) = struct.unpack_from(">Q", key, 4 + n + m)
    if len(key) != 12 + n + m:
        raise ValueError("trailing bytes")
    return client_id, owner, seq


def names_record(entries: list[Entry]) -> bytes:
    """Entries as a `lin` replica operation carries them: msgpack of `pack_entries`."""
    return bytes(msgpack.packb(pack_entries(entries)))


def entries_of(record: bytes) -> list[Entry]:
    """The inverse of `names_record`; ValueError (or msgpack's own errors) for anything else."""
    return unpack_entries(msgpack.unpackb(record))


class Lineage:
    def __init__(self, storage: LineageStorage | None = None) -> None:
        self._storage = storage
        self._seen: dict[str, dict[Name, set[str]]] = {}  # client id -> message name -> the owners it came from
        self.on_added: Callable[[str, list[Entry]], None] | None = None  # entries remembered, per call
        self.malformed = 0  # stored entries that could not be read (skipped)
        if storage is not None:
            for key, digest in storage.load(LINEAGE_TABLE):
                try:
                    client_id, owner, seq = _parse(key)
                except (ValueError, UnicodeDecodeError, struct.error):
                    self.malformed += 1
                    continue
                self._seen.setdefault(client_id, {}).setdefault((seq, bytes(digest)), set()).add(owner)

    def admit(self, client_id: str, names: Iterable[Name], origin: str | None, source: str | None = None
              ) -> list[bool]:
        """For each message name arriving for `client_id`: True when it is new here (adopt it), False when
        this node already took it from the same owner. `origin`: the old owner whose replica copies these are;
        None for a handover, from `source` (the sending node; None: not known, any owner's name matches). A
        handover's names are remembered only when the session already has some, i.e. was recovered."""
        owner = origin if origin is not None else source
        seen = self._seen.get(client_id)
        remember = origin is not None or bool(seen)
        verdicts: list[bool] = []
        added: list[Entry] = []
        for name in names:
            owners = None if seen is None else seen.get(name)
            new = owners is None or (owner is not None and owner not in owners and HANDED_OVER not in owners)
            verdicts.append(new)
            if new and remember:
                if seen is None:
                    seen = self._seen[client_id] = {}
                added.append(self._remember(client_id, seen, name, HANDED_OVER if owner is None else owner))
        self._added(client_id, added)
        return verdicts

    def _added(self, client_id: str, entries: list[Entry]) -> None:
        if entries and self.on_added is not None:
            self.on_added(client_id, entries)

    def _remember(self, client_id: str, seen: dict[Name, set[str]], name: Name, owner: str) -> Entry:
        seen.setdefault(name, set()).add(owner)
        if self._storage is not None:
            self._storage.put(LINEAGE_TABLE, _key(client_id, owner, name[0]), name[1])
        return owner, name[0], name[1]

    def holds(self, client_id: str) -> bool:
        """Whether anything is remembered for `client_id` (a handover to it needs `admit`)."""
        return client_id in self._seen

    def guards(self, client_id: str, source: str | None) -> bool:
        """Whether a session image from `source` (None: not a handover, or its sender is not known) is an old
        owner's older state, not to be merged: `source` is an owner some remembered message came from."""
        seen = self._seen.get(client_id)
        if not seen:
            return False
        if source is None:
            return True
        return any(source in owners or HANDED_OVER in owners for owners in seen.values())

    def carried(self, client_id: str, to: str) -> list[Entry]:
        """The entries of `client_id` that go with its session to the node `to` (its own are of no use there),
        at most CARRIED_MAX (the latest sequence numbers first)."""
        entries = [(owner, seq, digest) for (seq, digest), owners in self._seen.get(client_id, {}).items()
                   for owner in owners if owner != to]
        if len(entries) > CARRIED_MAX:
            entries.sort(key=lambda entry: entry[1], reverse=True)
            del entries[CARRIED_MAX:]
        return entries

    def inherit(self, client_id: str, entries: Iterable[Entry], sender: str) -> int:
        """The entries a session brought from `sender`, the node it moved from; how many were new here. Those of
        `sender` itself are left out: its handover of the session is the current state, taken whole."""
        seen = self._seen.get(client_id)
        added: list[Entry] = []
        for owner, seq, digest in entries:
            if owner == sender:
                continue
            if seen is None:
                seen = self._seen[client_id] = {}
            name = (seq, digest)
            if owner not in seen.get(name, ()):
                added.append(self._remember(client_id, seen, name, owner))
        self._added(client_id, added)
        return len(added)

    def forget(self, client_id: str) -> None:
        """The session is no longer here."""
        if self._seen.pop(client_id, None) is not None and self._storage is not None:
            self._storage.delete_prefix(LINEAGE_TABLE, _prefix(client_id))

    def prune(self, present: Callable[[str], bool], members: set[str] | None) -> int:
        """Forget the sessions that are not `present` here and, when `members` is known, the messages of old
        owners that are no longer members (they cannot hand anything over). How many entries were forgotten."""
        forgotten = 0
        for client_id in list(self._seen):
            seen = self._seen[client_id]
            if not present(client_id):
                forgotten += sum(len(owners) for owners in seen.values())
                self.forget(client_id)
                continue
            if members is None:
                continue
            for name in list(seen):
                owners = seen[name]
                for owner in [o for o in owners if o != HANDED_OVER and o not in members]:
                    owners.discard(owner)
                    forgotten += 1
                    if self._storage is not None:
                        self._storage.delete(LINEAGE_TABLE, _key(client_id, owner, name[0]))
                if not owners:
                    del seen[name]
            if all(owners == {HANDED_OVER} for owners in seen.values()):  # nothing recovered left to guard
                forgotten += len(seen)
                self.forget(client_id)
        return forgotten

    def names(self, client_id: str) -> dict[Name, set[str]]:
        """The message names remembered for `client_id` (a copy), with the owners each came from."""
        return {name: set(owners) for name, owners in self._seen.get(client_id, {}).items()}

    def __len__(self) -> int:
        return sum(len(owners) for seen in self._seen.values() for owners in seen.values())
