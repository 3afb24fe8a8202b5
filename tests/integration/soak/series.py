"""The series a soak run records per node, their slopes after warm-up, the bounds they are held to, and the
plot: pure code (no sockets, no processes), tested on its own in tests/unit/test_soak_series.py.

A slope is the least-squares line through the samples taken after the warm-up share of the run, in units per
hour. Why slopes and not end values: a node's memory, descriptors and files rise at start (imports, caches, the
first pages of the database, the WAL reaching its checkpoint size) and then stay level; a leak is a line that
keeps rising. The bounds (`BOUNDS`) are argued in docs/operations.md, section "The soak test"."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["BOUNDS", "Bound", "Event", "Sample", "Slope", "fit", "plot", "slopes", "table", "write_csv"]

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of one node, `t` seconds after the workload started."""

    node: str
    t: float
    rss_bytes: int
    descriptors: int
    data_bytes: int  # every file under the data directory
    stalls: int  # the node's event-loop stall counter, summed over its restarts
    db_bytes: int = 0  # of which broker.db with its -wal and -shm files
    log_bytes: int = 0  # of which the replication log and its rotated files


@dataclass(frozen=True, slots=True)
class Event:
    """Something the run did to the cluster at `t` (a restart, a leave, a join), drawn on the plot."""

    t: float
    what: str


@dataclass(frozen=True, slots=True)
class Bound:
    """The most a healthy node's series may rise after warm-up: `per_hour` in `unit` per hour, plus `allowance`
    (in `unit`) over the measured window, for what a level series still moves in a short window (the WAL
    filled and truncated, the log rotated, the allocator's arenas, a client more or less connected at a sample):
    the slope may be `per_hour + allowance / window_hours`. In a one-hour run (a 36-minute window) the allowance
    adds little; in the 2-minute run of `make test` it makes the bound a check for gross leaks only."""

    series: str  # the Sample field
    label: str
    unit: str
    scale: float  # from the Sample's unit to `unit`
    per_hour: float
    allowance: float

    def limit(self, window_s: float) -> float:
        return self.per_hour + self.allowance / (window_s / HOUR)


#: Argued in docs/operations.md ("The soak test"): data directory 2 MiB/h + 1 MiB; RSS 24 MiB/h + 2 MiB;
#: descriptors 120/h + 3. One leaked descriptor per reconnect at the soak's >= 2 connects/s per node is
#: >= 7,200/h: 28 times the 2-minute limit (255/h), 57 times the hour's (125/h).
BOUNDS: tuple[Bound, ...] = (
    Bound("data_bytes", "data directory", "MiB", 1 / (1 << 20), 2.0, 1.0),
    Bound("rss_bytes", "RSS", "MiB", 1 / (1 << 20), 24.0, 2.0),
    Bound("descriptors", "open descriptors", "descriptors", 1.0, 120.0, 3.0),
)


@dataclass(frozen=True, slots=True)
class Slope:
    node: str
    series: str
    label: str
    unit: str
    per_hour: float
    bound: float
    samples: int
    start: float  # the fitted line's value at the first sample after warm-up, in `unit`
    end: float  # ... and at the last

    @property
    def ok(self) -> bool:
        return self.per_hour <= self.bound


def fit(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of `points` (x, y): dy/dx. Fewer than two distinct x: ValueError."""
    n = len(points)
    if n < 2:
        raise ValueError(f"a slope needs two points, not {n}")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        raise ValueError("a slope needs two distinct x")
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def slopes(samples: Iterable[Sample], since: float, bounds: Sequence[Bound] = BOUNDS) -> list[Slope]:
    """Per node and bounded series, the slope per hour of the samples taken at `since` or later."""
    by_node: dict[str, list[Sample]] = {}
    for s in samples:
        if s.t >= since:
            by_node.setdefault(s.node, []).append(s)
    out: list[Slope] = []
    for node, rows in sorted(by_node.items()):
        for b in bounds:
            points = [(s.t / HOUR, getattr(s, b.series) * b.scale) for s in rows]
            per_hour = fit(points)
            t0, t1 = points[0][0], points[-1][0]
            mean_x = sum(x for x, _ in points) / len(points)
            mean_y = sum(y for _, y in points) / len(points)
            window = (rows[-1].t - rows[0].t) or 1.0
            out.append(Slope(node, b.series, b.label, b.unit, per_hour, b.limit(window), len(rows),
                             mean_y + per_hour * (t0 - mean_x), mean_y + per_hour * (t1 - mean_x)))
    return out


def table(found: Sequence[Slope]) -> str:
    """The slopes as a Markdown table (docs/operations.md and the test's failure message)."""
    lines = ["| node | series | slope per hour | limit per hour | fitted start -> end | samples | |",
             "|---|---|---|---|---|---|---|"]
    for s in found:
        lines.append(f"| {s.node} | {s.label} | {s.per_hour:+.2f} {s.unit} | {s.bound:.1f} {s.unit} | "
                     f"{s.start:.1f} -> {s.end:.1f} | {s.samples} | {'ok' if s.ok else 'ABOVE'} |")
    return "\n".join(lines)


def write_csv(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(Sample.__dataclass_fields__))
        writer.writeheader()
        for s in samples:
            writer.writerow(asdict(s))


def write_json(path: Path, found: Sequence[Slope], extra: dict[str, object]) -> None:
    rows = [asdict(s) | {"ok": s.ok} for s in found]
    path.write_text(json.dumps({"slopes": rows, **extra}, indent=2) + "\n")


def plot(path: Path, samples: Sequence[Sample], events: Sequence[Event], since: float, title: str) -> None:
    """Four panels over minutes (RSS, descriptors, data directory, stalls), one line per node, the events and the
    end of warm-up as vertical lines; written as PNG to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("rss_bytes", "RSS (MiB)", 1 / (1 << 20)), ("descriptors", "open descriptors", 1.0),
              ("data_bytes", "data directory (MiB)", 1 / (1 << 20)), ("stalls", "event-loop stalls (total)", 1.0)]
    nodes = sorted({s.node for s in samples})
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 11), sharex=True)
    for ax, (field, label, scale) in zip(axes, panels, strict=True):
        for node in nodes:
            rows = [s for s in samples if s.node == node]
            ax.plot([s.t / 60 for s in rows], [getattr(s, field) * scale for s in rows], label=node, lw=1)
        ax.axvline(since / 60, color="grey", ls="--", lw=0.8)
        for e in events:
            ax.axvline(e.t / 60, color="tab:red", ls=":", lw=0.8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title(title, fontsize=10)
    top = axes[0]
    for e in events:
        top.annotate(e.what, (e.t / 60, 1.0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90,
                     va="top", ha="right", color="tab:red")
    axes[-1].set_xlabel("minutes (dashed: end of warm-up, dotted: restart / leave / join)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
