"""Pure-replica figures for the metadata store (no I/O, no asyncio): ``python -m bench.bench_metadata``.

(a) local puts per second on one replica (two reachable peers, so every put also builds its pushes);
(b) anti-entropy bytes for M = 1,000 missing keys when the store holds K = 1,000 and K = 100,000 keys;
(c) convergence after a heal that left 10,000 keys divergent on 5 replicas, in sync intervals, on the
    in-memory network (simulated time), with and without the failure detector telling replicas about
    the heal (without it, only the periodic random exchanges repair).

``--quick`` uses smaller sizes (for a smoke run).  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import Any

import msgpack

from vmqpy.metadata import messages
from vmqpy.metadata.memory_network import MemoryNetwork
from vmqpy.metadata.messages import SyncReply, SyncRequest
from vmqpy.metadata.replica import T_DOTS, T_OBJ, Persist, Replica, SendTo

VALUE = b"v" * 100  # a 100-byte value (102 bytes of msgpack)


def bench_puts(n: int) -> dict[str, Any]:
    replica = Replica("node1", rng=random.Random(1))
    replica.set_peers(["node2", "node3"])
    replica.set_reachable(["node2", "node3"])
    values = [{"hlc": [1_700_000_000_000 + i, 0, "node1"], "qos": 1, "client": f"client-{i % 5000}"} for i in range(n)]
    keys = [("tenant", f"devices/{i % 20_000}/status", f"client-{i % 5000}") for i in range(n)]
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        replica.put("subs", keys[i], values[i], 1_700_000_000.0)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"puts": n, "seconds": elapsed, "rate": n / elapsed, "cpu_rate": n / cpu}


def _populated_pair(total: int, missing: int) -> tuple[Replica, Replica]:
    """a holds ``total`` keys; b holds the same except the last ``missing`` ones (b is restored from a's
    rows taken before those were written, so building it costs no exchange)."""
    a = Replica("a", rng=random.Random(1), batch_size=500)
    a.set_peers(["b"])
    rows: dict[str, dict[bytes, bytes]] = {T_OBJ: {}, T_DOTS: {}}

    def keep(outputs: list[Any]) -> None:
        for out in outputs:
            if isinstance(out, Persist) and out.table in rows:
                if out.value is None:
                    rows[out.table].pop(out.key, None)
                else:
                    rows[out.table][out.key] = out.value

    for i in range(total - missing):
        keep(a.put("subs", ("tenant", f"topic/{i}"), VALUE, 1.0))
    b = Replica.restore("b", {t: sorted(r.items()) for t, r in rows.items()}, rng=random.Random(2), batch_size=500)
    b.set_peers(["a"])
    for i in range(total - missing, total):
        a.put("subs", ("tenant", f"topic/{i}"), VALUE, 2.0)  # b is unreachable: no push leaves
    a.set_reachable(["b"])
    b.set_reachable(["a"])
    return a, b


def bench_exchange_bytes(total: int, missing: int) -> dict[str, Any]:
    a, b = _populated_pair(total, missing)
    sent = received = rounds = objects = 0
    outputs = b.exchange_now("a", 10.0)
    while True:
        requests = [o for o in outputs if isinstance(o, SendTo) and isinstance(o.message, SyncRequest)]
        if not requests:
            break
        request = requests[0].message
        sent += len(messages.encode(request))
        replies = [
            o for o in a.receive("b", request, 10.0) if isinstance(o, SendTo) and isinstance(o.message, SyncReply)
        ]
        reply = replies[0].message
        assert isinstance(reply, SyncReply)
        data = messages.encode(reply)
        received += len(data)
        rounds += 1
        objects += len(reply.objects)
        outputs = b.receive("a", messages.decode(data), 10.0)
    assert objects == missing, (objects, missing)
    assert b.dump()["data"] == a.dump()["data"], "b caught up"
    total_bytes = sent + received
    value_size = len(msgpack.packb(VALUE))
    return {
        "K": total,
        "M": missing,
        "rounds": rounds,
        "bytes": total_bytes,
        "per_key": total_bytes / missing,
        "value_size": value_size,
        "budget": 1.5 * value_size + 64,
    }


def bench_convergence(keys: int, nodes: int = 5, *, detector: bool, exchange_timeout: float = 5.0) -> dict[str, Any]:
    """Every replica cut off from all others writes keys/nodes keys; then the network heals."""
    net = MemoryNetwork(7, auto_reachability=detector)
    names = [f"n{i}" for i in range(1, nodes + 1)]
    for name in names:
        net.add_replica(name, sync_interval=1.0, batch_size=500, exchange_timeout=exchange_timeout)
    net.set_members(names)
    if not detector:  # the replicas are never told about the partition: all peers look reachable
        for name in names:
            net.replicas[name].set_reachable(names)
            net.touch(name)
    net.run_for(3.0)
    net.partition(*[[n] for n in names])
    for i in range(keys):
        net.put(names[i % nodes], "subs", ("tenant", f"topic/{i}"), VALUE)
    net.run_for(2.0)
    healed = net.now
    net.heal_all()
    start = time.perf_counter()
    ok = net.run_until(net.converged, 30.0)
    wall = time.perf_counter() - start
    return {"keys": keys, "nodes": nodes, "converged": ok, "intervals": (net.now - healed) / 1.0, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    puts = bench_puts(20_000 if args.quick else 100_000)
    small = bench_exchange_bytes(1_000, 1_000)
    big = bench_exchange_bytes(10_000 if args.quick else 100_000, 1_000)
    conv_keys = 2_000 if args.quick else 10_000
    conv = bench_convergence(conv_keys, detector=True)
    conv_periodic = bench_convergence(conv_keys, detector=False)
    conv_periodic_1s = bench_convergence(conv_keys, detector=False, exchange_timeout=1.0)

    print("| figure | result | target |")
    print("| --- | --- | --- |")
    print(
        f"| (a) local puts/s, one replica, 2 reachable peers ({puts['puts']:,} puts) | {puts['rate']:,.0f} wall, "
        f"{puts['cpu_rate']:,.0f} per CPU second | > 20,000 |"
    )
    for row in (small, big):
        print(
            f"| (b) exchange bytes, M = {row['M']:,} missing of K = {row['K']:,} | {row['bytes']:,} B in "
            f"{row['rounds']} round trips ({row['per_key']:.1f} B/key; value {row['value_size']} B) "
            f"| <= {row['budget']:.0f} B/key |"
        )
    diff = abs(big["bytes"] - small["bytes"]) / small["bytes"]
    print(f"| (b) difference K = {big['K']:,} vs K = {small['K']:,} | {diff:.1%} | <= 10% |")
    print(
        f"| (c) sync intervals to converge, {conv['keys']:,} divergent keys on {conv['nodes']} replicas, "
        f"heal reported by the failure detector | {conv['intervals']:.2f} ({conv['wall']:.1f} s wall) | < 2 |"
    )
    for label, row in (("5 s (default)", conv_periodic), ("1 s", conv_periodic_1s)):
        print(
            f"| (c') same, heal not reported (periodic exchanges only), exchange timeout {label} "
            f"| {row['intervals']:.2f} ({row['wall']:.1f} s wall){'' if row['converged'] else ' NOT CONVERGED'} | - |"
        )


if __name__ == "__main__":
    main()
