"""The cluster view: which members can reach which, computed from every node's reachability reports.

Each node reports the set of members it currently reaches. An edge a-b stands when both a and b report each
other (a link that only one side sees is not trusted). The groups are the connected components of that
graph; a node is ready when every member is reachable from it (VerneMQ's rule).

The *majority* (for `cluster.readiness = majority`) is one set of members that all reach each other (a clique
of the graph) holding a strict majority of the members; when several exist, the largest, then the first in
name order. A node is in the majority only when it belongs to that one set. A connected group is not enough:
under a bridge partition (n1 and n2 cut apart, n3 reaching both) the group {n1, n2, n3} is connected, and each
of n1 and n2 reaches a majority on its own ({n1, n3}, {n2, n3}); counting either would let both sides accept
writes that only reach each other later through n3, and a clear acknowledged on one side could be undone by
a put acknowledged on the other (docs/chaos.md, finding 7). Every node of the bridge computes the same graph
from the same reports, so they pick the same clique ({n1, n3}): n2 refuses, and every write of the serving
side goes between nodes that replicate to each other directly. Pure: reports in, a `View` out.

A node alone in its membership has one group and is its own majority; that view is built without a graph, and
networkx is imported only when a second member appears (it took 135 ms of every node's start).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True, slots=True)
class View:
    """One node's view of the cluster."""

    node: str
    members: tuple[str, ...]
    reachable: frozenset[str]  # members this node has a working link to (itself included)
    groups: tuple[tuple[str, ...], ...]  # connected components, largest first, each sorted
    majority: tuple[str, ...] = ()  # the serving majority: a clique of a strict majority (module doc), sorted

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
        return self.node in self.majority

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
            "majority_members": list(self.majority),
        }


def compute(node: str, members: Iterable[str], reports: Mapping[str, Iterable[str]]) -> View:
    """The view of `node` given each member's report of whom it reaches (`reports[node]` is our own)."""
    member_list = tuple(sorted(set(members) | {node}))
    member_set = set(member_list)
    seen = {name: set(reports.get(name, ())) & member_set for name in member_list}
    if member_list == (node,):
        return View(node, member_list, frozenset({node}), (member_list,), member_list)
    import networkx as nx  # only clusters of two or more need it (module docstring)

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
    return View(node, member_list, frozenset(own | {node}), tuple(groups), _majority(graph, len(member_list)))


def _majority(graph: nx.Graph[str], members: int) -> tuple[str, ...]:
    """The largest set of mutually reachable members holding a strict majority, first in name order; ()."""
    import networkx as nx  # see compute

    cliques = [tuple(sorted(c)) for c in nx.find_cliques(graph) if 2 * len(c) > members]
    return min(cliques, key=lambda c: (-len(c), c)) if cliques else ()
