"""A causal model of a history of writes, built from the replicas' ``md_write`` log events.

Every write (user put, user delete, write-back) is logged with its dot, its value and the context it
superseded.  The model says which versions must survive on every replica once they converged: a put
survives iff no other write of the same key had it in its context.  A write-back must have written
the resolver's choice among the versions it superseded that were still live in its causal past.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from vmqpy.metadata.memory_network import MemoryNetwork
from vmqpy.metadata.replica import Replica
from vmqpy.metadata.resolve import latest_stamp


@dataclass(frozen=True)
class Op:
    node: str
    prefix: str
    key: tuple[Any, ...]
    dot: tuple[str, int]
    value: Any  # None for a delete
    context: dict[str, int]
    writeback: bool

    def covers(self, dot: tuple[str, int]) -> bool:
        return dot != self.dot and self.context.get(dot[0], 0) >= dot[1]


def ops_of(net: MemoryNetwork) -> list[Op]:
    """Every write of the history, from every node's log (including nodes that crashed)."""
    ops = []
    for node, logs in net.logs.items():
        for entry in logs:
            if entry.event != "md_write":
                continue
            f = entry.fields
            value = None if f["value"] is None else msgpack.unpackb(f["value"], raw=False, strict_map_key=False)
            ops.append(
                Op(node, f["prefix"], tuple(f["key"]), (f["dot"][0], f["dot"][1]), value, dict(f["context"]),
                   bool(f.get("writeback")))
            )
    return ops


def by_key(ops: list[Op]) -> dict[tuple[str, tuple[Any, ...]], list[Op]]:
    out: dict[tuple[str, tuple[Any, ...]], list[Op]] = {}
    for op in ops:
        out.setdefault((op.prefix, op.key), []).append(op)
    return out


def expected_state(ops: list[Op]) -> dict[tuple[str, tuple[Any, ...]], list[tuple[tuple[str, int], Any]]]:
    """(prefix, key) -> the versions that must survive: puts no other write of the key superseded."""
    out = {}
    for fk, mine in by_key(ops).items():
        live = sorted(
            (op.dot, op.value) for op in mine if op.value is not None and not any(o.covers(op.dot) for o in mine)
        )
        if live:
            out[fk] = live
    return out


def actual_state(replica: Replica) -> dict[tuple[str, tuple[Any, ...]], list[tuple[tuple[str, int], Any]]]:
    dump = replica.dump()
    return {
        (prefix, key): sorted(((n, c), v) for n, c, v in obj["values"])
        for prefix, objs in dump["data"].items()
        for key, obj in objs.items()
        if obj["values"]
    }


def model_errors(net: MemoryNetwork, ops: list[Op] | None = None) -> list[str]:
    """Differences between each live replica and the model (empty when all agree)."""
    ops = ops_of(net) if ops is None else ops
    expected = expected_state(ops)
    errors = []
    for node in net.alive():
        actual = actual_state(net.replicas[node])
        for fk in sorted(set(expected) | set(actual), key=repr):
            if expected.get(fk) != actual.get(fk):
                errors.append(f"{node} {fk}: expected {expected.get(fk)} got {actual.get(fk)}")
    return errors


def writeback_errors(ops: list[Op], members: set[str] | None = None) -> list[str]:
    """A write-back must write the resolver's pick among the live versions of its causal past; with
    ``members`` (a membership that never changed), it must come from the owner: the member owning the
    smallest of those versions' dots (else the smallest member)."""
    errors = []
    for fk, mine in by_key(ops).items():
        for w in mine:
            if not w.writeback:
                continue
            past = [o for o in mine if w.covers(o.dot)]
            frontier = [p for p in past if p.value is not None and not any(q.covers(p.dot) for q in past)]
            if len(frontier) < 2:
                errors.append(f"write-back {w.dot} of {fk} superseded {len(frontier)} live version(s)")
            elif latest_stamp([p.value for p in frontier]) != w.value:
                errors.append(f"write-back {w.dot} of {fk} wrote {w.value}, not the winner of {frontier}")
            if members is not None and frontier:
                owned = [p.dot for p in frontier if p.dot[0] in members]
                owner = min(owned)[0] if owned else min(members)
                if w.node != owner:
                    errors.append(f"write-back {w.dot} of {fk} by {w.node}, but {owner} owns {frontier}")
    return errors


def at_rest_errors(net: MemoryNetwork) -> list[str]:
    """After convergence and GC: one version and no context per live key, no tombstone, nothing
    indexed but the live versions' dots."""
    errors = []
    for node in net.alive():
        dump = net.replicas[node].dump()
        live_dots: set[tuple[str, int]] = set()
        for prefix, objs in dump["data"].items():
            for key, obj in objs.items():
                if len(obj["values"]) != 1 or obj["context"]:
                    errors.append(f"{node} {prefix}/{key}: at rest {obj['values']} ctx {obj['context']}")
                live_dots.update((n, c) for n, c, _ in obj["values"])
        indexed = {(n, c) for n, counters in dump["index"].items() for c in counters}
        if indexed != live_dots:
            errors.append(f"{node}: index holds {sorted(indexed - live_dots)} beyond the live dots")
        if dump["gc_pending"]:
            errors.append(f"{node}: GC pending {dump['gc_pending']}")
    return errors


def gc_done(net: MemoryNetwork) -> bool:
    """No dot waits for GC and no restarted replica waits to declare its unused counters."""
    for node in net.alive():
        stats = net.replicas[node].stats()
        if stats["gc_pending_dots"] or stats["own_holes"]:
            return False
    return True
