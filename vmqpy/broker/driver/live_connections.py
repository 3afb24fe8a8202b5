"""The node's live MQTT connections, in the order they were accepted.

A plain `set` of connection objects iterates in the order of their memory addresses, which differs between runs
and machines: stopping, draining or disconnecting "every connection" (a `leave -k`, `node stop`, a listener
stopped) would then take the clients in a different order each time, and a history that depends on that order
(which client reconnects first, and where) could not be replayed. `LiveConnections` is a set that iterates in
insertion order (a dict's keys), so the same events give the same order on every run.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableSet
from typing import TypeVar

__all__ = ["LiveConnections"]

T = TypeVar("T")


class LiveConnections(MutableSet[T]):
    """A set in insertion order: `add`, `discard`, membership, `len`, iteration (take a `list` of it before
    removing members while iterating, as with a set)."""

    __slots__ = ("_members",)

    def __init__(self) -> None:
        self._members: dict[T, None] = {}

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __iter__(self) -> Iterator[T]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def add(self, value: T) -> None:
        self._members[value] = None

    def discard(self, value: T) -> None:
        self._members.pop(value, None)
