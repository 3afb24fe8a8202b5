"""Divergent copies: which messages of a session this node already took from an old owner's copies.

A node that recovered a session from the queue replicas (vmqpy.replicas.failover) holds the later copy of its
queue; the old owner may come back with its old disk and hand its own, older copy over (a takeover). The rule
(docs/replication.md, "Divergent copies"): the later owner's queue wins, and the old owner's handover adds only
the messages this node never had. A message is named by its old owner's sequence number for the session (the
key of its replica copy, and the number the handover carries) and a digest of its record (`fingerprint`): the
handover does not say which node it comes from, and two owners' sequence numbers may overlap.

`Lineage` remembers, per client id, the names of the messages recovered from replicas, and of those handed
over to a session that has some; `admit` keeps only the messages it has not seen. It is persisted in the
node's storage (table `lineage`), and forgotten when the session leaves this node or the old owner leaves the
cluster (`prune`). Pure: no I/O beyond the storage port.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable
from typing import Protocol

import msgpack

from vmqpy.broker.message import Message

__all__ = ["HANDED_OVER", "LINEAGE_TABLE", "Lineage", "LineageStorage", "Name", "fingerprint"]

LINEAGE_TABLE = "lineage"
HANDED_OVER = ""  # the owner recorded for a message handed over (its sending node is not known here)

Name = tuple[int, bytes]  # (the old owner's sequence number, the digest of the message)


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


class Lineage:
    def __init__(self, storage: LineageStorage | None = None) -> None:
        self._storage = storage
        self._seen: dict[str, dict[Name, str]] = {}  # client id -> message name -> the owner it came from
        self.malformed = 0  # stored entries that could not be read (skipped)
        if storage is not None:
            for key, digest in storage.load(LINEAGE_TABLE):
                try:
                    client_id, owner, seq = _parse(key)
                except (ValueError, UnicodeDecodeError, struct.error):
                    self.malformed += 1
                    continue
                self._seen.setdefault(client_id, {})[(seq, bytes(digest))] = owner

    def admit(self, client_id: str, names: Iterable[Name], origin: str | None) -> list[bool]:
        """For each message name arriving for `client_id`: True when it is new here (adopt it), False when
        this node already took it. `origin`: the old owner whose replica copies these are; None for a handover
        (its names are remembered only when the session already has some, i.e. was recovered)."""
        seen = self._seen.get(client_id)
        remember = origin is not None or bool(seen)
        verdicts: list[bool] = []
        for name in names:
            new = seen is None or name not in seen
            verdicts.append(new)
            if new and remember:
                if seen is None:
                    seen = self._seen[client_id] = {}
                owner = HANDED_OVER if origin is None else origin
                seen[name] = owner
                if self._storage is not None:
                    self._storage.put(LINEAGE_TABLE, _key(client_id, owner, name[0]), name[1])
        return verdicts

    def holds(self, client_id: str) -> bool:
        """Whether anything is remembered for `client_id` (a handover to it needs `admit`)."""
        return client_id in self._seen

    def forget(self, client_id: str) -> None:
        """The session is no longer here."""
        if self._seen.pop(client_id, None) is not None and self._storage is not None:
            self._storage.delete_prefix(LINEAGE_TABLE, _prefix(client_id))

    def prune(self, present: Callable[[str], bool], members: set[str] | None) -> int:
        """Forget the sessions that are not `present` here and, when `members` is known, the messages of old
        owners that are no longer members (they cannot hand anything over). How many names were forgotten."""
        forgotten = 0
        for client_id in list(self._seen):
            if not present(client_id):
                forgotten += len(self._seen[client_id])
                self.forget(client_id)
                continue
            if members is None:
                continue
            seen = self._seen[client_id]
            gone = [name for name, owner in seen.items() if owner != HANDED_OVER and owner not in members]
            for name in gone:
                owner = seen.pop(name)
                if self._storage is not None:
                    self._storage.delete(LINEAGE_TABLE, _key(client_id, owner, name[0]))
            forgotten += len(gone)
            if all(owner == HANDED_OVER for owner in seen.values()):  # nothing recovered left to guard
                forgotten += len(seen)
                self.forget(client_id)
        return forgotten

    def names(self, client_id: str) -> dict[Name, str]:
        """The message names remembered for `client_id` (a copy), with the owner each came from."""
        return dict(self._seen.get(client_id, {}))

    def __len__(self) -> int:
        return sum(len(seen) for seen in self._seen.values())
