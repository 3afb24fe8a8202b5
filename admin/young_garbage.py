"""Collect the youngest generation of garbage after every `COLLECT_EVERY` requests the admin API refused.

A refused request can leave a reference cycle that aiohttp makes, not us: its parser's error held by a frame of
`data_received` whose locals hold the error again, with the bytes read; its router's 404/405 route and exception.
Such a cycle holds the request's buffers (a 16 KB query, a 10 KB header, a read of 64 KiB) until the collector
runs, and on a node whose MQTT side is quiet it does not run for thousands of admin requests: the node collects
its youngest generation after 50,000 net allocations (`vmqpy.node.tune_garbage_collector`), and an admin request
allocates few tracked objects and large untracked buffers. 12,000 `bench.fuzz_admin` requests took such a node
from 66 to 307 MiB (docs/security.md). A collection of the youngest generation is cheap (at most those 50,000
objects) and frees these cycles, which are young: every `COLLECT_EVERY` refusals, one is run.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

COLLECT_EVERY = 100  # refused requests between two collections of the youngest generation


class YoungGarbage:
    """Counts refused requests; `refused()` runs `collect(0)` once every `every` of them."""

    def __init__(self, every: int = COLLECT_EVERY, collect: Callable[[int], int] = gc.collect) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1, not {every!r}")
        self.every = every
        self.collect = collect
        self.pending = 0
        self.collections = 0

    def refused(self) -> None:
        self.pending += 1
        if self.pending >= self.every:
            self.pending = 0
            self.collections += 1
            self.collect(0)
