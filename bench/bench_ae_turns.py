"""How long one call of a replica lasts while a fresh replica catches up N keys (in process, no socket, no lock).

    PYTHONPATH=. .venv/bin/python bench/bench_ae_turns.py [--keys 100000]
    PYTHONPATH=/tmp/wt-base .venv/bin/python bench/bench_ae_turns.py   # the same against another checkout

A replica `a` holds N retained-message keys (64-byte payloads); a fresh replica `x` joins it and pulls. Messages
are encoded and decoded and delivered at once; each replica's timer is called whenever its `next_deadline()` is
due (`now` is the monotonic clock), as the asyncio service does; the node's collector settings are used
(`gc.freeze()`, `gc.set_threshold(50_000, 20, 10)`). Each call is one turn of a node's event loop: the bench
prints the CPU time (`time.thread_time()`) of `x`'s calls (median, p99, the longest, by kind), the catch-up time and
the collector's pauses over 50 ms. Run as a file (not `-m`) with `PYTHONPATH` naming the checkout whose `vmqpy` is
measured (the venv's editable install points at /work/main).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
from typing import Any

import vmqpy
from vmqpy.metadata import messages
from vmqpy.metadata.replica import Output, Replica, SendTo


def catch_up(keys: int, limit_s: float) -> dict[str, Any]:
    payload = os.urandom(64)
    a = Replica("a", rng=random.Random(1))
    x = Replica("x", rng=random.Random(2))
    a.set_peers(["x"])
    a.set_reachable(["x"])
    for i in range(keys):
        a.put("retain", ("", f"bench/ret/{i}"), [[1_700_000_000_000 + i, 0, "a"], payload], 1.0)
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)
    pauses: list[float] = []
    started: list[float] = [0.0]

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)
    replicas = {"a": a, "x": x}
    inbox: list[tuple[str, str, bytes]] = []
    calls: list[tuple[str, float]] = []

    def call(kind: str, node: str, outputs: Any) -> None:
        t = time.thread_time()
        out: list[Output] = outputs()
        calls.append((f"{node}:{kind}", time.thread_time() - t))
        inbox.extend((o.peer, node, messages.encode(o.message)) for o in out if isinstance(o, SendTo))

    t0 = time.monotonic()
    call("set_peers", "x", lambda: x.set_peers(["a"]))
    x.set_reachable(["a"])
    while time.monotonic() - t0 < limit_s:
        if inbox:
            to, frm, data = inbox.pop(0)
            message = messages.decode(data)
            call(f"receive {type(message).__name__}", to,
                 lambda: replicas[to].receive(frm, message, time.monotonic()))  # noqa: B023 - called at once
            continue
        stats = x.stats()
        if stats["live_keys"] == keys and not getattr(x, "applying", lambda: False)() and not stats["contexts_at_rest"]:
            break
        due = [n for n, r in replicas.items() if (d := r.next_deadline()) is not None and d <= time.monotonic()]
        for node in due:
            call("on_timer", node, lambda: replicas[node].on_timer(time.monotonic()))  # noqa: B023 - called at once
        if not due:
            time.sleep(0.001)
    gc.callbacks.remove(on_gc)
    fresh = sorted(d for k, d in calls if k.startswith("x:"))
    longest = sorted(calls, key=lambda c: -c[1])[:5]
    return {
        "vmqpy": os.path.dirname(vmqpy.__file__), "keys": keys, "caught_up_s": round(time.monotonic() - t0, 2),
        "fresh_calls": len(fresh), "fresh_cpu_s": round(sum(fresh), 2),
        "fresh_cpu_p50_ms": round(1e3 * statistics.median(fresh), 1),
        "fresh_cpu_p99_ms": round(1e3 * fresh[int(0.99 * (len(fresh) - 1))], 1),
        "calls_over_50ms_cpu": sum(1 for _, d in calls if d > 0.05),
        "longest_cpu_ms": [(k, round(1e3 * d)) for k, d in longest],
        "gc_pauses_over_50ms": sorted((round(1e3 * p) for p in pauses if p > 0.05), reverse=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--limit", type=float, default=600.0, help="give up after this many seconds")
    args = ap.parse_args()
    if args.keys < 1:
        ap.error("--keys must be positive")
    print(json.dumps(catch_up(args.keys, args.limit)))


if __name__ == "__main__":
    main()
