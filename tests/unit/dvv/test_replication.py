"""Small simulated replicas built from CausalContainer + NodeClock + DotKeyMap + Watermark.

Each replica stores stripped containers, coordinates writes and deletes with dots from its node
clock, pulls missing dots from peers (anti-entropy through the dot-key map), learns watermarks and
garbage-collects.  The properties check convergence against a causal model of the history and that a
delete, once every peer has it, leaves nothing of the key behind.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dvv.causal_container import CausalContainer
from dvv.dot_key_map import DotKeyMap
from dvv.dots import Dot
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark

from .histories import HEAVY


@dataclass
class Replica:
    id: str
    nc: NodeClock
    wm: Watermark
    store: dict[Hashable, CausalContainer] = field(default_factory=dict)
    dkm: DotKeyMap = field(default_factory=DotKeyMap)

    @classmethod
    def start(cls, node: str, peers: list[str]) -> Replica:
        return cls(node, NodeClock.with_ids(peers), Watermark.new(peers))

    def read(self, key: Hashable) -> CausalContainer:
        return self.store.get(key, CausalContainer()).fill(self.nc)

    def _put(self, key: Hashable, filled: CausalContainer) -> None:
        stripped = filled.strip(self.nc)
        if stripped.is_empty():
            self.store.pop(key, None)
        else:
            self.store[key] = stripped

    def write(self, key: Hashable, value: Any, ctx: VersionVector) -> Dot:
        obj = self.read(key).discard(ctx)
        counter, self.nc = self.nc.event(self.id)
        dot = (self.id, counter)
        self._put(key, obj.add(dot, value))
        self.dkm = self.dkm.add(dot, key)
        return dot

    def delete(self, key: Hashable, ctx: VersionVector) -> Dot:
        obj = self.read(key)
        counter, self.nc = self.nc.event(self.id)
        dot = (self.id, counter)
        self._put(key, obj.delete(ctx, dot))
        self.dkm = self.dkm.add(dot, key)
        return dot

    def pull_from(self, other: Replica) -> None:
        """Anti-entropy: ask ``other`` for the dots we miss, merge the objects it sends back."""
        missing = other.nc.missing_dots(self.nc, other.nc.ids())
        incoming = [(key, other.read(key), dots) for key, dots in other.dkm.keys_for(missing).items()]
        merged = [(key, self.read(key).sync(remote), dots) for key, remote, dots in incoming]
        self.nc = self.nc.join(other.nc)
        for key, obj, dots in merged:
            self._put(key, obj)
            self.dkm = self.dkm.add_many((dot, key) for dot in dots)
        self.wm = self.wm.left_join(other.wm).update_peer(other.id, other.nc).update_peer(self.id, self.nc)

    def gc(self) -> None:
        """Prune the dot-key map, then re-strip the keys that lost dots and every stored delete."""
        keys, self.dkm = self.dkm.prune(self.wm)
        deletes = [key for key, obj in self.store.items() if not obj.values()]
        for key in dict.fromkeys([*keys, *deletes]):
            if key in self.store:
                self._put(key, self.read(key))


@dataclass
class Op:
    key: Hashable
    dot: Dot
    value: Any  # None for a delete
    ctx: VersionVector


def expected_values(ops: list[Op], key: Hashable) -> list[tuple[Dot, Any]]:
    """Causal model: a written value survives iff no write or delete of the key had it in its context."""
    mine = [op for op in ops if op.key == key]
    return sorted(
        (op.dot, op.value)
        for op in mine
        if op.value is not None and not any(o.ctx.covers(op.dot) for o in mine if o is not op)
    )


def full_anti_entropy(replicas: list[Replica]) -> None:
    for _ in range(2):
        for r in replicas:
            for other in replicas:
                if other is not r:
                    r.pull_from(other)


def complete_watermarks_and_gc(replicas: list[Replica]) -> None:
    for r in replicas:
        for other in replicas:
            r.wm = r.wm.update_peer(other.id, other.nc)
        r.gc()


def nothing_left_of(replicas: list[Replica], key: Hashable) -> bool:
    return all(key not in r.store and key not in r.dkm.to_dict().values() for r in replicas)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "delete", "read", "pull", "pull", "gc"]),
        st.integers(0, 3),
        st.integers(0, 3),
        st.integers(0, 2),
        st.integers(0, 1000),
    ),
    max_size=30,
)


@HEAVY
@given(st.integers(2, 4), st.integers(1, 3), OPS)
def test_replicas_converge_and_a_propagated_delete_leaves_nothing(
    n: int, nkeys: int, steps: list[tuple[str, int, int, int, int]]
) -> None:
    ids = [f"r{i}" for i in range(n)]
    replicas = [Replica.start(node, ids) for node in ids]
    keys = [f"k{i}" for i in range(nkeys)]
    contexts: dict[Hashable, list[VersionVector]] = {k: [VersionVector()] for k in keys}
    ops: list[Op] = []
    for step, (kind, i, j, k, pick) in enumerate(steps):
        r, other, key = replicas[i % n], replicas[j % n], keys[k % nkeys]
        ctx = contexts[key][pick % len(contexts[key])]
        if kind == "write":
            ops.append(Op(key, r.write(key, f"v{step}", ctx), f"v{step}", ctx))
        elif kind == "delete":
            ops.append(Op(key, r.delete(key, ctx), None, ctx))
        elif kind == "read":
            contexts[key].append(r.read(key).context())
        elif kind == "pull" and other is not r:
            other.pull_from(r)
        elif kind == "gc":
            r.gc()

    # Every replica converges to what the causal model of the history says.
    full_anti_entropy(replicas)
    for key in keys:
        expected = expected_values(ops, key)
        for r in replicas:
            assert sorted(r.read(key).items()) == expected, (r.id, key)

    # Delete the first key with a context that covers everything, then propagate and collect.
    victim = keys[0]
    coordinator = replicas[len(ops) % n]
    coordinator.delete(victim, coordinator.read(victim).context())
    full_anti_entropy(replicas)
    complete_watermarks_and_gc(replicas)
    assert nothing_left_of(replicas, victim)
    for r in replicas:
        assert r.read(victim).values() == []
        assert r.dkm.is_empty()  # a complete watermark prunes every dot
        for key in keys[1:]:
            assert sorted(r.read(key).items()) == expected_values(ops, key)
            assert (key in r.store) == bool(expected_values(ops, key))


def test_delete_then_heal_concrete() -> None:
    """Two replicas, one key: write, replicate, delete on the other side, heal, collect."""
    a, b = (Replica.start(node, ["a", "b"]) for node in ("a", "b"))
    a.write("k", "v1", VersionVector())
    b.pull_from(a)
    assert b.read("k").values() == ["v1"]
    deleted_at = b.delete("k", b.read("k").context())
    assert deleted_at == ("b", 1)
    assert "k" not in b.store  # b's own clock covers the whole delete: nothing to keep on b
    a.pull_from(b)
    assert a.read("k").values() == []
    complete_watermarks_and_gc([a, b])
    assert nothing_left_of([a, b], "k")


def test_concurrent_write_survives_a_delete() -> None:
    a, b = (Replica.start(node, ["a", "b"]) for node in ("a", "b"))
    a.write("k", "v1", VersionVector())
    b.pull_from(a)
    ctx = b.read("k").context()
    b.delete("k", ctx)
    a.write("k", "v2", ctx)  # same context as the delete: concurrent with it
    full_anti_entropy([a, b])
    complete_watermarks_and_gc([a, b])
    assert a.read("k").values() == b.read("k").values() == ["v2"]
    assert "k" in a.store and "k" in b.store
