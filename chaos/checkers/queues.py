"""Persistent-session queues: every acknowledged QoS 1 publish reaches each subscriber it expects at least once;
duplicates are counted per (subscriber, message); a message nobody published is unexpected."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from chaos.checkers.result import Check
from chaos.history import Operation


def check_queues(ops: Sequence[Operation], loss_allowed: bool = False, faults: Sequence[int] = (),
                 window_s: float = 2.0) -> Check:
    """`loss_allowed`: the mode gives up consistency (trade_consistency), so lost messages are reported but are
    not a safety failure. `faults`: harness times (ns) when a fault began; a lost message acknowledged within
    `window_s` after one (before the nodes could have detected it) is also counted as `lost_in_detection_window`,
    which tells a loss of frames written to a link that then broke from any other loss."""
    check = Check("queues", None)
    received: dict[str, Counter[str]] = defaultdict(Counter)
    last_drain: dict[str, int] = {}
    drains = 0
    for op in ops:
        if op.f != "drain":
            continue
        client = str((op.argument or {}).get("client"))
        last_drain[client] = max(last_drain.get(client, 0), op.invoked)
        if op.acknowledged and isinstance(op.result, dict):
            drains += 1
            received[client].update(str(m) for m in op.result.get("msgs", []))
    attempted: dict[str, set[str]] = {}
    failed: set[str] = set()
    acked = lost = unexpected = info_delivered = in_window = 0
    window_ns = int(window_s * 1e9)
    for op in ops:
        arg = op.argument or {}
        if op.f != "publish" or arg.get("retain") or not arg.get("expect"):
            continue
        msg = str(arg["msg"])
        expect = [str(c) for c in arg["expect"]]
        if op.outcome == "fail":
            failed.add(msg)
            continue
        attempted[msg] = set(expect)
        if op.outcome == "info":
            info_delivered += any(received[c][msg] for c in expect)
            continue
        acked += 1
        for client in expect:
            if client not in last_drain:
                lost += 1
                check.problem(f"lost: {msg} for {client}, which never drained")
            elif op.completed is not None and op.completed < last_drain[client] and not received[client][msg]:
                lost += 1
                early = any(f <= op.completed <= f + window_ns for f in faults)
                in_window += early
                when = " (acknowledged within the detection window of a fault)" if early else ""
                check.problem(f"lost: {msg} acknowledged to {op.process} on {op.node}, never reached {client}{when}")
    duplicates = 0
    for client, counts in sorted(received.items()):
        for msg, n in sorted(counts.items()):
            if n > 1:
                duplicates += n - 1
            if client not in attempted.get(msg, set()):
                unexpected += n
                why = "after a refused publish" if msg in failed else "never published to it"
                check.problem(f"unexpected: {msg} at {client}, {why}")
    check.figures = {"acknowledged": acked, "lost": lost, "lost_in_detection_window": in_window,
                     "duplicates": duplicates, "unexpected": unexpected,
                     "refused": len(failed), "unknown_outcome_delivered": info_delivered, "drains": drains,
                     "loss_allowed": loss_allowed}
    if drains and (acked or unexpected):
        check.safe = unexpected == 0 and (loss_allowed or lost == 0)
    check.summary = f"{acked} acked, lost {lost}, duplicates {duplicates}, unexpected {unexpected}"
    if not acked:
        check.summary += " (nothing acknowledged: loss not checked)"
    return check
