"""`MemoryTable`, a dict as the node's storage of replica copies, `resolved`, a storage barrier already passed, and
`state`, what a ReplicaCopies holds, comparable (the replica tests)."""

from __future__ import annotations

from concurrent.futures import Future

from vmqpy.replicas.copies import ReplicaCopies


class MemoryTable:
    """A dict as the node's storage (put/delete/delete_prefix/load of vmqpy.storage.Storage)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, bytes], bytes] = {}

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.rows[(table, key)] = value

    def delete(self, table: str, key: bytes) -> None:
        self.rows.pop((table, key), None)

    def delete_prefix(self, table: str, prefix: bytes) -> None:
        for t, k in [tk for tk in self.rows if tk[0] == table and tk[1].startswith(prefix)]:
            del self.rows[(t, k)]

    def load(self, table: str) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for (t, k), v in self.rows.items() if t == table)


def state(copies: ReplicaCopies, client_ids: list[str]) -> dict[tuple[str, str], tuple[object, ...]]:
    """What `copies` holds of these clients, by (owner, client id): comparable across two ReplicaCopies."""
    out: dict[tuple[str, str], tuple[object, ...]] = {}
    for cid in client_ids:
        for owner, copy in copies.copies_of(cid).items():
            out[(owner, cid)] = (copy.session, dict(copy.messages), set(copy.incoming))
    return out


def resolved() -> Future[None]:
    """A storage barrier that has passed already."""
    future: Future[None] = Future()
    future.set_result(None)
    return future
