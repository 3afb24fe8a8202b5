"""Micro-benchmarks for the trie, the retained store and the storage (not collected by pytest).

Run: ``.venv/bin/python -m bench.bench_broker``
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path

from vmqpy.broker.core.retained import RetainedStore
from vmqpy.mqtt.trie import SubscriptionTrie
from vmqpy.storage import Storage


def bench_trie(n_filters: int = 10_000, n_topics: int = 200_000) -> None:
    rng = random.Random(1)
    trie: SubscriptionTrie[str, int] = SubscriptionTrie()
    tenants, devices = 100, 1000
    added = 0
    while added < n_filters:
        t, d = rng.randrange(tenants), rng.randrange(devices)
        r = rng.random()
        if r < 0.70:
            f = f"tenant/{t}/device/{d}/telemetry"
        elif r < 0.90:
            f = f"tenant/{t}/device/+/{rng.choice(['telemetry', 'status'])}"
        elif r < 0.99:
            f = f"tenant/{t}/device/{d}/#"
        else:
            f = f"+/{t}/#"
        added += trie.add(f, f"client{added}", added)
    topics = [
        f"tenant/{rng.randrange(tenants)}/device/{rng.randrange(devices)}/telemetry" for _ in range(1000)
    ]
    results = 0
    t0 = time.perf_counter()
    for i in range(n_topics):
        results += len(trie.match(topics[i % 1000]))
    dt = time.perf_counter() - t0
    print(
        f"trie: {len(trie)} entries / {trie.filters()} filters: {n_topics / dt:,.0f} match/s "
        f"({dt / n_topics * 1e6:.2f} us/match, {results / n_topics:.2f} results/match)"
    )


def bench_retained(n_topics: int = 10_000, n_queries: int = 50_000) -> None:
    rng = random.Random(2)
    store: RetainedStore[bytes] = RetainedStore()
    for i in range(n_topics):
        store.set(f"tenant/{rng.randrange(100)}/device/{i}/status", b"x")
    queries = [f"tenant/{rng.randrange(100)}/device/{rng.randrange(n_topics)}/status" for _ in range(1000)]
    t0 = time.perf_counter()
    for i in range(n_queries):
        store.match(queries[i % 1000])
    dt = time.perf_counter() - t0
    print(f"retained: {len(store)} topics, literal filter: {n_queries / dt:,.0f} match/s")
    wild = [f"tenant/{t}/device/+/status" for t in range(100)]
    found = 0
    t0 = time.perf_counter()
    for i in range(2000):
        found += len(store.match(wild[i % 100]))
    dt = time.perf_counter() - t0
    print(
        f"retained: 'tenant/T/device/+/status': {2000 / dt:,.0f} match/s ({found / 2000:.0f} results/match)"
    )


async def bench_storage(n: int = 100_000, value_size: int = 64) -> None:
    with tempfile.TemporaryDirectory() as d:
        s = Storage(Path(d) / "bench.db")
        s.open()
        value = b"v" * value_size
        try:
            t0 = time.perf_counter()
            for i in range(n):
                s.put("a", b"%010d" % i, value)
                if i % 100 == 99:
                    await s.sync()
            dt = time.perf_counter() - t0
            print(f"storage: {n} puts, sync every 100: {n / dt:,.0f} puts/s  stats={s.stats}")
            commits0 = s.stats["commits"]
            t0 = time.perf_counter()
            for i in range(n):
                s.put("b", b"%010d" % i, value)
            await s.sync()
            dt = time.perf_counter() - t0
            print(
                f"storage: {n} puts, one sync at the end: {n / dt:,.0f} puts/s  "
                f"commits={s.stats['commits'] - commits0} max_batch_seen={s.stats['max_batch_seen']}"
            )
        finally:
            s.close()


def main() -> None:
    bench_trie()
    bench_retained()
    asyncio.run(bench_storage())


if __name__ == "__main__":
    main()
