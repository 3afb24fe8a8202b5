"""Partitions of a test cluster beyond cluster.py's `cut`: one node cut off from all the others."""

from __future__ import annotations

from tests.integration.cluster import ClusterNode, cut


def isolate(nodes: list[ClusterNode], lonely: ClusterNode) -> None:
    """Cut `lonely` off from every other node of `nodes`."""
    for other in nodes:
        if other is not lonely:
            cut(lonely, other)
