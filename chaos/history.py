"""The history of an experiment: one line per client operation event, in the order they happened.

The format is the contract read by the Spark reports (docs/analytics.md, "The history"): `type` is `invoke`,
`ok`, `fail` or `info`; `process` the logical client; `f` the operation; `value` its argument or result; `node`
the broker node; `time` nanoseconds since the Unix epoch. Operations of our own beyond the contract
(`connect`, `disconnect`, `server-disconnect`) are ignored by readers that do not know them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

OpType = Literal["invoke", "ok", "fail", "info"]
TYPES: frozenset[str] = frozenset({"invoke", "ok", "fail", "info"})


@dataclass(frozen=True)
class Event:
    """One line of the history."""

    type: OpType
    process: str
    f: str
    value: Any
    node: str
    time: int

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "process": self.process, "f": self.f, "value": self.value,
                           "node": self.node, "time": self.time}, separators=(",", ":"), sort_keys=False)

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> Event:
        kind = raw["type"]
        if kind not in TYPES:
            raise ValueError(f"unknown event type {kind!r}")
        return Event(kind, str(raw["process"]), str(raw["f"]), raw.get("value"), str(raw.get("node", "")),
                     int(raw["time"]))


@dataclass(frozen=True)
class Operation:
    """An invocation and its completion: `outcome` is `ok`, `fail` or `info` (never completed, or unknown)."""

    process: str
    f: str
    node: str
    invoked: int
    completed: int | None  # None: unknown outcome, treated as never completed
    outcome: Literal["ok", "fail", "info"]
    argument: Any
    result: Any

    @property
    def acknowledged(self) -> bool:
        return self.outcome == "ok"


def pair(events: Iterable[Event]) -> list[Operation]:
    """Invocations matched with the next event of the same process and `f`; an invocation without one is info.

    Completion events without an invocation (e.g. a `server-disconnect` seen by a client) become operations
    invoked and completed at their own time."""
    open_ops: dict[tuple[str, str], tuple[int, Event]] = {}
    slots: list[Operation | None] = []
    for ev in events:
        key = (ev.process, ev.f)
        if ev.type == "invoke":
            if key in open_ops:  # a second invoke without completion: the first stays unknown
                index, first = open_ops.pop(key)
                slots[index] = _info(first)
            open_ops[key] = (len(slots), ev)
            slots.append(None)
            continue
        if key in open_ops:
            index, inv = open_ops.pop(key)
            completed = ev.time if ev.type != "info" else None
            slots[index] = Operation(ev.process, ev.f, inv.node, inv.time, completed, ev.type, inv.value, ev.value)
        else:
            completed = ev.time if ev.type != "info" else None
            slots.append(Operation(ev.process, ev.f, ev.node, ev.time, completed, ev.type, ev.value, ev.value))
    for index, inv in open_ops.values():
        slots[index] = _info(inv)
    return [op for op in slots if op is not None]


def _info(inv: Event) -> Operation:
    return Operation(inv.process, inv.f, inv.node, inv.time, None, "info", inv.value, None)


def parse_lines(lines: Iterable[str]) -> tuple[list[Event], int]:
    """Events of the JSON lines, and the number of malformed lines left out."""
    events: list[Event] = []
    malformed = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            events.append(Event.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            malformed += 1
    return events, malformed


def read(path: Path) -> tuple[list[Event], int]:
    with path.open(encoding="utf-8") as fh:
        return parse_lines(fh)


class Recorder:
    """Appends events to the history file as they happen (thread-safe) and counts completed operations."""

    def __init__(self, out: TextIO, clock: Any = time.time_ns) -> None:
        self._out = out
        self._clock = clock
        self._lock = threading.Lock()
        self.completed = 0
        self.events: list[Event] = []

    def record(self, type_: OpType, process: str, f: str, value: Any, node: str) -> Event:
        with self._lock:
            ev = Event(type_, process, f, value, node, int(self._clock()))
            self._out.write(ev.to_json() + "\n")
            self.events.append(ev)
            if type_ != "invoke":
                self.completed += 1
            return ev

    def flush(self) -> None:
        with self._lock:
            self._out.flush()


def iter_processes(ops: Iterable[Operation], f: str) -> Iterator[Operation]:
    return (op for op in ops if op.f == f)
