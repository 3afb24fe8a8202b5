"""The cluster view: which members can reach which, computed from every node's reachability reports.

Each node reports the set of members it currently reaches. An edge a-b stands when both a and b report each
other (a link that only one side sees is not trusted). The groups are the connected components of that
graph; a node is ready when every member is reachable from it (VerneMQ's rule), and in a majority when its
group holds a strict majority of the members. Pure: reports in, a `View` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx


@dataclass(frozen=True, slots=True)
class View:
    """One node's view of the cluster."""

    node: str
    members: tuple[str, ...]
    reachable: frozenset[str]  # members this node has a working link to (itself included)
    groups: tuple[tuple[str, ...], ...]  # connected components, largest first, each sorted

    @property
    def ready(self) -> bool:
        return set(self.members) <= self.reachable

    @property
    def own_group(self) -> tuple[str, ...]:
        for group in self.groups:
            if self.node in group:
                return group
        return (self.node,)

    @property
    def in_majority(self) -> bool:
        return 2 * len(self.own_group) > len(self.members)

    @property
    def partitioned(self) -> bool:
        return len(self.groups) > 1

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "members": list(self.members),
            "reachable": sorted(self.reachable),
            "groups": [list(g) for g in self.groups],
            "ready": self.ready,
            "majority": self.in_majority,
        }


def compute(node: str, members: Iterable[str], reports: Mapping[str, Iterable[str]]) -> View:
    """The view of `node` given each member's report of whom it reaches (`reports[node]` is our own)."""
    member_list = tuple(sorted(set(members) | {node}))
    member_set = set(member_list)
    seen = {name: set(reports.get(name, ())) & member_set for name in member_list}
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(member_list)
    own = seen[node]
    for a in member_list:
        for b in seen[a]:
            if a != b and a in seen.get(b, set()):
                graph.add_edge(a, b)
    # Our own links count as soon as we see them: a peer's report may lag behind by a heartbeat.
    for b in own:
        if b != node:
            graph.add_edge(node, b)
    groups = sorted((tuple(sorted(c)) for c in nx.connected_components(graph)), key=lambda g: (-len(g), g))
    return View(node, member_list, frozenset(own | {node}), tuple(groups))
