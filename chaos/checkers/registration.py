"""Registration: moments when one client id had more than one live session, and how long such duplicates
outlived a heal.

A session is live from its CONNACK (a `connect` that succeeded) until its client disconnects, the server
disconnects it (`server-disconnect`) or the connection is lost (`lost`), whichever the client saw first.
Every session that starts while another session of the same client id is live is one *moment* of duplicates.
A duplicate still live `bound_s` after the last heal was never resolved: that fails the check.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from chaos.checkers.result import Check, quantiles
from chaos.history import Operation

ENDS = ("disconnect", "server-disconnect", "lost")


@dataclass(frozen=True)
class Session:
    client: str
    process: str
    node: str
    start: int
    end: int


def sessions(ops: Sequence[Operation], end_of_history: int) -> list[Session]:
    by_process: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        if op.f == "connect" or op.f in ENDS:
            by_process[op.process].append(op)
    out: list[Session] = []
    for seq in by_process.values():
        seq.sort(key=lambda o: o.invoked)
        live: Operation | None = None
        for op in seq:
            if op.f == "connect":
                if live is not None:  # a new connect without a seen end: the old one ended by then
                    out.append(_session(live, op.invoked))
                live = op if op.acknowledged else None
            elif live is not None:
                out.append(_session(live, op.invoked))
                live = None
        if live is not None:
            out.append(_session(live, end_of_history))
    return out


def _session(connect: Operation, end: int) -> Session:
    assert connect.completed is not None
    client = str((connect.argument or {}).get("client"))
    return Session(client, connect.process, connect.node, connect.completed, max(end, connect.completed))


def check_registration(ops: Sequence[Operation], heals: Sequence[int] = (), bound_s: float = 30.0) -> Check:
    """`heals`: harness times (ns) when the network was healed."""
    check = Check("registration", None)
    ends = [op.completed or op.invoked for op in ops]
    end_of_history = max(ends) if ends else 0
    all_sessions = sessions(ops, end_of_history)
    by_client: dict[str, list[Session]] = defaultdict(list)
    for s in all_sessions:
        by_client[s.client].append(s)
    moments = 0
    overlap_ms: list[float] = []
    after_heal_s: list[float] = []
    unresolved = 0
    last_heal = max(heals) if heals else None
    for client, group in sorted(by_client.items()):
        group.sort(key=lambda s: s.start)
        for i, s in enumerate(group):
            for other in group[:i]:
                if other.start <= s.start < other.end:
                    moments += 1
                    end = min(other.end, s.end)
                    overlap_ms.append((end - s.start) / 1e6)
                    live_at = [h for h in heals if s.start <= h < end]
                    if live_at:
                        after_heal_s.append((end - max(live_at)) / 1e9)
                    bound_ns = bound_s * 1e9
                    if last_heal is not None and end - last_heal > bound_ns and s.start < last_heal + bound_ns:
                        unresolved += 1
                        check.problem(f"{client}: sessions on {other.node} and {s.node} both live "
                                      f"{(end - last_heal) / 1e9:.1f}s after the last heal")
                    elif len(check.problems) < 5:
                        check.problem(f"{client}: live on {other.node} and {s.node} for {overlap_ms[-1]:.0f} ms")
                    break
    connects = sum(1 for op in ops if op.f == "connect")
    accepted = sum(1 for op in ops if op.f == "connect" and op.acknowledged)
    check.figures = {"connects": connects, "accepted": accepted, "sessions": len(all_sessions),
                     "duplicate_moments": moments, "overlap_ms": quantiles(overlap_ms),
                     "resolved_after_heal_s": quantiles(after_heal_s), "unresolved": unresolved}
    if connects:
        check.safe = unresolved == 0
    res = check.figures["resolved_after_heal_s"]["max"]
    resolved = "none live across a heal" if res is None else f"resolved after heal within {res} s"
    check.summary = (f"{accepted}/{connects} connects accepted, {moments} moments with 2 live sessions, "
                     f"{resolved}, unresolved {unresolved}")
    return check
