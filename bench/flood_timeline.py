"""When the probe's slow round trips of bench.flood happen, next to what the attacker did at that moment.

The attacker records its events (`open`: a socket connected, `close`: the node closed one, `write`: a slow-loris
byte sent) in bins of `BIN` seconds of the machine's monotonic clock (`EventBins`), which the probe, in another
process of the same machine, shares. `explain` takes the probe's samples (start time, round trip) and, for each
slow one, counts the attacker's events of each kind from `LOOK_BACK` seconds before its start to its end; the
kind with most events is the sample's likely cause ("quiet" when the attacker did little then). Pure: no clock,
no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

BIN = 0.01  # seconds per bin of attacker events
LOOK_BACK = 0.05  # seconds before a sample's start whose events may still delay it (a burst being worked off)
BURST = 50  # events of one kind in a sample's span for that kind to be named its cause
KINDS = ("open", "close", "write")


@dataclass
class EventBins:
    """Counts of attacker events per kind and per `BIN` of time."""

    counts: Counter[tuple[str, int]] = field(default_factory=Counter)

    def record(self, kind: str, at: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown attacker event {kind!r} (one of {', '.join(KINDS)})")
        self.counts[(kind, int(at / BIN))] += 1

    def to_json(self) -> dict[str, list[list[int]]]:
        out: dict[str, list[list[int]]] = {kind: [] for kind in KINDS}
        for (kind, index), count in sorted(self.counts.items()):
            out[kind].append([index, count])
        return out

    @classmethod
    def from_json(cls, data: dict[str, list[list[int]]]) -> EventBins:
        bins = cls()
        for kind, rows in data.items():
            if kind not in KINDS:
                raise ValueError(f"unknown attacker event {kind!r} in the attacker's report")
            for index, count in rows:
                bins.counts[(kind, int(index))] += int(count)
        return bins

    def between(self, kind: str, start: float, end: float) -> int:
        """Events of `kind` in the bins that overlap [start, end]."""
        first, last = int(start / BIN), int(end / BIN)
        if last - first < len(self.counts):
            return sum(self.counts.get((kind, index), 0) for index in range(first, last + 1))
        return sum(count for (k, index), count in self.counts.items() if k == kind and first <= index <= last)


@dataclass(frozen=True)
class SlowSample:
    at: float  # seconds from the attack window's start
    took: float  # seconds
    events: dict[str, int]  # attacker events by kind from LOOK_BACK before the start to the end
    cause: str  # the kind with most events (at least BURST), or "quiet"


def explain(samples: list[tuple[float, float]], bins: EventBins, threshold: float,
            origin: float) -> list[SlowSample]:
    """The samples (start, took) slower than `threshold`, each with the attacker's events around it; `origin`
    (the window's start on the same clock) is subtracted from the times shown."""
    slow = []
    for start, took in samples:
        if took <= threshold:
            continue
        events = {kind: bins.between(kind, start - LOOK_BACK, start + took) for kind in KINDS}
        kind, count = max(events.items(), key=lambda item: item[1])
        slow.append(SlowSample(round(start - origin, 3), took, events, kind if count >= BURST else "quiet"))
    return slow


def causes(slow: list[SlowSample]) -> dict[str, int]:
    """How many slow samples each cause has, most first."""
    return dict(Counter(sample.cause for sample in slow).most_common())
