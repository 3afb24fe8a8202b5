"""The seeded histories of the metadata store on the in-memory network (tests/sim/test_histories.py says what they
hold): `run_history` builds one from its seed (writes, deletes, partitions, drops, duplicated and late messages,
crashes, restarts, a join announced unevenly) and heals it; `check_history` runs one and asserts convergence, the
causal model and garbage collection."""

from __future__ import annotations

import random

from tests.sim.model import at_rest_errors, gc_done, model_errors, ops_of, writeback_errors
from vmqpy.metadata.memory_network import MemoryNetwork

SYNC_INTERVAL = 1.0
CONVERGE_WITHIN = 15.0  # simulated seconds after the heal (15 sync intervals)
GC_WITHIN = 30.0


def topology(net: MemoryNetwork, rng: random.Random, nodes: list[str]) -> str:
    kind = rng.choice(["halves", "cut_one", "bridge", "heal", "heal"])
    shuffled = rng.sample(nodes, len(nodes))
    half = len(nodes) // 2
    if kind == "halves":
        net.partition(shuffled[:half], shuffled[half:])
    elif kind == "cut_one":
        net.partition_off(shuffled[:1])
    elif kind == "bridge":
        net.bridge(shuffled[1 : 1 + half], shuffled[1 + half :], shuffled[0])
    else:
        net.heal_all()
    return kind


def run_history(seed: int) -> tuple[MemoryNetwork, list[str], bool]:
    """One seeded history; also whether the membership changed (a join announced unevenly)."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(1, rng.choice([3, 4, 5]) + 1)]
    # The durability boundary of the driver contract (a crash loses what was not yet durable), duplicated and
    # very late messages, exchanges that time out part-way (a timeout near the latency).
    net = MemoryNetwork(seed, latency=(0.001, 0.03), durability=True, dup_rate=rng.choice([0.0, 0.0, 0.05]),
                        late_rate=rng.choice([0.0, 0.0, 0.03]), late_delay=(0.5, 8.0))
    batch = rng.choice([1, 3, 500])
    timeout = rng.choice([0.05, 0.5, 2.0])
    for node in nodes:
        net.add_replica(node, sync_interval=SYNC_INTERVAL, exchange_timeout=timeout, batch_size=batch)
    net.set_members(nodes)
    keys = [("subs", ("t", i)) for i in range(4)] + [("retain", (f"r{i}",)) for i in range(2)]
    trace = [f"seed={seed} nodes={nodes} batch={batch} timeout={timeout} dup={net.dup_rate} late={net.late_rate}"]
    joined = False
    unannounced: list[str] = []  # members that do not know of the joiner yet
    for step in range(rng.randint(20, 50)):
        up = net.alive()
        node = rng.choice(up)
        prefix, key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.55:
            value = {"hlc": net.replicas[node].hlc_now(net.now).to_list(), "v": f"{node}:{step}"}
            net.put(node, prefix, key, value)
            trace.append(f"{net.now:.3f} put {node} {key}")
        elif roll < 0.72:
            net.delete(node, prefix, key)
            trace.append(f"{net.now:.3f} delete {node} {key}")
        elif roll < 0.84:
            trace.append(f"{net.now:.3f} topology {topology(net, rng, nodes)}")
        elif roll < 0.90:
            net.drop_rate = rng.choice([0.0, 0.1, 0.3])
            trace.append(f"{net.now:.3f} drop_rate {net.drop_rate}")
        elif roll < 0.94 and len(up) > 2:
            net.crash(node)
            trace.append(f"{net.now:.3f} crash {node}")
        elif roll < 0.96 and not joined:
            # A join that reaches the members one group at a time, as the replicated membership key spreads.
            joined = True
            joiner = f"n{len(nodes) + 1}"
            net.add_replica(joiner, sync_interval=SYNC_INTERVAL, exchange_timeout=timeout, batch_size=batch)
            first = rng.sample(nodes, rng.randint(1, len(nodes) - 1))
            unannounced = [n for n in nodes if n not in first]
            nodes = [*nodes, joiner]
            net.set_members(nodes, on=[*first, joiner])
            trace.append(f"{net.now:.3f} join {joiner} announced on {first}")
        elif roll < 0.98 and unannounced:
            reach = unannounced[: rng.randint(1, len(unannounced))]
            unannounced = unannounced[len(reach):]
            net.set_members(nodes, on=reach)
            trace.append(f"{net.now:.3f} join announced on {reach}")
        elif roll < 0.99:
            net.flush(node)
            trace.append(f"{net.now:.3f} flush {node}")
        elif net.down:
            back = sorted(net.down)[0]
            net.restart(back)
            trace.append(f"{net.now:.3f} restart {back}")
        net.run_for(rng.uniform(0.0, 0.8))
    for node in sorted(net.down):
        net.restart(node)
    if joined:  # the membership key reaches every member in the end (also those that were down when it spread)
        net.set_members(nodes)
        trace.append(f"{net.now:.3f} join announced everywhere")
    net.heal_all()
    net.drop_rate = net.dup_rate = net.late_rate = 0.0
    trace.append(f"{net.now:.3f} heal")
    return net, trace, joined


def check_history(seed: int) -> None:
    """Run history `seed`, heal, and assert that it converges, matches the causal model and collects its garbage."""
    net, trace, joined = run_history(seed)
    where = f"(seed {seed}; rerun with SIM_SEED={seed})"
    healed_at = net.now
    converged = net.run_until(lambda: net.quiet() and net.converged(), CONVERGE_WITHIN)
    assert converged, f"not converged {CONVERGE_WITHIN}s after the heal {where}\n" + "\n".join(trace[-15:])
    assert net.now - healed_at <= CONVERGE_WITHIN
    ops = ops_of(net)
    errors = model_errors(net, ops) + writeback_errors(ops, None if joined else set(net.replicas))
    assert errors == [], f"{where}\n" + "\n".join(errors[:10])
    assert net.run_until(lambda: gc_done(net) and net.quiet() and net.converged(), GC_WITHIN), f"GC stuck {where}"
    errors = at_rest_errors(net)
    assert errors == [], f"{where}\n" + "\n".join(errors[:10])
