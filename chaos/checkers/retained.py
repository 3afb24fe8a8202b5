"""Retained messages: after the heal every node holds the same value per topic; it is a value the register
rules allow; no acknowledged clear is undone; and it is the winner the store's resolution must pick among the
versions written (later HLC stamp, node breaking ties; a put concurrent with a clear survives it), computed
from the nodes' replication logs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chaos.checkers.registers import Write, allowed, overwriting_writes
from chaos.checkers.result import Check
from chaos.history import Operation

Stamp = tuple[int, int, str]


@dataclass(frozen=True)
class RetainWrite:
    """An md_write of a retain key (from a replication log): `msg` is the payload, None for a clear."""

    topic: str
    dot: tuple[str, int]
    context: Mapping[str, int] = field(default_factory=dict)
    hlc: Stamp = (0, 0, "")
    msg: str | None = None


def winner(writes: Sequence[RetainWrite]) -> str | None:
    """The value every node must end with: the surviving put with the greatest stamp, None when none survives.

    A version survives unless some write's context covers its dot (that write saw it and replaced it)."""
    covered: set[tuple[str, int]] = set()
    for w in writes:
        for node, counter in w.context.items():
            for other in writes:
                if other.dot[0] == node and other.dot[1] <= counter:
                    covered.add(other.dot)
    survivors = [w for w in writes if w.dot not in covered and w.msg is not None]
    if not survivors:
        return None
    return max(survivors, key=lambda w: (w.hlc, w.dot)).msg


def registers(ops: Sequence[Operation], before: int | None) -> dict[str, list[Write]]:
    out: dict[str, list[Write]] = defaultdict(list)
    for op in ops:
        arg = op.argument or {}
        if op.f != "publish" or not arg.get("retain") or op.outcome == "fail":
            continue
        if before is not None and op.invoked >= before:
            continue
        out[str(arg["topic"])].append(Write(op.invoked, op.completed, op.acknowledged, arg.get("msg")))
    return out


def check_retained(
    ops: Sequence[Operation],
    reads: Mapping[str, Mapping[str, str | None]],
    log_writes: Sequence[RetainWrite] | None = None,
    read_started: int | None = None,
    consistency_traded: bool = False,
) -> Check:
    """`reads`: node -> topic -> msg (None: no retained message), read on every node after the heal.

    `consistency_traded` (trade_consistency): both sides of a partition accept writes, so a write that came
    later in real time can be concurrent with an earlier one and lose to it by design (a clear made on one side
    does not remove a value published on the other). Lost, stale and undone values are then reported but are
    not a safety failure; disagreement, unexpected values and a value that is not the resolution's winner (which
    covers a clear undone causally: a clear that saw a value never lets it survive) still are."""
    check = Check("retained", None)
    regs = registers(ops, read_started)
    topics = sorted(set(regs) | {t for read in reads.values() for t in read})
    disagree = lost = unexpected = stale = undone = not_winner = undetermined = 0
    by_topic: dict[str, list[RetainWrite]] = defaultdict(list)
    for w in log_writes or ():
        by_topic[w.topic].append(w)
    for topic in topics:
        values = {node: read.get(topic) for node, read in reads.items()}
        if len(set(values.values())) > 1:
            disagree += 1
            check.problem(f"nodes disagree on {topic}: {values}")
        writes = regs.get(topic, [])
        attempted = {w.value for w in writes}
        ok_values = allowed(writes, None)
        for node, value in sorted(values.items()):
            if value in ok_values:
                continue
            if value is None:
                lost += 1
                check.problem(f"lost: {topic} empty on {node}, allowed {sorted(map(str, ok_values))}")
            elif value not in attempted:
                unexpected += 1
                check.problem(f"unexpected: {topic}={value} on {node}, never published")
            elif any(w.value is None for w in overwriting_writes(value, writes)):
                undone += 1
                check.problem(f"clear undone: {topic}={value} on {node} after an acknowledged clear")
            else:
                stale += 1
                check.problem(f"stale: {topic}={value} on {node}, overwritten by an acknowledged publish")
        if log_writes is None or not reads:
            continue
        logged = {w.msg for w in by_topic.get(topic, [])}
        if any(w.acknowledged and w.value is not None and w.value not in logged for w in writes):
            undetermined += 1  # a node's log lost lines (kill -9): the winner cannot be computed
            continue
        expected = winner(by_topic.get(topic, []))
        for node, value in sorted(values.items()):
            if value != expected:
                not_winner += 1
                check.problem(f"not the winner: {topic}={value} on {node}, resolution picks {expected}")
    acked = sum(1 for ws in regs.values() for w in ws if w.acknowledged)
    check.figures = {"topics": len(topics), "acknowledged": acked, "disagreeing_topics": disagree, "lost": lost,
                     "unexpected": unexpected, "stale": stale, "clear_undone": undone, "not_winner": not_winner,
                     "winner_undetermined": undetermined, "consistency_traded": consistency_traded}
    if reads:
        real_time = lost == stale == undone == 0
        check.safe = disagree == unexpected == not_winner == 0 and (consistency_traded or real_time)
    check.summary = (f"{acked} acked on {len(topics)} topics, disagree {disagree}, lost {lost}, stale {stale}, "
                     f"clear undone {undone}, not winner {not_winner}, unexpected {unexpected}")
    return check
