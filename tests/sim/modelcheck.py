"""An exhaustive small-scope model checker of the replica protocol, over the real `Replica` (issue 19).

A *scope* fixes a few replicas, a prelude (actions run first with every message delivered at once: the state
the search starts from), a script of operator and client actions (puts, deletes, a membership change that
reaches the replicas one group at a time, a replica's timers, an exchange between two chosen replicas) and
budgets for what the environment may do in between: start an anti-entropy exchange between any two replicas,
fire a replica's timer (timeouts, GC, write-backs, the periodic exchange), drop a message, crash a replica. The
checker explores **every interleaving** of the script's next action, the delivery of the next message on any
link (links are TCP: first in, first out per ordered pair of replicas; a drop loses the link's next message, as
a reset link loses what it buffered), and the environment's moves, depth first, with sleep sets (of two moves
that commute, the second order is not explored again) and state hashing (a state is the pickled world: every
replica, what is durable, what is not yet, the messages in flight, the script position and the budgets left).

The durability boundary is modelled as the driver contract of replica.py says it is: `Persist` outputs are
volatile until a flush (an environment move, always enabled while something is volatile and a crash may come)
or until the replica sends a SyncRequest/SyncReply (the driver makes them durable first); a crash loses what is
volatile and every message to the crashed replica, and restores it from what is durable. A local write is made
durable with its call (the service acknowledges a write only once it is stored), so a crash never loses an
acknowledged write.

Checked on every path: a crash never loses a dot the replica had announced in a SyncRequest (peers collect on
what that clock claims). Checked at every quiescent state (the script done, nothing in flight), after a
deterministic completion (every replica learns the final membership, then rounds of exchanges between every
pair and timers until the replicas agree), once with the replicas taking their turns in one order and once in
the reverse order: each replica holds exactly what the causal model of every write says must survive
(tests/sim/model.py: no deleted value back, no lost write), and the replicas converged (values, contexts, node
clocks). A violation found lowers the depth bound of the search below its path, and the search goes on: the
path reported is a shortest one (unless the search hit the state cap: the report then says so).

`python -m tests.sim.modelcheck [--legacy] [--scope NAME] [--max-states N]` runs the scopes (docs/replication.md
section 10 has the figures).
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from tests.sim.model import Op, actual_state, expected_state
from vmqpy.metadata import messages
from vmqpy.metadata.memory_network import MemoryNetwork
from vmqpy.metadata.replica import Logged, Output, Persist, Replica, SendTo

P = "subs"
COMPLETION_ROUNDS = 12

# The kinds of violation found at a quiescent state (each report starts with one of them).
DELETED_VALUE_BACK = "a deleted value is back"
SUPERSEDED_VALUE_BACK = "a superseded value is back"
WRITE_LOST = "a write is lost"
NOT_CONVERGED = "the replicas did not converge"


class CompactRandom(random.Random):
    """The replicas' random choices (exchange jitter, the periodic exchange's peer), from a 64-bit linear
    congruential generator: its whole state is one int, where a Mersenne Twister would pickle 625 words into
    every state the checker stores."""

    state: int

    def seed(self, a: Any = None, version: int = 2) -> None:
        self.state = a if isinstance(a, int) else 0

    def random(self) -> float:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFF_FFFF_FFFF_FFFF
        return (self.state >> 11) / float(1 << 53)

    def getstate(self) -> Any:
        return self.state

    def setstate(self, state: Any) -> None:
        self.state = state


@dataclass(frozen=True)
class Act:
    """One action of a prelude or a script: put/delete of `key` on `node`, `members` announced on `on`, the
    timers of `node` (time jumps past every timeout), or an exchange `node` pulls from `key` (the peer)."""

    kind: str  # put | delete | members | timer | exchange
    node: str = ""
    key: str = ""
    members: tuple[str, ...] = ()
    on: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.kind == "members":
            return f"membership {list(self.members)} reaches {list(self.on)}"
        if self.kind == "timer":
            return f"timer {self.node} (script)"
        if self.kind == "exchange":
            return f"exchange {self.node}->{self.key} (script)"
        return f"{self.kind} {self.key} on {self.node}"

    @property
    def replicas(self) -> tuple[str, ...]:
        """The replicas the action calls."""
        return self.on if self.kind == "members" else (self.node,)


@dataclass(frozen=True)
class Scope:
    name: str
    nodes: tuple[str, ...]
    members: dict[str, tuple[str, ...]]  # each replica's initial membership view
    script: tuple[Act, ...]
    prelude: tuple[Act, ...] = ()  # run before the search, each action's messages all delivered in order
    exchanges: int = 3  # exchange starts the environment may make
    timers: int = 2  # timer firings (time jumps past every timeout and the GC interval)
    drops: int = 0
    crashes: int = 0
    batch_size: int = 500
    replica: type[Replica] = Replica


@dataclass
class World:
    replicas: dict[str, Replica]
    durable: dict[str, dict[str, dict[bytes, bytes]]]
    volatile: dict[str, list[Persist]]
    inflight: list[tuple[str, str, str, bytes]]  # (from, to, message type, encoded message)
    pc: int
    budget: dict[str, int]
    now: dict[str, float]  # each replica's own monotonic clock (timers of different replicas commute)
    ops: list[Op] = field(default_factory=list)
    announced: dict[str, Any] = field(default_factory=dict)  # node -> merge of the clocks it sent
    views: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each replica's membership view
    violation: str | None = None


@dataclass
class Result:
    scope: str
    states: int  # distinct states explored
    quiescent: int
    seconds: float
    violation: str | None
    path: list[str]
    capped: bool  # a search stopped at the state cap: not explored completely (or the path may not be shortest)


def _replica_kwargs(scope: Scope) -> dict[str, Any]:
    return {"sync_interval": 1.0, "exchange_timeout": 1.0, "batch_size": scope.batch_size, "writeback_delay": 0.0}


def initial(scope: Scope) -> World:
    """The world the search starts from: the replicas with their initial views, and the prelude done."""
    replicas = {n: scope.replica(n, rng=CompactRandom(i), **_replica_kwargs(scope)) for i, n in enumerate(scope.nodes)}
    world = World(
        replicas,
        {n: {} for n in scope.nodes},
        {n: [] for n in scope.nodes},
        [],
        0,
        {"exchanges": scope.exchanges, "timers": scope.timers, "drops": scope.drops, "crashes": scope.crashes},
        dict.fromkeys(scope.nodes, 0.0),
    )
    for n in scope.nodes:
        world.views[n] = scope.members[n]
        _call(world, n, functools.partial(Replica.set_peers, peers=scope.members[n]))
        replicas[n].set_reachable(m for m in scope.nodes if m != n)
    for i, act in enumerate(scope.prelude, 1):
        _perform(world, act, f"{act.node}:prelude{i}")
        _drain(world)
    for n in scope.nodes:
        _flush(world, n)
    return world


def _flush(world: World, node: str) -> None:
    for p in world.volatile[node]:
        table = world.durable[node].setdefault(p.table, {})
        if p.value is None:
            table.pop(p.key, None)
        else:
            table[p.key] = p.value
    world.volatile[node] = []


def _call(world: World, node: str, call: Callable[[Replica], list[Output] | None]) -> None:
    """Run a replica call and apply its outputs as the driver does (see the module doc)."""
    outputs = call(world.replicas[node]) or []
    wrote = False
    for out in outputs:
        if isinstance(out, Persist):
            world.volatile[node].append(out)
        elif isinstance(out, SendTo):
            message = out.message
            if isinstance(message, messages.SyncRequest | messages.SyncReply):
                _flush(world, node)
            if isinstance(message, messages.SyncRequest):
                known = world.announced.get(node)
                world.announced[node] = message.clock if known is None else known.merge(message.clock)
            if out.peer in world.replicas:
                world.inflight.append((node, out.peer, type(message).__name__, messages.encode(message)))
        elif isinstance(out, Logged) and out.event == "md_write":
            f = out.fields
            value = None if f["value"] is None else msgpack.unpackb(f["value"], raw=False, strict_map_key=False)
            world.ops.append(
                Op(
                    node,
                    f["prefix"],
                    tuple(f["key"]),
                    (f["dot"][0], f["dot"][1]),
                    value,
                    dict(f["context"]),
                    bool(f.get("writeback")),
                )
            )
            wrote = True
    if wrote:
        _flush(world, node)  # a write is acknowledged once stored: it is durable with its call


def _crash(world: World, scope: Scope, node: str) -> None:
    world.volatile[node] = []
    world.inflight = [m for m in world.inflight if m[1] != node]
    rows = {table: sorted(entries.items()) for table, entries in world.durable[node].items()}
    replica = scope.replica.restore(node, rows, rng=CompactRandom(7), **_replica_kwargs(scope))
    announced = world.announced.get(node)
    if announced is not None:
        lost = announced.missing_dots(replica.node_clock)
        if lost:
            world.violation = f"{node} restarted without dots it had announced: {lost}"
    world.replicas[node] = replica
    replica.set_reachable(m for m in scope.nodes if m != node)
    _call(world, node, lambda r: r.set_peers(world.views[node]))  # the cluster layer's membership, as on a node


def _perform(world: World, act: Act, value: str) -> None:
    """Do a prelude's or a script's action (a put writes `value`)."""
    node = act.node
    if act.kind == "put":
        _call(world, node, lambda r: r.put(P, (act.key,), {"v": value}, world.now[node]))
    elif act.kind == "delete":
        _call(world, node, lambda r: r.delete(P, (act.key,), world.now[node]))
    elif act.kind == "timer":
        world.now[node] += 10.0
        _call(world, node, lambda r: r.on_timer(world.now[node]))
    elif act.kind == "exchange":
        _call(world, node, lambda r: r.exchange_now(act.key, world.now[node]))
    else:
        for n in act.on:
            world.views[n] = act.members
            _call(world, n, lambda r: r.set_peers(act.members))


@dataclass(frozen=True)
class Move:
    """One move: its label (names it across states: a link's next message, a node's timer, ...), what it
    touches (replicas, budgets, the script: two moves that touch nothing in common commute and neither
    disables the other), and how to apply it to a copy of the world."""

    label: str
    touches: frozenset[str]
    apply: Callable[[World], None]


def moves(world: World, scope: Scope) -> Iterator[Move]:
    """Every move enabled in `world`.

    What a move touches: the replicas it calls (a message it sends goes to the tail of a link, which commutes
    with taking the head of any link), the budget it spends when one unit of it is left (with more, two moves
    spending it commute and neither disables the other) and, for the script, the script position. A crash also
    touches every other replica: it loses the messages in flight to the crashed one, so it does not commute
    with a move that sends one. An exchange is offered only with a replica the node counts as a member (asked
    for another, a replica does nothing: the move would only spend budget)."""
    every_replica = frozenset(scope.nodes)
    spends = {b: frozenset((f"budget:{b}",) if world.budget[b] == 1 else ()) for b in world.budget}
    if world.pc < len(scope.script):
        act = scope.script[world.pc]

        def script(w: World, act: Act = act) -> None:
            w.pc += 1
            _perform(w, act, f"{act.node}:{w.pc}")

        yield Move(str(act), frozenset(act.replicas) | {"script"}, script)
    heads: set[tuple[str, str]] = set()
    for i, (src, dst, kind, _payload) in enumerate(world.inflight):
        if (src, dst) in heads:
            continue  # a link is TCP: first in, first out per ordered pair
        heads.add((src, dst))

        def deliver(w: World, i: int = i) -> None:
            src, dst, _kind, payload = w.inflight.pop(i)
            _call(w, dst, lambda r: r.receive(src, messages.decode(payload), w.now[dst]))

        yield Move(f"deliver {kind} {src}->{dst}", frozenset((dst,)), deliver)
        if world.budget["drops"]:

            def drop(w: World, i: int = i) -> None:
                w.inflight.pop(i)
                w.budget["drops"] -= 1

            yield Move(f"drop {kind} {src}->{dst}", frozenset((dst,)) | spends["drops"], drop)
    for node in scope.nodes:
        if world.volatile[node] and world.budget["crashes"]:  # without a crash to come, when is immaterial
            yield Move(f"flush {node}", frozenset((node,)), functools.partial(_flush, node=node))
        if world.budget["timers"]:

            def timer(w: World, node: str = node) -> None:
                w.budget["timers"] -= 1
                w.now[node] += 10.0
                _call(w, node, lambda r: r.on_timer(w.now[node]))

            yield Move(f"timer {node}", frozenset((node,)) | spends["timers"], timer)
        if world.replicas[node].applying():  # the driver's next turn: the next slice of a reply, no time passes

            def turn(w: World, node: str = node) -> None:
                _call(w, node, lambda r: r.on_timer(w.now[node]))

            yield Move(f"turn {node}", frozenset((node,)), turn)
        if world.budget["crashes"]:

            def crash(w: World, node: str = node) -> None:
                w.budget["crashes"] -= 1
                _crash(w, scope, node)

            yield Move(f"crash {node}", every_replica | spends["crashes"], crash)
        if world.budget["exchanges"]:
            for peer in world.replicas[node].peers:

                def exchange(w: World, node: str = node, peer: str = peer) -> None:
                    w.budget["exchanges"] -= 1
                    _call(w, node, lambda r: r.exchange_now(peer, w.now[node]))

                yield Move(f"exchange {node}->{peer}", frozenset((node,)) | spends["exchanges"], exchange)


def _drain(world: World, limit: int = 20_000) -> None:
    for _ in range(limit):
        if not world.inflight:
            applying = [n for n, r in world.replicas.items() if r.applying()]
            if not applying:
                return
            _call(world, applying[0], lambda r, n=applying[0]: r.on_timer(world.now[n]))  # type: ignore[misc]
            continue
        src, dst, _kind, payload = world.inflight.pop(0)
        _call(
            world,
            dst,
            lambda r, src=src, dst=dst, payload=payload: r.receive(  # type: ignore[misc]
                src, messages.decode(payload), world.now[dst]
            ),
        )
    raise AssertionError("messages kept flowing for 20,000 deliveries")


def final_members(scope: Scope) -> tuple[str, ...]:
    changes = [a.members for a in scope.script if a.kind == "members"]
    if changes:
        return changes[-1]
    return scope.members[scope.nodes[0]]


def settle(world: World, scope: Scope) -> str | None:
    """The deterministic completions of a quiescent state (module doc), with the replicas taking their turns in
    one order and in the reverse order; the violation found, or None."""
    blob = pickle.dumps(world)
    return _settle(world, scope, list(scope.nodes)) or _settle(pickle.loads(blob), scope, list(scope.nodes)[::-1])


def _settle(world: World, scope: Scope, order: list[str]) -> str | None:
    members = final_members(scope)
    for n in scope.nodes:
        _flush(world, n)
        world.views[n] = members
        _call(world, n, lambda r: r.set_peers(members))
    _drain(world)
    names = [n for n in order if n in members]
    converged = False
    for _round in range(COMPLETION_ROUNDS):
        for a in names:
            for b in names:
                if a != b:
                    _call(world, a, lambda r, a=a, b=b: r.exchange_now(b, world.now[a]))  # type: ignore[misc]
                    _drain(world)
        for a in names:
            world.now[a] += 10.0
            _call(world, a, lambda r, a=a: r.on_timer(world.now[a]))  # type: ignore[misc]
            _drain(world)
        states = [MemoryNetwork.state_of(world.replicas[n]) for n in names]
        if all(s == states[0] for s in states) and not any(world.replicas[n].busy() for n in names):
            converged = True
            break
    how = f"completion in the order {names}" + (
        "" if converged else f", not converged after {COMPLETION_ROUNDS} rounds"
    )
    expected = expected_state(world.ops)
    for n in names:
        actual = actual_state(world.replicas[n])
        for fk in sorted(set(expected) | set(actual), key=repr):
            want, got = expected.get(fk), actual.get(fk)
            if want != got:
                return (
                    f"{_kind_of(want, got)}: {n} {fk[1]}: the causal model says {want}, the replica holds {got} ({how})"
                )
    if not converged:
        return f"{NOT_CONVERGED} after {COMPLETION_ROUNDS} rounds of exchanges with every peer ({how})"
    return None


def _kind_of(want: list[Any] | None, got: list[Any] | None) -> str:
    """Which kind of violation a replica holding `got` of a key, where the causal model says `want`, is."""
    if any(version not in (want or []) for version in got or []):
        return DELETED_VALUE_BACK if want is None else SUPERSEDED_VALUE_BACK
    return WRITE_LOST


def _digest(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=16).digest()


def _snapshot(world: World) -> bytes:
    """The world, pickled in a canonical order where order carries no meaning: the messages of different links
    (each link keeps its own order) and the writes the causal model reads."""
    world.inflight.sort(key=lambda m: (m[0], m[1]))  # stable: each link's messages keep their order
    world.ops.sort(key=lambda op: op.dot)
    if not world.budget["crashes"]:
        for node in world.volatile:  # no crash can come: what is volatile will be durable, whenever
            _flush(world, node)
    return pickle.dumps(world, protocol=pickle.HIGHEST_PROTOCOL)


def check(scope: Scope, max_states: int = 200_000, max_depth: int = 200) -> Result:
    """Explore every interleaving of `scope` depth first, with sleep sets (a move independent of the one just
    taken, and already explored from the parent, is not explored again from the child: the two orders reach
    the same state) and state hashing. A violation found lowers the depth bound below its path, and the search
    goes on: when it ends, the path kept is a shortest one (unless the state cap stopped it)."""
    started = time.monotonic()
    root = _snapshot(initial(scope))
    explored: dict[bytes, tuple[frozenset[str], int]] = {}  # digest -> (sleep set, depth) of its exploration
    settled: dict[bytes, str | None] = {}  # quiescent state -> the violation its completion found
    best: tuple[str, list[str]] | None = None
    # (digest, blob, sleep set, path)
    stack: list[tuple[bytes, bytes, frozenset[str], list[str]]] = [(_digest(root), root, frozenset(), [])]
    capped = False
    while stack and not capped:
        state_id, blob, sleep, path = stack.pop()
        if len(path) > max_depth:
            continue  # a violation found since lowered the bound
        seen = explored.get(state_id)
        if seen is not None and seen[0] <= sleep and seen[1] <= len(path):
            continue  # explored already, as shallow and with fewer moves asleep
        # A second visit, no shallower, explores only the moves that were asleep on the first one.
        before = None if seen is None or seen[1] > len(path) else seen[0]
        explored[state_id] = (
            sleep if before is None else before & sleep,
            len(path) if seen is None else min(seen[1], len(path)),
        )
        world = pickle.loads(blob)
        if world.pc == len(scope.script) and not world.inflight:
            if state_id not in settled:
                settled[state_id] = settle(pickle.loads(blob), scope)
            violation = settled[state_id]
            if violation is not None:
                best, max_depth = (violation, path), len(path) - 1
                continue
        if len(path) >= max_depth:
            continue
        enabled = list(moves(world, scope))
        done: list[Move] = []
        for move in enabled:
            if move.label in sleep or (before is not None and move.label not in before):
                continue  # asleep here, or explored from this state on the earlier visit
            child = pickle.loads(blob)
            move.apply(child)
            child_path = [*path, move.label]
            if child.violation is not None:
                best, max_depth = (child.violation, child_path), len(child_path) - 1
                break
            child_blob = _snapshot(child)
            child_sleep = frozenset(m.label for m in done if not (m.touches & move.touches)) | frozenset(
                label for label in sleep if _independent(label, move, enabled)
            )
            stack.append((_digest(child_blob), child_blob, child_sleep, child_path))
            done.append(move)
            if len(explored) >= max_states:
                capped = True
                break
    seconds = time.monotonic() - started
    quiescent = len(settled)
    if best is None:
        return Result(scope.name, len(explored), quiescent, seconds, None, [], capped)
    return Result(scope.name, len(explored), quiescent, seconds, best[0], best[1], capped)


def _independent(label: str, move: Move, enabled: list[Move]) -> bool:
    for other in enabled:
        if other.label == label:
            return not (other.touches & move.touches)
    return False


def report(result: Result) -> str:
    head = f"{result.scope}: {result.states} states, {result.quiescent} quiescent, {result.seconds:.1f} s" + (
        " (capped)" if result.capped else ""
    )
    if result.violation is None:
        return head + ": no violation"
    steps = "\n".join(f"  {i}. {label}" for i, label in enumerate(result.path, 1))
    which = "a path" if result.capped else "shortest path"
    return f"{head}\nVIOLATION: {result.violation}\n{which} ({len(result.path)} moves):\n{steps}"


# ------------------------------------------------------------------------------------------------ the scopes

AB = ("a", "b")
ABX = ("a", "b", "x")

GAPS_THEN_CRASH = Scope(
    "gaps-then-crash",
    nodes=("a", "x"),
    members={"a": ("a",), "x": ("x",)},
    script=(
        Act("put", "a", "k1"),
        Act("put", "a", "k1"),  # overwritten: a's GC leaves its dot to be sent as a gap
        Act("put", "a", "k2"),
        Act("timer", "a"),
        Act("members", members=("a", "x"), on=("a", "x")),  # x joins and catches up in one-key batches
    ),
    exchanges=1,
    timers=1,
    drops=1,
    crashes=1,
    batch_size=1,
)

# The crash scope with one budget less, for `make test`: the environment starts no exchange of its own (the
# membership change still starts x's catch-up, the drop, the timer and the crash stay). About a seventh of the
# states of `gaps-then-crash`, which runs with MODELCHECK_FULL=1; the old rules still lose the gap dots here.
GAPS_THEN_CRASH_SHORT = Scope(
    "gaps-then-crash-short",
    nodes=GAPS_THEN_CRASH.nodes,
    members=GAPS_THEN_CRASH.members,
    script=GAPS_THEN_CRASH.script,
    exchanges=0,
    timers=1,
    drops=1,
    crashes=1,
    batch_size=1,
)

GAPS_THEN_CRASH_WIDE = Scope(
    "gaps-then-crash-wide",
    nodes=("a", "x"),
    members={"a": ("a",), "x": ("x",)},
    script=GAPS_THEN_CRASH.script[:3] + GAPS_THEN_CRASH.script[4:],
    exchanges=1,
    timers=2,
    drops=1,
    crashes=1,
    batch_size=1,
)

# Issue 19, history 1, with three replicas: a and b hold k (written on a); x joins and the new membership
# reaches a and x first (x pulls k from a at once); b deletes k; b pulls from a, whose reply says a holds the
# delete; the membership reaches b; x pulls from b. Every interleaving of those steps with the messages they
# cause (the exchanges set_peers starts, the pushes, every request and reply) is explored.
UNEVEN_JOIN = Scope(
    "uneven-join",
    nodes=ABX,
    members={"a": AB, "b": AB, "x": ("x",)},
    prelude=(Act("put", "a", "k"),),
    script=(
        Act("members", members=ABX, on=("a", "x")),  # the join reaches a (and x) first
        Act("delete", "b", "k"),
        Act("exchange", "b", "a"),  # b learns that a holds the delete, and collects it if it may
        Act("members", members=ABX, on=("b",)),  # and b last
        Act("exchange", "x", "b"),
    ),
    exchanges=0,
    timers=0,
)

# The same history, with the environment choosing every exchange after the join: any two exchanges, between
# any two replicas (one that counts the other), at any point.
UNEVEN_JOIN_WIDE = Scope(
    "uneven-join-wide",
    nodes=ABX,
    members=UNEVEN_JOIN.members,
    prelude=UNEVEN_JOIN.prelude,
    script=tuple(act for act in UNEVEN_JOIN.script if act.kind != "exchange"),
    exchanges=2,
    timers=0,
)

class SlicedReplica(Replica):
    """Applies a reply one object per call (and re-strips one object per call): every move of the environment can
    fall between two objects of one reply."""

    APPLY_SLICE = 1
    RESTRIP_SLICE = 1


# A fresh replica catching up with one reply of three objects (batch 500) applied an object per call: the driver's
# turns (`turn x`) interleave with a drop, a crash, a flush and a timer that jumps past the exchange's deadline.
SLICED_CATCH_UP = Scope(
    "sliced-catch-up",
    nodes=("a", "x"),
    members={"a": ("a",), "x": ("x",)},
    script=(
        Act("put", "a", "k1"),
        Act("put", "a", "k1"),  # overwritten: a gap once a's GC ran
        Act("put", "a", "k2"),
        Act("put", "a", "k3"),
        Act("delete", "a", "k3"),
        Act("timer", "a"),
        Act("members", members=("a", "x"), on=("a", "x")),
    ),
    exchanges=1,
    timers=1,
    drops=1,
    crashes=1,
    replica=SlicedReplica,
)

SCOPES = (GAPS_THEN_CRASH_SHORT, GAPS_THEN_CRASH, UNEVEN_JOIN, GAPS_THEN_CRASH_WIDE, UNEVEN_JOIN_WIDE, SLICED_CATCH_UP)


def with_old_rules(scope: Scope) -> Scope:
    """`scope` over the replica with the rules before issue 19's fixes (tests/sim/legacy.py)."""
    from tests.sim.legacy import LegacyReplica

    return Scope(**{**scope.__dict__, "replica": LegacyReplica, "name": scope.name + " (old rules)"})


def main() -> None:
    import argparse
    import os
    import sys

    if "PYTHONHASHSEED" not in os.environ:
        # A pickled set lists its members in hash order: with a random hash seed, equal states may pickle
        # differently, and the number of distinct pickles counted varies from run to run. A fixed seed makes
        # the figures reproducible.
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim.modelcheck", *sys.argv[1:]])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legacy", action="store_true", help="check the rules before issue 19's fixes")
    parser.add_argument(
        "--scope",
        action="append",
        choices=[s.name for s in SCOPES],
        help="check only this scope (repeatable; default: every scope)",
    )
    parser.add_argument("--max-states", type=int, default=500_000)
    args = parser.parse_args()
    for scope in SCOPES:
        if args.scope and scope.name not in args.scope:
            continue
        print(report(check(with_old_rules(scope) if args.legacy else scope, args.max_states)), flush=True)


if __name__ == "__main__":
    main()
