"""Micro-benchmark of the dvv library.

Run with ``python -m bench.bench_dvv`` (``--runs N`` for more repetitions, ``--budget S`` for the
seconds spent per measurement).  Prints markdown tables: operations per second (median of several
runs) of dvvset ``sync``/``update_with``, ``NodeClock.add``/``merge``/``missing_dots`` and the codec
for 3, 5 and 10 nodes, the encoded size of each type, and a check of the two targets:

* ``NodeClock.missing_dots`` between clocks of 10 nodes whose bases differ by 10,000 dots: < 1 ms;
* a container with one value and a stripped context: < 40 bytes of metadata beyond the value.

Exits with status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack

from dvv import codec, dvvset
from dvv.causal_container import CausalContainer
from dvv.dot_key_map import DotKeyMap
from dvv.node_clock import NodeClock
from dvv.watermark import Watermark

SIZES = (3, 5, 10)
GAP = 10_000
VALUE = b"x" * 64  # a 64-byte payload, e.g. a retained message reference
# Node ids for the size target; metadata is 4 + (len(id) + 1) + (1..9 counter bytes): see docs/dvv.md.
ID_EXAMPLES = ("a", "vmq9@10.0.0.10", "VerneMQ@192.168.100.200")


def node_ids(n: int) -> list[str]:
    return [f"vmq{i}@10.0.0.{i + 1}" for i in range(n)]


def ops_per_second(fn: Callable[[], Any], runs: int, budget: float) -> float:
    """Median over ``runs`` of calls per second, each run lasting about ``budget / runs`` seconds."""
    per_run = budget / runs
    calls = 1
    while True:  # calibrate the batch size to roughly per_run seconds
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= per_run / 4 or calls >= 1 << 22:
            break
        calls *= 2
    batch = max(1, int(calls * per_run / max(elapsed, 1e-9)))
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        rates.append(batch / (time.perf_counter() - start))
    return statistics.median(rates)


def concurrent_dvvsets(ids: list[str]) -> tuple[dvvset.Clock, dvvset.Clock]:
    """Two replicas that both saw a common history and then took one concurrent write each."""
    base = dvvset.Clock()
    for node in ids:
        base = dvvset.update_with(dvvset.new_with_context(dvvset.join(base), VALUE), base, node)
    left = dvvset.update_with(dvvset.new_with_context(dvvset.join(base), b"L" * len(VALUE)), base, ids[0])
    right = dvvset.update_with(dvvset.new_with_context(dvvset.join(base), b"R" * len(VALUE)), base, ids[-1])
    return left, right


def node_clocks(ids: list[str]) -> tuple[NodeClock, NodeClock]:
    ahead = NodeClock({n: (GAP * 2, 0b1010_0100) for n in ids})
    behind = NodeClock({n: (GAP, 0b1_0010) for n in ids})
    return ahead, behind


def measure(runs: int, budget: float) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, int]]]:
    rates: dict[str, dict[int, float]] = {}
    sizes: dict[str, dict[int, int]] = {}

    def rate(name: str, n: int, fn: Callable[[], Any]) -> None:
        rates.setdefault(name, {})[n] = ops_per_second(fn, runs, budget)

    def size(name: str, n: int, obj: Any, extra: int = 0) -> None:
        sizes.setdefault(name, {})[n] = len(codec.to_bytes(obj)) - extra

    value_bytes = len(msgpack.packb(VALUE, use_bin_type=True))
    for n in SIZES:
        ids = node_ids(n)
        left, right = concurrent_dvvsets(ids)
        ctx = dvvset.join(left)
        ahead, behind = node_clocks(ids)
        gappy = NodeClock({i: (100, 0b1010) for i in ids})
        nxt = ("vmq0@10.0.0.1", 102)
        filled = CausalContainer({(ids[0], GAP): VALUE}, ahead.base())
        stripped = filled.strip(ahead)
        wm = Watermark.new(ids)
        for i in ids:
            wm = wm.update_peer(i, behind)
        dkm = DotKeyMap().add_many(((i, GAP + c), f"key/{c}") for i in ids for c in range(1, 11))

        rate("dvvset.sync (2 concurrent)", n, lambda left=left, right=right: dvvset.sync([left, right]))
        rate(
            "dvvset.update_with",
            n,
            lambda ctx=ctx, left=left, node=ids[0]: dvvset.update_with(dvvset.new_with_context(ctx, VALUE), left, node),
        )
        rate("NodeClock.add", n, lambda gappy=gappy, nxt=nxt: gappy.add(nxt))
        rate("NodeClock.merge", n, lambda ahead=ahead, behind=behind: ahead.merge(behind))
        rate(
            f"NodeClock.missing_dots (gap {GAP:,})",
            n,
            lambda ahead=ahead, behind=behind, ids=ids: ahead.missing_dots(behind, ids),
        )
        rate("CausalContainer.sync", n, lambda filled=filled, ctx=ctx: filled.sync(filled.discard(ctx)))
        rate("codec.to_bytes dvvset.Clock", n, lambda left=left: codec.to_bytes(left))
        enc_clock = codec.to_bytes(left)
        rate("codec.from_bytes dvvset.Clock", n, lambda enc=enc_clock: codec.from_bytes(enc))
        rate("codec.to_bytes container (stripped)", n, lambda s=stripped: codec.to_bytes(s))
        enc_c = codec.to_bytes(stripped)
        rate("codec.from_bytes container (stripped)", n, lambda enc=enc_c: codec.from_bytes(enc))
        rate("codec.to_bytes NodeClock", n, lambda a=ahead: codec.to_bytes(a))

        size("VersionVector", n, ahead.base())
        siblings = dvvset.sync([left, right])
        assert dvvset.size(siblings) == 2
        size(f"dvvset.Clock, 2 siblings (minus 2 x {len(VALUE)} B values)", n, siblings, extra=2 * value_bytes)
        size("NodeClock (with bitmaps)", n, ahead)
        size(f"CausalContainer, 1 value, full context (minus {len(VALUE)} B value)", n, filled, extra=value_bytes)
        size("CausalContainer, 1 value, stripped context (minus value)", n, stripped, extra=value_bytes)
        size("Watermark", n, wm)
        size("DotKeyMap (10 dots per node)", n, dkm)
    return rates, sizes


def table(title: str, rows: dict[str, dict[int, Any]], fmt: Callable[[Any], str]) -> str:
    head = f"| {title} | " + " | ".join(f"{n} nodes" for n in SIZES) + " |"
    sep = "|---|" + "---:|" * len(SIZES)
    body = [f"| {name} | " + " | ".join(fmt(vals[n]) for n in SIZES) + " |" for name, vals in rows.items()]
    return "\n".join([head, sep, *body])


def check_targets() -> list[tuple[str, str, bool]]:
    ids = node_ids(10)
    ahead = NodeClock({n: (GAP * 2, 0) for n in ids})
    behind = NodeClock({n: (GAP, 0) for n in ids})
    assert sum(len(c) for c in ahead.missing_dots(behind, ids).values()) == 10 * GAP
    best = float("inf")
    for _ in range(200):
        start = time.perf_counter()
        ahead.missing_dots(behind, ids)
        best = min(best, time.perf_counter() - start)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        ahead.missing_dots(behind, ids)
        samples.append(time.perf_counter() - start)
    median = statistics.median(samples)
    overhead = 0
    for node in ID_EXAMPLES:
        for counter in (1, 1_000_000, 2**40):
            c = CausalContainer({(node, counter): VALUE}, {node: counter}).strip(NodeClock({node: (counter, 0)}))
            overhead = max(overhead, len(codec.to_bytes(c)) - len(msgpack.packb(VALUE, use_bin_type=True)))
    return [
        (
            f"missing_dots, 10 nodes, bases {GAP:,} apart ({10 * GAP:,} dots)",
            f"median {median * 1e6:.1f} µs, best {best * 1e6:.1f} µs (target < 1000 µs)",
            median < 1e-3,
        ),
        (
            "container, 1 value, stripped context: metadata bytes",
            f"{overhead} B worst case over node ids of up to {max(map(len, ID_EXAMPLES))} chars and counters"
            f" up to 2^40 (target < 40 B)",
            overhead < 40,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement; the median is reported")
    parser.add_argument("--budget", type=float, default=0.25, help="seconds per measurement (all runs)")
    args = parser.parse_args(argv)
    print(f"# dvv micro-benchmark (Python {sys.version.split()[0]}, median of {args.runs} runs)\n")
    rates, sizes = measure(args.runs, args.budget)
    print(table("operation (ops/s)", rates, lambda v: f"{v:,.0f}"))
    print()
    print(table("encoded size (bytes)", sizes, lambda v: f"{v}"))
    print("\n| target | measured | ok |\n|---|---|---|")
    ok = True
    for name, measured, passed in check_targets():
        ok &= passed
        print(f"| {name} | {measured} | {'yes' if passed else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
