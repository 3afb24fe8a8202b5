"""Shared helpers for the metadata tests: a seeded in-memory cluster, and a pair of replicas wired to each other."""

from __future__ import annotations

import random
from typing import Any

from vmqpy.metadata.memory_network import MemoryNetwork
from vmqpy.metadata.replica import Replica


def cluster(seed: int, nodes: list[str], **kwargs: Any) -> MemoryNetwork:
    """``nodes`` as members of one cluster on a seeded in-memory network."""
    net = MemoryNetwork(seed)
    for node in nodes:
        net.add_replica(node, **kwargs)
    net.set_members(nodes)
    return net


def stamped(net: MemoryNetwork, node: str, value: Any) -> dict[str, Any]:
    """A value carrying ``node``'s HLC stamp at the network's time."""
    return {"hlc": net.replicas[node].hlc_now(net.now).to_list(), "v": value}


def settle(net: MemoryNetwork, seconds: float = 10.0) -> None:
    """Run until every replica agrees and nothing is in flight (bounded), then assert it."""
    assert net.run_until(lambda: net.quiet() and net.converged(), seconds), f"no convergence (seed {net.seed})"


def rows(net: MemoryNetwork, node: str, table: str) -> dict[bytes, bytes]:
    return net.storage[node].get(table, {})


def pair(**kwargs: object) -> tuple[Replica, Replica]:
    """Replicas a and b (seeded), each the other's only peer and reachable; `kwargs` go to both."""
    a = Replica("a", rng=random.Random(1), **kwargs)  # type: ignore[arg-type]
    b = Replica("b", rng=random.Random(2), **kwargs)  # type: ignore[arg-type]
    for r, other in ((a, "b"), (b, "a")):
        r.set_peers([other])
        r.set_reachable([other])
    return a, b
