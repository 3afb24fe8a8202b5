"""Local metadata writes per second on one node with persistence on, with and without the replication log.

Run: ``.venv/bin/python -m bench.bench_store [--puts N] [--runs N]``. Each run is a fresh MetadataService over
SQLite (WAL, the writer thread) in a temporary directory; the time covers the puts and the final storage sync.
Runs with and without the log alternate; the figures are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from vmqpy.metadata.replication_log import ReplicationLog
from vmqpy.metadata.service import MetadataService
from vmqpy.storage import Storage


async def one_run(puts: int, with_log: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        storage = Storage(Path(tmp) / "md.db")
        storage.open()
        log = ReplicationLog(Path(tmp) / "replication.log", "bench@127.0.0.1") if with_log else None
        if log is not None:
            log.open()
        service = MetadataService("bench@127.0.0.1", storage, replication_log=log, seed=1)
        service.start()
        value_payload = b"x" * 64
        start = time.perf_counter()
        for i in range(puts):
            service.put("retain", ("", f"bench/{i % 10_000}"), [service.hlc_now().to_list(), value_payload])
        await storage.sync()
        elapsed = time.perf_counter() - start
        service.stop()
        if log is not None:
            log.close()
        storage.close()
        return puts / elapsed


async def main(puts: int, runs: int) -> None:
    with_log: list[float] = []
    without: list[float] = []
    for _ in range(runs):
        without.append(await one_run(puts, False))
        with_log.append(await one_run(puts, True))
    a, b = statistics.median(without), statistics.median(with_log)
    print(f"# metadata store, one node, {puts} puts over 10,000 keys, 64-byte values, median of {runs} runs\n")
    print("| configuration | puts/s |")
    print("|---|---:|")
    print(f"| SQLite persistence, no replication log | {a:,.0f} |")
    print(f"| SQLite persistence + replication log | {b:,.0f} |")
    print(f"\nreplication log overhead: {100 * (a - b) / a:.1f}% (target: at most 10%)")
    print(f"target at least 20,000 puts/s with persistence on: {'met' if b >= 20_000 else 'NOT met'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--puts", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.puts, args.runs))
