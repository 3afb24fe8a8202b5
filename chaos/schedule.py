"""What the nemesis does when: a pure function of the experiment, the number of nodes, the duration and the seed.

A schedule is a list of steps at offsets (seconds from the start of the workloads). Network faults are *cuts*:
sets of unordered node pairs that cannot talk (both directions). Nodes are numbered 0..n-1 here; the runner maps
them to node names. The same (experiment, nodes, duration, seed) always gives the same schedule, so a failing
run can be replayed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import combinations
from typing import Literal

Fault = Literal["halves", "isolate", "bridge", "ring", "flap", "kill", "pause", "skew", "churn", "ownerloss"]
FAULTS: tuple[Fault, ...] = ("halves", "isolate", "bridge", "ring", "flap", "kill", "pause", "skew", "churn",
                             "ownerloss")
Action = Literal["cut", "heal", "kill", "restart", "pause", "resume", "skew", "unskew", "leave", "join", "roll",
                 "lose", "replace"]
#: `ownerloss` runs in its own experiments, `owner-loss` (in the suite) and `owner-loss-r1` (chaos/owner_loss.py),
#: whose victim is chosen at run time, not by the schedule.
Pair = tuple[int, int]


@dataclass(frozen=True)
class Step:
    at: float  # seconds from the start of the workloads
    action: Action
    cut: frozenset[Pair] = frozenset()  # for "cut": the pairs that cannot talk
    node: int | None = None  # for kill/restart/pause/resume/skew/unskew/roll
    skew_s: float = 0.0  # for "skew": the node's wall clock offset
    other: int | None = None  # for "leave": the node that runs the command; for "join": the discovery node
    label: str = ""

    def describe(self, names: list[str] | None = None) -> str:
        def name(i: int) -> str:
            return names[i] if names is not None else str(i)

        if self.action == "cut":
            pairs = ", ".join(f"{name(a)}-x-{name(b)}" for a, b in sorted(self.cut))
            return f"{self.label or 'cut'}: {pairs}"
        if self.action == "skew":
            return f"skew {name(self.node or 0)} by {self.skew_s:+.0f}s"
        if self.action == "leave":
            return f"leave {name(self.node or 0)} -k (run on {name(self.other or 0)})"
        if self.action == "join":
            return f"join {name(self.node or 0)} (discovery {name(self.other or 0)})"
        if self.action == "lose" and self.node is None:
            return "lose (kill -9, data directory deleted) the node with the most persistent sessions"
        if self.action == "replace" and self.node is None:
            return "remove the lost node (cluster leave -k on a survivor; an empty node joins after the workload)"
        if self.node is not None:
            return f"{self.action} {name(self.node)}"
        return self.action


@dataclass(frozen=True)
class Experiment:
    """An experiment as data: which faults, how long each lasts, and the workloads that run meanwhile."""

    name: str
    description: str
    faults: tuple[Fault, ...]
    workloads: tuple[str, ...] = ("subscriptions", "retained", "queues", "registration")
    duration: float = 40.0  # seconds of workload
    fault_s: float = 8.0  # how long each fault lasts
    heal_s: float = 6.0  # healthy time between two faults
    cycles: int | None = None  # None: as many as fit in the duration
    proxy_delay_ms: int = 0  # fault proxy only: added delay on every cluster link
    proxy_loss: float = 0.0  # fault proxy only: probability of dropping a chunk... (closes the link)
    tags: tuple[str, ...] = field(default_factory=tuple)
    rolling: bool = False  # a rolling restart instead of `faults`: every node drained and restarted once
    balancer: bool = False  # the clients go through HAProxy in every run (as with `--via haproxy`)
    settings: tuple[tuple[str, str], ...] = ()  # node configuration keys of every run (e.g. queue.replicas)
    first_fault_s: float | None = None  # workload seconds before the first fault (default: 15 %, at most 3 s)


def pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def cut_between(side_a: set[int], side_b: set[int]) -> frozenset[Pair]:
    """Every pair with one node on each side."""
    return frozenset(pair(a, b) for a in side_a for b in side_b if a != b)


def halves(nodes: int, rng: random.Random) -> frozenset[Pair]:
    order = list(range(nodes))
    rng.shuffle(order)
    size = nodes // 2
    return cut_between(set(order[:size]), set(order[size:]))


def isolate(nodes: int, rng: random.Random) -> frozenset[Pair]:
    lone = rng.randrange(nodes)
    return cut_between({lone}, set(range(nodes)) - {lone})


def bridge(nodes: int, rng: random.Random) -> frozenset[Pair]:
    """Two halves that cannot talk, and one node (the bridge) that both reach."""
    order = list(range(nodes))
    rng.shuffle(order)
    middle = order[0]
    rest = order[1:]
    size = len(rest) // 2
    return cut_between(set(rest[:size]), set(rest[size:])) - {pair(middle, x) for x in rest}


def ring(nodes: int, rng: random.Random) -> frozenset[Pair]:
    """Every node reaches a majority (its ring neighbours), no two nodes the same one.

    Nodes further apart than one step on a shuffled ring cannot talk; with 3 nodes that cuts nothing, so one
    pair is cut (each of its two nodes still reaches a majority, a different one)."""
    order = list(range(nodes))
    rng.shuffle(order)
    position = {node: i for i, node in enumerate(order)}
    cuts = set()
    for a, b in combinations(range(nodes), 2):
        distance = abs(position[a] - position[b])
        if min(distance, nodes - distance) > 1:
            cuts.add(pair(a, b))
    if not cuts and nodes >= 2:
        cuts.add(pair(order[0], order[1]))
    return frozenset(cuts)


CUTTERS = {"halves": halves, "isolate": isolate, "bridge": bridge, "ring": ring}


def plan(experiment: Experiment, nodes: int, seed: int, duration: float | None = None) -> list[Step]:
    """The nemesis steps of one run, ordered by time; everything is healed by the end."""
    if nodes < 2:
        raise ValueError("an experiment needs at least 2 nodes")
    rng = random.Random(f"{experiment.name}/{nodes}/{seed}")
    total = experiment.duration if duration is None else duration
    start = min(3.0, total * 0.15)
    if experiment.first_fault_s is not None:  # never so late that no fault fits in a shortened run
        start = min(experiment.first_fault_s, max(start, total - experiment.fault_s - 1.0))
    end = total - 1.0
    if experiment.rolling:
        return rolling_restart(nodes, rng, start, end)
    steps: list[Step] = []
    t = start
    cycle = 0
    faults = experiment.faults
    while faults and t + experiment.fault_s <= end and (experiment.cycles is None or cycle < experiment.cycles):
        fault = faults[cycle % len(faults)]
        steps.extend(_fault_steps(fault, t, experiment.fault_s, nodes, rng))
        t += experiment.fault_s + experiment.heal_s
        cycle += 1
        if cycle >= 1000:
            break
    return sorted(steps, key=lambda s: s.at)


def rolling_restart(nodes: int, rng: random.Random, start: float, end: float) -> list[Step]:
    """Every node restarted once (`roll`: drain, stop, start, wait until it rejoined and is ready), one at a
    time, in a seeded order, spread evenly from `start` to `end`. A restart that takes longer than its share
    delays the next one (the nemesis carries out one step after the other)."""
    order = list(range(nodes))
    rng.shuffle(order)
    spacing = max(0.0, end - start) / nodes
    return [Step(round(start + i * spacing, 3), "roll", node=victim) for i, victim in enumerate(order)]


def _fault_steps(fault: Fault, t: float, length: float, nodes: int, rng: random.Random) -> list[Step]:
    if fault in CUTTERS:
        return [Step(t, "cut", CUTTERS[fault](nodes, rng), label=fault), Step(t + length, "heal")]
    if fault == "flap":
        steps: list[Step] = []
        flip = t
        period = max(1.0, min(3.0, length / 4))
        for _ in range(100):
            if flip + period > t + length:
                break
            steps.append(Step(round(flip, 3), "cut", halves(nodes, rng), label="flap"))
            steps.append(Step(round(flip + period / 2, 3), "heal"))
            flip += period
        if not steps:
            steps = [Step(t, "cut", halves(nodes, rng), label="flap"), Step(t + length, "heal")]
        return steps
    victim = rng.randrange(nodes)
    if fault == "churn":
        return _churn_steps(t, length, nodes, victim, rng)
    if fault == "ownerloss":  # the victim is the node with the most persistent sessions when the step runs
        return [Step(t, "lose"), Step(t + length, "replace")]
    if fault == "kill":
        return [Step(t, "kill", node=victim), Step(t + length, "restart", node=victim)]
    if fault == "pause":
        return [Step(t, "pause", node=victim), Step(t + length, "resume", node=victim)]
    if fault == "skew":
        offset = rng.choice((-1, 1)) * rng.uniform(5.0, 60.0)
        return [Step(t, "skew", node=victim, skew_s=round(offset, 1)), Step(t + length, "unskew", node=victim)]
    raise ValueError(f"unknown fault {fault!r}")


def _churn_steps(t: float, length: float, nodes: int, victim: int, rng: random.Random) -> list[Step]:
    """A member leaves and joins again while a partition is in force, so the membership change reaches the two
    sides at different times: the others are split into two sides that cannot talk, the victim reaches both
    (it can hand its sessions to any of them). It leaves with -k (the command run on a node of one side), and
    later joins again through a node of the other side (which learns of the join first; the first side learns
    it only through the victim)."""
    if nodes < 3:
        raise ValueError("membership churn needs at least 3 nodes")
    rest = [n for n in range(nodes) if n != victim]
    rng.shuffle(rest)
    size = len(rest) // 2
    one, two = rest[:size], rest[size:]
    cut = cut_between(set(one), set(two))
    return [
        Step(t, "cut", cut, label="churn"),
        Step(t + 1.0, "leave", node=victim, other=one[0]),
        Step(t + length * 0.6, "join", node=victim, other=two[0]),
        Step(t + length, "heal"),
    ]


def reachable(nodes: int, cut: frozenset[Pair]) -> dict[int, set[int]]:
    """Who each node can talk to under a cut (itself included)."""
    return {a: {b for b in range(nodes) if a == b or pair(a, b) not in cut} for a in range(nodes)}
