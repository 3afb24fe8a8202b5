"""Subscriptions: nothing acknowledged is lost, nothing unexpected appears, an unsubscribe is not undone, and
how long an acknowledged change takes to be visible on every node (stable latency)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chaos.checkers.registers import Write, allowed
from chaos.checkers.result import Check, quantiles
from chaos.history import Operation

Register = tuple[str, str]  # (client, filter)


@dataclass(frozen=True)
class KeyChange:
    """A node's replica of a subscription key changed (from its replication log)."""

    node: str
    ts: int
    client: str
    filter: str
    present: bool


def registers(ops: Sequence[Operation], before: int | None) -> dict[Register, list[Write]]:
    out: dict[Register, list[Write]] = defaultdict(list)
    for op in ops:
        if op.f not in ("subscribe", "unsubscribe") or op.outcome == "fail":
            continue
        if before is not None and op.invoked >= before:
            continue
        arg = op.argument or {}
        out[(str(arg["client"]), str(arg["filter"]))].append(
            Write(op.invoked, op.completed, op.acknowledged, op.f == "subscribe"))
    return out


def check_subscriptions(
    ops: Sequence[Operation],
    reads: Mapping[str, Mapping[str, Sequence[str]]],
    changes: Sequence[KeyChange] = (),
    read_started: int | None = None,
    consistency_traded: bool = False,
) -> Check:
    """`reads`: node -> client -> filters, the final read of every node (after the heal).

    `consistency_traded` (trade_consistency): an unsubscribe made on one side of a partition does not remove a
    subscription made concurrently on the other (a subscribe beats a concurrent unsubscribe, by design), so an
    unsubscribe undone in real-time order is reported but is not a safety failure."""
    check = Check("subscriptions", None)
    regs = registers(ops, read_started)
    acked = sum(1 for ws in regs.values() for w in ws if w.acknowledged)
    lost = unexpected = resurrected = 0
    for node, read in sorted(reads.items()):
        observed = {(client, flt) for client, filters in read.items() for flt in filters}
        for reg in sorted(set(regs) | observed):
            present = reg in observed
            writes = regs.get(reg, [])
            if present and not any(w.value for w in writes):
                unexpected += 1
                check.problem(f"unexpected: {reg[0]} {reg[1]} on {node}, never subscribed")
            elif present not in allowed(writes, False):
                if present:
                    resurrected += 1
                    check.problem(f"unsubscribe undone: {reg[0]} {reg[1]} present on {node}")
                else:
                    lost += 1
                    check.problem(f"lost: {reg[0]} {reg[1]} acknowledged, absent on {node}")
    latencies, never = stable_latency(ops, changes, sorted(reads), read_started)
    check.figures = {"acknowledged": acked, "registers": len(regs), "nodes_read": len(reads), "lost": lost,
                     "unexpected": unexpected, "resurrected": resurrected,
                     "stable_latency_ms": quantiles(latencies), "never_stable": never,
                     "consistency_traded": consistency_traded}
    if reads:
        check.safe = lost == 0 and unexpected == 0 and (consistency_traded or resurrected == 0)
    lat = check.figures["stable_latency_ms"]
    stable = ("no change measured" if lat["max"] is None else f"stable p50/max {lat['p50']}/{lat['max']} ms")
    check.summary = f"{acked} acked, lost {lost}, unexpected {unexpected}, undone {resurrected}; {stable}"
    return check


def stable_latency(
    ops: Sequence[Operation], changes: Sequence[KeyChange], nodes: Sequence[str], before: int | None
) -> tuple[list[float], int]:
    """For the last acknowledged change of every register: ms from its acknowledgement until the last node
    showed it (0 when every node showed it before the acknowledgement); and how many no node... never showed."""
    by_key: dict[tuple[str, str, str], list[KeyChange]] = defaultdict(list)
    for change in changes:
        by_key[(change.node, change.client, change.filter)].append(change)
    last: dict[Register, Operation] = {}
    for op in ops:
        if op.f in ("subscribe", "unsubscribe") and op.acknowledged and (before is None or op.invoked < before):
            arg = op.argument or {}
            reg = (str(arg["client"]), str(arg["filter"]))
            if reg not in last or last[reg].invoked < op.invoked:
                last[reg] = op
    latencies: list[float] = []
    never = 0
    if not changes:
        return latencies, never
    for (client, flt), op in sorted(last.items()):
        assert op.completed is not None
        present = op.f == "subscribe"
        seen: list[int] = []
        for node in nodes:
            hits = [c.ts for c in by_key.get((node, client, flt), []) if c.present == present and c.ts >= op.invoked]
            if hits:
                seen.append(min(hits))
        if len(seen) < len(nodes):
            never += 1
            continue
        latencies.append(max(0.0, (max(seen) - op.completed) / 1e6))
    return latencies, never
