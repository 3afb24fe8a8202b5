"""The names of messages a node recovered from an old owner's queue copies, as frames carry them.

A message is named by its old owner's sequence number for the session and a digest of its record; an `Entry`
remembers one name with the owner it came from (docs/replication.md, "Divergent copies"). The broker's lineage
(vmqpy.broker.core.lineage) keeps them; a session image (vmqpy.sessions.handover) and the queue replicas' `lin`
operations carry them, packed per owner.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Entry", "Name", "pack_entries", "unpack_entries"]

Name = tuple[int, bytes]  # (the old owner's sequence number, the digest of the message)
Entry = tuple[str, int, bytes]  # (the owner, its sequence number, the digest): one remembered name


def pack_entries(entries: list[Entry]) -> dict[str, list[Any]]:
    """Entries as a frame carries them: per owner, its sequence numbers and digests in turn."""
    packed: dict[str, list[Any]] = {}
    for owner, seq, digest in entries:
        packed.setdefault(owner, []).extend((seq, digest))
    return packed


def unpack_entries(data: Any) -> list[Entry]:
    """The inverse of `pack_entries`; ValueError for anything else."""
    if not isinstance(data, dict):
        raise ValueError("lineage: not a map")
    entries: list[Entry] = []
    for owner, flat in data.items():
        if not isinstance(owner, str) or not isinstance(flat, list) or len(flat) % 2:
            raise ValueError("lineage: malformed owner entry")
        for i in range(0, len(flat), 2):
            seq, digest = flat[i], flat[i + 1]
            if type(seq) is not int or not 0 <= seq < 1 << 64 or not isinstance(digest, bytes):
                raise ValueError("lineage: malformed name")
            entries.append((owner, seq, digest))
    return entries
