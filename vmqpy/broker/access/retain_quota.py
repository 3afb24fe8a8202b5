"""The retained messages each client may keep (`retain.max_per_client`, `retain.max_bytes_per_client`).

A retained message is kept by every node of the cluster for as long as nobody replaces it: without a bound one
client could fill every node's memory and disk with them. The node counts, per publishing client id, the topics
whose retained message that client set through this node and their bytes (topic and payload); a retained PUBLISH
that would take the client past either limit is refused (the broker does not store or route it), a replacement
is judged by its size difference, and deleting one (an empty payload) always works. A topic whose retained
message changes by anyone else (another client, another node, an operator, expiry) no longer counts for the
client that set it before. Counted since the node started: retained messages kept from before a restart count
when their client replaces or deletes them.

Pure: the broker calls `admits` before storing and `stored` / `released` after the store changed.
"""

from __future__ import annotations

__all__ = ["RetainQuota"]


class RetainQuota:
    """Per client id: the retained topics it set here and their sizes. A limit of 0 is no limit."""

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._topics: dict[str, dict[str, int]] = {}  # client id -> topic -> size
        self._bytes: dict[str, int] = {}  # client id -> total size of its topics
        self._holder: dict[str, str] = {}  # topic -> the client id whose retained message it holds

    def admits(self, client_id: str, topic: str, size: int) -> bool:
        """Whether `client_id` may set the retained message of `topic` to one of `size` bytes."""
        held = self._topics.get(client_id)
        before = held.get(topic) if held is not None else None
        count = (len(held) if held is not None else 0) + (1 if before is None else 0)
        total = self._bytes.get(client_id, 0) + size - (before or 0)
        return (not self.max_count or count <= self.max_count) and (not self.max_bytes or total <= self.max_bytes)

    def stored(self, client_id: str, topic: str, size: int) -> None:
        """`client_id` set the retained message of `topic` (`size` bytes)."""
        self.released(topic)
        self._topics.setdefault(client_id, {})[topic] = size
        self._bytes[client_id] = self._bytes.get(client_id, 0) + size
        self._holder[topic] = client_id

    def released(self, topic: str) -> None:
        """The retained message of `topic` changed or went: it no longer counts for the client that set it."""
        client_id = self._holder.pop(topic, None)
        if client_id is None:
            return
        held = self._topics[client_id]
        self._bytes[client_id] -= held.pop(topic)
        if not held:
            del self._topics[client_id]
            del self._bytes[client_id]

    def held(self, client_id: str) -> tuple[int, int]:
        """(retained messages, bytes) counted for `client_id`."""
        return len(self._topics.get(client_id, ())), self._bytes.get(client_id, 0)
