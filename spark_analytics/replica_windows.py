"""Windows of under-replication of the queue replicas, from the `queue_replicas` lines (docs/replication-log.md).

A node writes one line where a window starts (`under_replicated: true`: some of its persistent sessions are not
confirmed on all their replica nodes, or some acknowledged writes miss a copy) and one where it ends (with the
peak counts of the window). The lines are few (two per window), so Spark reads and filters them
(events.replica_states) and this module pairs them on the driver: pure Python, table-tested.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StateLine", "UnderWindow", "summarize", "windows_of"]

LISTED = 50  # windows listed one by one in the summary (the longest first)


@dataclass(frozen=True, slots=True)
class StateLine:
    """One queue_replicas line."""

    node: str
    ts: int
    under: bool
    sessions: int = 0
    messages: int = 0
    writes: int = 0
    peak_sessions: int = 0
    peak_messages: int = 0
    peak_writes: int = 0


@dataclass(frozen=True, slots=True)
class UnderWindow:
    """`end` is "logged" (the node logged its end), "restart" (a new window began without an end: the node
    restarted within it; it ends at the new start) or "open" (still open at the end of the node's log, which is
    where it is cut)."""

    node: str
    start_ts: int
    end_ts: int
    end: str
    peak_sessions: int
    peak_messages: int
    peak_writes: int

    @property
    def duration_s(self) -> float:
        return (self.end_ts - self.start_ts) / 1e9


def windows_of(lines: Iterable[StateLine], last_ts: Mapping[str, int]) -> list[UnderWindow]:
    """The windows of every node, in order of their start; `last_ts`: the last line of each node's log."""
    by_node: dict[str, list[StateLine]] = {}
    for line in lines:
        by_node.setdefault(line.node, []).append(line)
    out: list[UnderWindow] = []
    for node, node_lines in by_node.items():
        start: StateLine | None = None
        for line in sorted(node_lines, key=lambda x: x.ts):
            if line.under:
                if start is not None:  # no end was logged: the node restarted within the window
                    out.append(_window(start, line.ts, "restart", start))
                start = line
            elif start is not None:
                out.append(_window(start, line.ts, "logged", line))
                start = None
        if start is not None:
            out.append(_window(start, max(start.ts, last_ts.get(node, start.ts)), "open", start))
    return sorted(out, key=lambda w: (w.start_ts, w.node))


def _window(start: StateLine, end_ts: int, end: str, peaks: StateLine) -> UnderWindow:
    if end == "logged":
        counts = (max(peaks.peak_sessions, start.sessions), max(peaks.peak_messages, start.messages),
                  max(peaks.peak_writes, start.writes))
    else:
        counts = (start.sessions, start.messages, start.writes)
    return UnderWindow(start.node, start.ts, end_ts, end, *counts)


def summarize(lines_seen: int, windows: list[UnderWindow]) -> dict[str, Any]:
    """The report's `queue_replicas` section."""
    by_node: dict[str, dict[str, Any]] = {}
    for w in windows:
        entry = by_node.setdefault(w.node, {"windows": 0, "total_s": 0.0, "longest_s": 0.0})
        entry["windows"] += 1
        entry["total_s"] += w.duration_s
        entry["longest_s"] = max(entry["longest_s"], w.duration_s)
    longest = sorted(windows, key=lambda w: -w.duration_s)[:LISTED]
    return {
        "recorded": lines_seen > 0,
        "lines": lines_seen,
        "windows": len(windows),
        "open_at_end": sum(1 for w in windows if w.end == "open"),
        "total_s": round(sum(w.duration_s for w in windows), 3),
        "longest_s": round(max((w.duration_s for w in windows), default=0.0), 3),
        "peak_sessions": max((w.peak_sessions for w in windows), default=0),
        "peak_messages": max((w.peak_messages for w in windows), default=0),
        "peak_writes": max((w.peak_writes for w in windows), default=0),
        "by_node": {node: {k: round(v, 3) if isinstance(v, float) else v for k, v in entry.items()}
                    for node, entry in sorted(by_node.items())},
        "longest": [{"node": w.node, "start_ts": w.start_ts, "end_ts": w.end_ts, "duration_s": round(w.duration_s, 3),
                     "end": w.end, "peak_sessions": w.peak_sessions, "peak_messages": w.peak_messages,
                     "peak_writes": w.peak_writes} for w in longest],
    }
