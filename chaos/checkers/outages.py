"""Time without a connection: for each client that means to stay connected (the steady workload's processes),
every stretch from the end of a connection it did not ask for (`server-disconnect`: the node told it to go, as
a drain does; `lost`) to its next accepted `connect`. A report, not a safety property, with one exception: a
client that must stay to the end (a subscriber, which the workload keeps connected until its final drain) and
is still without a connection at the end of the history never came back, and fails the check."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from chaos.checkers.result import Check, quantiles
from chaos.history import Operation

INVOLUNTARY = ("server-disconnect", "lost")


@dataclass(frozen=True)
class Outage:
    process: str
    start: int  # harness time (ns) the connection ended
    end: int | None  # when the next connect was accepted; None: never

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else (self.end - self.start) / 1e9


def outages(ops: Sequence[Operation], prefix: str) -> list[Outage]:
    """Every outage of the processes whose names start with `prefix`, in order of process and time."""
    by_process: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        if op.process.startswith(prefix) and op.f in ("connect", "disconnect", *INVOLUNTARY):
            by_process[op.process].append(op)
    out: list[Outage] = []
    for process, seq in sorted(by_process.items()):
        seq.sort(key=lambda o: o.invoked)
        away_since: int | None = None
        connected = False
        for op in seq:
            if op.f == "connect":
                if op.acknowledged:
                    if away_since is not None:
                        out.append(Outage(process, away_since, op.completed or op.invoked))
                        away_since = None
                    connected = True
            elif op.f == "disconnect":  # asked for by the client: not an outage
                connected = False
            elif connected:
                connected = False
                away_since = op.invoked
        if away_since is not None:
            out.append(Outage(process, away_since, None))
    return out


def check_outages(ops: Sequence[Operation], prefix: str, must_stay: str) -> Check:
    """`prefix`: the processes measured; `must_stay`: the prefix of those that must be connected at the end."""
    check = Check("outages", None)
    found = outages(ops, prefix)
    measured = {op.process for op in ops if op.process.startswith(prefix) and op.f == "connect"}
    gaps = [o.seconds for o in found if o.seconds is not None]
    per_client: dict[str, float] = defaultdict(float)
    for o in found:
        if o.seconds is not None:
            per_client[o.process] += o.seconds
    never_back = sorted(o.process for o in found if o.end is None and o.process.startswith(must_stay))
    for process in never_back:
        check.problem(f"{process}: without a connection from its last disconnect to the end")
    check.figures = {"clients": len(measured), "clients_disconnected": len({o.process for o in found}),
                     "outages": len(found), "outage_s": quantiles([g for g in gaps if g is not None]),
                     "per_client_total_s": quantiles(list(per_client.values())), "never_back": never_back}
    if measured:
        check.safe = not never_back
    q = check.figures["outage_s"]
    check.summary = (f"{len(found)} outages of {len(measured)} clients; without a connection p50 {q['p50']} s, "
                     f"p99 {q['p99']} s, max {q['max']} s; never back {len(never_back)}")
    return check
