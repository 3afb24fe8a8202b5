"""Hypothesis strategies that build dvv objects only through random histories of writes.

Every clock a property test sees comes out of a simulated history: 1 to 5 nodes coordinate writes
from clients holding stale read contexts, replicas sync with each other in random order, and node
clocks receive the dots of those writes partially and out of order.  No clock is made up directly, so
the invariants real histories guarantee (a dot names one value everywhere) always hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dvv import dvvset
from dvv.causal_container import CausalContainer
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector

# Moderate example counts: the whole dvv suite must stay well under a minute on 2 shared cores.
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NODE_NAMES = ("a", "b", "c", "d", "e")


@dataclass
class DvvHistory:
    nodes: list[str]
    replicas: dict[str, dvvset.Clock]
    snapshots: list[dvvset.Clock] = field(default_factory=list)
    contexts: list[VersionVector] = field(default_factory=list)
    coordinators: set[str] = field(default_factory=set)
    writes: int = 0


@st.composite
def dvv_histories(draw: st.DrawFn, max_ops: int = 30) -> DvvHistory:
    """Writes on 1..5 coordinators with stale client contexts, interleaved with replica syncs."""
    n = draw(st.integers(1, 5))
    nodes = list(NODE_NAMES[:n])
    h = DvvHistory(nodes, {node: dvvset.Clock() for node in nodes}, contexts=[VersionVector()])
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["write", "write", "sync", "read"]),
                st.integers(0, n - 1),
                st.integers(0, n - 1),
                st.integers(0, 1000),
            ),
            max_size=max_ops,
        )
    )
    for kind, i, j, pick in ops:
        node = nodes[i]
        if kind == "write":
            ctx = h.contexts[pick % len(h.contexts)]
            h.writes += 1
            client = dvvset.new_with_context(ctx, f"v{h.writes}")
            h.replicas[node] = dvvset.update_with(client, h.replicas[node], node)
            h.coordinators.add(node)
        elif kind == "sync":
            h.replicas[node] = dvvset.sync([h.replicas[node], h.replicas[nodes[j]]])
        else:
            h.contexts.append(dvvset.join(h.replicas[node]))
        h.snapshots.append(h.replicas[node])
    h.snapshots.extend(h.replicas.values())
    return h


@st.composite
def dvv_clocks(draw: st.DrawFn, count: int = 3) -> list[dvvset.Clock]:
    """``count`` clocks taken from the same random history."""
    h = draw(dvv_histories())
    return [draw(st.sampled_from(h.snapshots)) for _ in range(count)]


def dvv_to_container(clock: dvvset.Clock) -> CausalContainer:
    """The explicit dot -> value view of a DVVSet (the i-th value of an entry has dot counter - i)."""
    dots = {(e.id, e.counter - i): v for e in clock.entries for i, v in enumerate(e.values)}
    return CausalContainer(dots, dvvset.join(clock))


@dataclass
class DotHistory:
    nodes: list[str]
    produced: dict[str, int]
    clocks: list[NodeClock]


@st.composite
def node_clock_histories(draw: st.DrawFn, max_clocks: int = 4, max_events: int = 40) -> DotHistory:
    """Nodes produce events; each replica's node clock receives a random subset of the dots (always
    including a random prefix, as anti-entropy delivers), in a random order."""
    n = draw(st.integers(1, 5))
    nodes = list(NODE_NAMES[:n])
    produced = {node: draw(st.integers(0, max_events)) for node in nodes}
    clocks: list[NodeClock] = []
    for _ in range(draw(st.integers(1, max_clocks))):
        dots: list[tuple[str, int]] = []
        tracked = []
        for node in nodes:
            total = produced[node]
            if draw(st.booleans()):
                tracked.append(node)
            prefix = draw(st.integers(0, total))
            extra = draw(st.sets(st.integers(prefix + 1, total), max_size=8)) if prefix < total else set()
            dots.extend((node, c) for c in range(1, prefix + 1))
            dots.extend((node, c) for c in extra)
        order = draw(st.permutations(dots)) if len(dots) <= 60 else dots
        clock = NodeClock.with_ids(tracked)
        if draw(st.booleans()):
            clock = clock.add_all(order)
        else:
            for dot in order:
                clock = clock.add(dot)
        clocks.append(clock)
    return DotHistory(nodes, produced, clocks)


def brute_dots(clock: NodeClock, node: str) -> set[int]:
    """Every counter of ``node`` in ``clock``, by asking ``contains`` for each candidate."""
    base, bitmap = clock.entry(node)
    top = base + bitmap.bit_length()
    return {c for c in range(1, top + 1) if clock.contains((node, c))}


values_st = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
"""Values that survive a msgpack round trip unchanged (no tuples, no floats' NaN)."""


def unhashable(tag: Any) -> list[Any]:
    """A value that cannot be hashed, to show the library never hashes values."""
    return [tag, {"payload": tag}]
