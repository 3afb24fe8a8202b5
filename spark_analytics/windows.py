"""Which partitions count, and the fault windows of a chaos run's nemesis record. Pure Python over a few rows.

The nodes' views make more partitions than the network had: a node that joins lists a member it has no link to
yet for a few milliseconds, and when the nodes stop at the end of a run each sees the others go. `sort_out`
keeps the partitions that are faults and says why it drops the others:

- *shorter than the detection time*: it lasted no longer than `cluster.detect_timeout` (a real partition is
  only seen after that long without a frame, so it lasts longer; a join blip lasts milliseconds);
- *the join of X*: it began within the detection time of X's first view with other members (its join);
- *the stop of X*: it began after X's log ended, or within the detection time before (X stops, the others see
  it go).

X is the node whose view began the partition, or a node that view split off.

`fault_windows` reads the nemesis's own steps (history lines of process `nemesis`, docs/chaos.md): a window
opens with the first fault in force and closes when every fault is undone, at the time the nemesis took the
fault to end (the start of a heal, resume or unskew step; the completion of a restart or join).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_NS = 1_000_000_000


@dataclass(frozen=True)
class Partition:
    """A partition from the views: when it began and healed (None: open at the end of the logs), the node whose
    view began it and the nodes that view split off."""

    start_ts: int
    end_ts: int | None
    start_node: str | None = None
    split_off: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dropped:
    partition: Partition
    reason: str


def split_off(viewer: str | None, groups: Sequence[Sequence[str]] | None) -> tuple[str, ...]:
    """The nodes outside the viewer's own group, sorted."""
    return tuple(sorted(n for g in groups or () if viewer not in g for n in g))


def sort_out(
    parts: Iterable[Partition],
    first_joined: Mapping[str, int],
    last_line: Mapping[str, int],
    end_of_logs: int,
    detect_ns: int,
) -> tuple[list[Partition], list[Dropped]]:
    """(kept, dropped with the reason), both in start order. `first_joined`: per node, its first view with other
    members; `last_line`: per node, the `ts` of its last log line; `end_of_logs`: the last line of all."""
    kept: list[Partition] = []
    dropped: list[Dropped] = []
    for p in sorted(parts, key=lambda p: p.start_ts):
        involved = sorted({*p.split_off, *([p.start_node] if p.start_node else [])})
        stopped = [n for n in involved if n in last_line and p.start_ts >= last_line[n] - detect_ns]
        joined = [n for n in involved if n in first_joined and abs(p.start_ts - first_joined[n]) <= detect_ns]
        lasted = (p.end_ts if p.end_ts is not None else end_of_logs) - p.start_ts
        if stopped:
            dropped.append(Dropped(p, f"the stop of {', '.join(stopped)} (its log ends there)"))
        elif joined:
            dropped.append(Dropped(p, f"the join of {', '.join(joined)}"))
        elif lasted <= detect_ns:
            dropped.append(Dropped(p, f"lasted {lasted / _NS:.3f} s, not longer than the detection time "
                                      f"({detect_ns / _NS:g} s)"))
        else:
            kept.append(p)
    return kept, dropped


# What undoes each kind of fault: the step's first word (docs/chaos.md, the nemesis steps).
_UNDO = {"heal": "network", "resume": "pause", "unskew": "skew", "restart": "kill", "join": "leave"}
_FAULT_WORDS = {"kill", "pause", "skew", "leave"}
# Undone when the step began (in force as soon as it begins), or when it completed (the node is up again).
_ENDS_AT_COMPLETION = {"restart", "join"}


@dataclass(frozen=True)
class NemesisStep:
    """One step as the history records it: the invoke's time, the completion's time and type (`ok`, or `info`
    when it failed) and its text."""

    invoked: int
    completed: int | None
    outcome: str
    text: str


@dataclass(frozen=True)
class FaultWindow:
    start_ts: int
    end_ts: int | None  # None: still in force at the end of the record
    steps: tuple[str, ...]


def _fault_of(text: str) -> tuple[str, str] | None:
    """(kind, subject) of a fault step; None for a step that undoes one."""
    word, _, rest = text.partition(" ")
    if word in _UNDO or text == "heal":
        return None
    if word in _FAULT_WORDS:
        return word, rest.split(" ")[0]
    return "network", ""  # a cut: `LABEL: a-x-b, ...`


def _undo_of(text: str) -> tuple[str, str] | None:
    word, _, rest = text.partition(" ")
    if word not in _UNDO:
        return None
    return _UNDO[word], "" if word == "heal" else rest.split(" ")[0]


def pair_steps(lines: Iterable[tuple[str, int, str]]) -> list[NemesisStep]:
    """The nemesis steps from its history lines (type, time, step text) in history order: each invoke with the
    next completion of the same text."""
    open_steps: dict[str, int] = {}
    steps: list[NemesisStep] = []
    for kind, time, text in lines:
        if kind == "invoke":
            open_steps[text] = time
        elif text in open_steps:
            steps.append(NemesisStep(open_steps.pop(text), time, kind, text))
    steps += [NemesisStep(t, None, "info", text) for text, t in open_steps.items()]
    return sorted(steps, key=lambda s: s.invoked)


def fault_windows(steps: Iterable[NemesisStep]) -> list[FaultWindow]:
    """The windows during which at least one fault of the nemesis was in force. A step that failed (`info`)
    changed nothing."""
    active: set[tuple[str, str]] = set()
    windows: list[FaultWindow] = []
    start: int | None = None
    texts: list[str] = []
    for step in sorted(steps, key=lambda s: s.invoked):
        if step.outcome != "ok":
            continue
        fault = _fault_of(step.text)
        if fault is not None:
            if not active:
                start, texts = step.invoked, []
            active.add(fault)
            texts.append(step.text)
            continue
        undo = _undo_of(step.text)
        if undo is None or not active:
            continue
        kind, subject = undo
        active -= {f for f in active if f[0] == kind and (kind == "network" or f[1] == subject)}
        texts.append(step.text)
        if not active and start is not None:
            end = step.completed if step.text.split(" ")[0] in _ENDS_AT_COMPLETION else step.invoked
            windows.append(FaultWindow(start, end, tuple(texts)))
            start = None
    if active and start is not None:
        windows.append(FaultWindow(start, None, tuple(texts)))
    return windows
