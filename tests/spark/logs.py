"""Hand-made replication-log lines (docs/replication-log.md) for the Spark tests.

Times are given in milliseconds from T0 (an arbitrary wall clock) and written as `ts` in nanoseconds; a
node `n1` has the replica id `n1#1`. Keys are topics under the `retain` prefix unless told otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

T0_MS = 1_795_330_000_000  # 2026-11-21T...; any wall clock works
MS = 1_000_000


def ts(ms: float) -> int:
    return T0_MS * MS + int(ms * MS)


def rid(node: str) -> str:
    return f"{node}#1"


def pkey(topic: str, prefix: str = "retain") -> str:
    """The report's key id for a topic (events.normalize)."""
    return f'{prefix} ["","{topic}"]'


def _line(node: str, at_ms: float, event: str, hlc_ms: float | None = None, logical: int = 0,
          **fields: Any) -> dict[str, Any]:
    wall = T0_MS + int(at_ms if hlc_ms is None else hlc_ms)
    return {"schema": 1, "ts": ts(at_ms), "node": node, "hlc": [wall, logical, rid(node)], "event": event, **fields}


def write(node: str, at_ms: float, topic: str, counter: int, *, hlc_ms: float | None = None, logical: int = 0,
          op: str = "put", writeback: bool = False, prefix: str = "retain") -> dict[str, Any]:
    fields: dict[str, Any] = {
        "prefix": prefix, "key": ["", topic], "dot": [rid(node), counter], "op": op,
        "value": None if op == "delete" else "kpPP", "context": {},
    }
    if writeback:
        fields["writeback"] = True
    return _line(node, at_ms, "md_write", hlc_ms, logical, **fields)


def apply(node: str, at_ms: float, topic: str, origin: str, counter: int, *, via: str = "broadcast",
          siblings: int = 1, prefix: str = "retain") -> dict[str, Any]:
    return _line(node, at_ms, "md_apply", origin=rid(origin), prefix=prefix, key=["", topic],
                 dot=[rid(origin), counter], via=via, siblings=siblings)


def view(node: str, at_ms: float, groups: list[list[str]]) -> dict[str, Any]:
    members = sorted(n for g in groups for n in g)
    mine = next(g for g in groups if node in g)
    return _line(node, at_ms, "cluster_view", members=members, reachable=sorted(mine), groups=groups,
                 ready=len(groups) == 1, majority=2 * len(mine) > len(members))


def exchange(node: str, at_ms: float, peer: str, *, result: str = "ok", received: int = 0, repaired: int = 0,
             sent: int = 100, got: int = 200, duration: float = 0.01, asked: int = 0) -> dict[str, Any]:
    return _line(node, at_ms, "md_exchange", peer=peer, result=result, rounds=1, dots_asked=asked,
                 objects_received=received, repaired=repaired, gaps=0, bytes_sent=sent, bytes_received=got,
                 duration=duration, hit_ratio=repaired / received if received else 0.0)


def gc(node: str, at_ms: float, pruned: int, deleted: int = 0) -> dict[str, Any]:
    return _line(node, at_ms, "md_gc", dots_pruned=pruned, keys_deleted=deleted)


def replicas(node: str, at_ms: float, under: bool, sessions: int = 0, messages: int = 0, writes: int = 0,
             peaks: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """A queue_replicas line: a window of under-replication starts (`under`) or ends (with its `peaks`)."""
    fields: dict[str, Any] = {"under_replicated": under, "sessions": sessions, "messages": messages, "writes": writes}
    if peaks is not None:
        fields.update(peak_sessions=peaks[0], peak_messages=peaks[1], peak_writes=peaks[2])
    return _line(node, at_ms, "queue_replicas", **fields)


def write_logs(directory: Path, lines: Iterable[Mapping[str, Any] | str]) -> Path:
    """One `NODE/replication.log` per node (raw strings go to n1's file); returns `directory`."""
    per_node: dict[str, list[str]] = {}
    for line in lines:
        if isinstance(line, str):
            per_node.setdefault("n1", []).append(line)
        else:
            per_node.setdefault(str(line.get("node", "n1")), []).append(json.dumps(line))
    for node, rows in per_node.items():
        path = directory / node / "replication.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return directory
