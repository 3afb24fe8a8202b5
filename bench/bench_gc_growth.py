"""The garbage collector's longest pass while a node's heap grows, with the node's collector settings and with the
earlier ones, in process (no sockets; issue 21, "Metadata keys").

A node that takes a million metadata keys builds millions of long-lived objects while it runs. This script builds
the same shape of heap: N long-lived entries of four tracked objects each (a key tuple, a list, a tuple, a dict),
with short-lived garbage in between, as a node's messages make. Settings compared:

* ``old``: thresholds (50,000, 20, 10), no freeze (the node before 2026-11-27, fourth session);
* ``node``: `vmqpy.gc_watch.THRESHOLDS`, with `GcWatch.freeze_if_due` called every 2,000 entries, as the node's
  tick calls it every 0.1 s.

Reported per setting: the longest single pass (the node's loop is held that long), the collector's total time,
passes per generation, freezes. Each setting runs in a fresh interpreter (the collector is process-wide).

    .venv/bin/python -m bench.bench_gc_growth [--entries 4000000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from vmqpy.gc_watch import THRESHOLDS, GcWatch

SETTINGS: dict[str, tuple[int, int, int]] = {"old": (50_000, 20, 10), "node": THRESHOLDS}
CHECK_EVERY = 2_000


def grow(setting: str, entries: int) -> dict[str, Any]:
    """Build the heap under `setting` in this process; the collector's figures."""
    gc.freeze()
    gc.set_threshold(*SETTINGS[setting])
    watch = GcWatch(warn_after=3600.0)
    watch.install()
    freezing = setting == "node"
    store: dict[tuple[str, tuple[str]], list[Any]] = {}
    started = time.perf_counter()
    for i in range(entries):
        store[("p", (f"k{i}",))] = [("n1", i), [i, "payload"], {"x": i}]
        _garbage = [[j] for j in range(6)]
        if freezing and i % CHECK_EVERY == 0:
            watch.freeze_if_due()
    wall = time.perf_counter() - started
    watch.uninstall()
    return {"setting": setting, "thresholds": list(SETTINGS[setting]), "entries": entries, "wall_s": wall,
            "gc_s": sum(watch.seconds), "longest_ms": watch.longest * 1000, "passes": watch.collections,
            "freezes": watch.freezes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_gc_growth", description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--one", choices=sorted(SETTINGS), help=argparse.SUPPRESS)  # a child process's setting
    args = ap.parse_args(argv)
    if args.entries < 1 or args.rounds < 1:
        ap.error("--entries and --rounds must be positive")
    if args.one:
        print(json.dumps(grow(args.one, args.entries)))
        return 0
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name in SETTINGS:  # interleaved, each in a fresh interpreter
            out = subprocess.run([sys.executable, "-m", "bench.bench_gc_growth", "--one", name,
                                  "--entries", str(args.entries)], capture_output=True, text=True, check=True)
            rows[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.entries:,} long-lived entries, {args.rounds} round(s), medians:")
    for name, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "gc_s", "longest_ms", "freezes")}
        print(f"  {name:5} thresholds {tuple(runs[0]['thresholds'])}: longest pass {med['longest_ms']:.0f} ms, "
              f"collector {med['gc_s']:.2f} s of {med['wall_s']:.1f} s, passes {runs[-1]['passes']}, "
              f"freezes {med['freezes']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
