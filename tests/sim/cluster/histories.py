"""Seeded histories of a whole cluster on simulated time, and the checkers run on what they leave behind.

A history (`generate(seed, faults=PROFILES[...])`) is a list of timed operations on three real nodes
(harness.py): publishes at QoS 1 and 2 from publishers spread over the nodes, persistent subscribers going
offline and coming back on another node without closing their old socket (a takeover), clean-session clients
that subscribe and leave (their records must be deleted and stay deleted), and fault episodes: partitions and
heals, crashes with the disk kept or lost (a node that lost its disk joins again as a new node), `cluster leave
-k` and `cluster join` (churn), steps of a node's wall clock. `simulate(history)` plays it and ends it: every
cut healed, every node up and a member, every subscriber back; then it lets the cluster settle and collects the
`Outcome`. docs/testing.md describes the whole.

The checkers (`check(outcome)`), each one promise of docs/ (the kind of problem first):
* lost: every QoS 1/2 publish the broker acknowledged (PUBACK, PUBREC) after a persistent subscriber's SUBACK
  reached that subscriber, unless a node that held its session lost its disk before it was found gone;
* duplicated: a QoS 2 publish reached a QoS 2 subscriber at most once;
* sessions: at most one live connection and one node with the session online per client id, once settled;
* diverged: every node's metadata store holds the same records (sessions, subscriptions, retained, membership);
* resurrected: no record of a clean-session client that left is found on any node;
* forgotten: a persistent session is not gone (CONNACK without session present) unless a disk was lost;
* stuck: every subscriber connects again after the history;
* vanished: every write a node's replication log records (md_write) reached every member: once settled, each
  node's store has seen its dot (it holds it, or a later write that replaced it). Not judged: what a node logged
  before a kill -9 (a write the kill interrupted before it was durable may be in the log), and what a node the
  cluster removed wrote before it learned it (docs/cluster.md: a node removed while out of reach loses what it
  wrote meanwhile; a reachable one's writes reach the members before its removal). Judged: what a node writes
  once it knows it left (it serves nothing and links to no one, and its rejoin empties its store: such a write
  would be a version in the log that no member ever had, which a convergence audit of the logs trips on).
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dvv.node_clock import NodeClock
from vmqpy.cluster.membership import MEMBERSHIP
from vmqpy.sessions import records

from .harness import SimClient, SimCluster, Slot, close_loop, process_patches
from .virtual import VirtualClock, VirtualLoop, clock_patches

NODES = 3
SUBSCRIBERS = 3
PUBLISHERS = 2
LENGTH = 30.0  # simulated seconds of operations
SETTLE = 20.0  # simulated seconds the cluster is given to settle at the end, twice
PREFIXES = (records.SESSION, records.SUBSCRIPTION, records.RETAIN, MEMBERSHIP)


@dataclass(frozen=True)
class Op:
    at: float  # simulated seconds from the start of the history
    kind: str  # publish, offline, online, clean, partition, heal, crash, restart, leave, slow, rejoin, step
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.at:7.3f} {self.kind} {' '.join(map(str, self.args))}"


@dataclass
class History:
    seed: int
    ops: list[Op]

    def __str__(self) -> str:
        return "\n".join(str(op) for op in self.ops)


FAULTS = ("partition", "crash", "step", "churn")
#: The faults the histories of each profile draw from (`calm`: none, only the clients' takeovers and comings
#: and goings).
PROFILES = {"calm": (), "clocks": ("step",), "partitions": ("partition",), "crashes": ("crash",),
            "churn": ("churn",), "all": FAULTS}


def generate(seed: int, length: float = LENGTH, faults: tuple[str, ...] = FAULTS) -> History:
    """One history: client operations at seeded times (four a second), and fault episodes one after the other
    (a partition or a crash lasting one to six seconds, or a clock step: those of `faults`), one every four
    seconds on average."""
    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(1, NODES + 1)]
    ops: list[Op] = []
    at = 0.0
    offline: set[int] = set()
    clean = 0
    while True:
        at += rng.expovariate(4.0)
        if at >= length:
            break
        roll = rng.random()
        if roll < 0.75:
            ops.append(Op(at, "publish", (rng.randrange(PUBLISHERS), rng.choice((1, 2)))))
        elif roll < 0.92:
            sub = rng.randrange(SUBSCRIBERS)
            if sub in offline:
                offline.discard(sub)
                ops.append(Op(at, "online", (sub, rng.choice(nodes))))
            elif rng.random() < 0.5:
                offline.add(sub)
                ops.append(Op(at, "offline", (sub,)))
            else:
                ops.append(Op(at, "online", (sub, rng.choice(nodes))))  # a takeover when it lands elsewhere
        else:
            ops.append(Op(at, "clean", (clean, rng.choice(nodes))))
            clean += 1
    at = 0.0
    while True:
        at += rng.expovariate(0.25)
        if at >= length:
            break
        roll = rng.random()
        lasting = rng.uniform(1.0, 6.0)
        kind = "partition" if roll < 0.4 else "crash" if roll < 0.65 else "churn" if roll < 0.85 else "step"
        if not faults:
            break
        if kind not in faults:
            kind = rng.choice(faults)
        if kind == "partition":
            alone = rng.sample(nodes, 1 if rng.random() < 0.7 else 2)
            ops.append(Op(at, "partition", (tuple(alone), tuple(n for n in nodes if n not in alone))))
            ops.append(Op(at + lasting, "heal"))
        elif kind == "churn":  # `cluster leave -k` of one node run on another, and its `cluster join` later
            node, runner = rng.sample(nodes, 2)
            ops.append(Op(at, "leave", (node, runner)))
            if rng.random() < 0.5:  # while the others are split (the chaos membership-churn nemesis)
                third = next(n for n in nodes if n not in (node, runner))
                ops.append(Op(at + 0.2, "partition", ((third,), (node, runner))))
                ops.append(Op(at + 0.2 + lasting / 2, "heal"))
            slow = rng.random() < 0.5  # the rejoin over a congested path: its catch-up takes seconds
            if slow:
                ops.append(Op(at + lasting - 0.1, "slow", (node, 0.8)))
            ops.append(Op(at + lasting, "rejoin", (node, runner)))
            if slow:
                ops.append(Op(at + lasting + 8.0, "slow", (node, 0.0)))
        elif kind == "crash":
            node = rng.choice(nodes)
            ops.append(Op(at, "crash", (node, rng.random() < 0.8)))
            ops.append(Op(at + lasting, "restart", (node,)))
        else:
            ops.append(Op(at, "step", (rng.choice(nodes), rng.choice((-30.0, -2.0, 2.0, 30.0)))))
            lasting = 0.0
        at += lasting
    ops.sort(key=lambda op: op.at)
    return History(seed, ops)


@dataclass
class Sent:
    """One publish: who sent it, when, at which QoS, and when the broker acknowledged it (None: never)."""

    payload: bytes
    qos: int
    sent_at: float
    acked_at: float | None = None


@dataclass(frozen=True)
class Logged:
    """A write a node's replication log records (an md_write line; docs/replication-log.md)."""

    node: str  # the node whose log holds it (its label)
    dot: tuple[str, int]  # [replica id, counter]
    prefix: str
    key: Any
    op: str  # put or delete
    removed: bool = False  # the cluster removed the incarnation that wrote it (and the node learned it)
    known: bool = False  # written after the node learned it (it left: its store should take no write)

    def __str__(self) -> str:
        return f"{self.op} of {self.prefix} {self.key!r} (dot {self.dot[0]} {self.dot[1]}) logged by {self.node}"


@dataclass
class Outcome:
    history: History
    sent: dict[bytes, Sent] = field(default_factory=dict)
    # subscriber -> its subscriptions' lives: [time of the SUBACK, time a CONNACK said the session was gone or None]
    windows: dict[str, list[list[float | None]]] = field(default_factory=dict)
    disk_lost: dict[str, list[float]] = field(default_factory=dict)  # subscriber -> when a node of its session did
    deliveries: dict[str, list[tuple[bytes, int]]] = field(default_factory=dict)  # subscriber -> (payload, qos)
    live_sessions: dict[str, list[str]] = field(default_factory=dict)  # client id -> nodes with it online
    stores: dict[str, dict[str, dict[Any, Any]]] = field(default_factory=dict)  # node -> prefix -> key -> value
    left_clean: list[str] = field(default_factory=list)  # clean-session clients that disconnected
    connected_at_end: dict[str, bool] = field(default_factory=dict)
    # every write the nodes' replication logs record (md_write), but those a node logged before it was killed
    logged: list[Logged] = field(default_factory=list)
    clocks: dict[str, NodeClock] = field(default_factory=dict)  # node -> every dot its metadata store has seen
    errors: list[str] = field(default_factory=list)  # exceptions in the nodes' callbacks
    trace: list[str] = field(default_factory=list)  # the clients' and the faults' events, in time order
    cpu: float = 0.0


class Player:
    """Plays one history on a `SimCluster`."""

    def __init__(self, cluster: SimCluster, history: History, clock: VirtualClock) -> None:
        self.cluster = cluster
        self.history = history
        self.clock = clock
        self.rng = random.Random(history.seed ^ 0x5EED)
        self.outcome = Outcome(history)
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.subscribers = [SimClient(f"sub{i}", i, self.rng) for i in range(SUBSCRIBERS)]
        self.publishers = [SimClient(f"pub{i}", 100 + i, self.rng, clean=True) for i in range(PUBLISHERS)]
        self.offline: set[int] = set()
        self.faults: list[str] = []
        self.lost_disk: set[str] = set()  # nodes that crashed without their disk and have not joined again
        self.seq = 0
        self.sessions_of: dict[str, set[str]] = {}  # subscriber -> nodes that held its session
        self.log_from: dict[str, int] = {}  # node -> lines of its replication log written before it was killed
        for sub in self.subscribers:
            sub.on_connack = self._connack_hook(sub)
            self.outcome.deliveries[sub.client_id] = []
        for pub in self.publishers:
            pub.on_ack = self._acked

    def now(self) -> float:
        return self.loop.time() - self.t0

    def _connack_hook(self, sub: SimClient) -> Callable[[Any], None]:
        def connack(packet: Any) -> None:
            if packet.reason_code != 0 or sub.node is None:
                return
            holders = self.sessions_of.setdefault(sub.client_id, set())
            windows = self.outcome.windows.setdefault(sub.client_id, [])
            if not packet.session_present and windows and windows[-1][1] is None:
                windows[-1][1] = self.now()  # the session is gone: subscribe again
                holders.clear()
                pid = sub.subscribe("t/#", 2)
                sub.on_suback = self._suback_hook(sub, pid)
            holders.add(self.cluster[sub.node].name)
        return connack

    def _acked(self, packet: Any) -> None:
        sent = self.outcome.sent.get(bytes(packet.payload))
        if sent is not None and sent.acked_at is None:
            sent.acked_at = self.now()

    def up(self) -> list[Slot]:
        return [slot for slot in self.cluster.slots if slot.up]

    def watch(self) -> None:
        """Clients that lost their connection come back a second later on a node that is up (subscribers that
        went offline on purpose stay away)."""
        async def reconnect(client: SimClient, index: int | None) -> None:
            await asyncio.sleep(1.0)
            if client.pipe is None and (index is None or index not in self.offline):
                slots = self.up()
                if slots:
                    client.connect(self.rng.choice(slots))

        def lost_hook(client: SimClient, index: int | None) -> Callable[[], None]:
            def lost() -> None:
                self.loop.create_task(reconnect(client, index))
            return lost

        for i, sub in enumerate(self.subscribers):
            sub.on_lost = lost_hook(sub, i)
        for pub in self.publishers:
            pub.on_lost = lost_hook(pub, None)

    async def setup(self) -> None:
        cluster = self.cluster
        for slot in cluster.slots:
            await slot.start()
        for slot in cluster.slots[1:]:
            await cluster.join(slot, cluster.slots[0])
        await asyncio.sleep(2.0)
        self.watch()
        for i, sub in enumerate(self.subscribers):
            sub.connect(cluster.slots[i % NODES])
        for i, pub in enumerate(self.publishers):
            pub.connect(cluster.slots[(i + 1) % NODES])
        await asyncio.sleep(1.0)
        for sub in self.subscribers:
            pid = sub.subscribe("t/#", 2)
            sub.on_suback = self._suback_hook(sub, pid)
        await asyncio.sleep(2.0)

    def _suback_hook(self, sub: SimClient, pid: int) -> Callable[[int, list[int]], None]:
        def suback(packet_id: int, codes: list[int]) -> None:
            windows = self.outcome.windows.setdefault(sub.client_id, [])
            if packet_id == pid and codes and codes[0] < 0x80 and not (windows and windows[-1][1] is None):
                windows.append([self.now(), None])
        return suback

    async def play(self) -> None:
        base = self.now()  # the history's times count from the end of the set-up
        for op in self.history.ops:
            wait = base + op.at - self.now()
            if wait > 0:
                await asyncio.sleep(wait)
            await self.apply(op)

    async def apply(self, op: Op) -> None:
        cluster = self.cluster
        if op.kind != "publish":
            self.faults.append(f"{self.loop.time():10.3f} ** {op}")
        if op.kind == "publish":
            index, qos = op.args
            pub = self.publishers[index]
            if pub.connected:
                self.seq += 1
                payload = f"m{self.seq}".encode()
                self.outcome.sent[payload] = Sent(payload, qos, self.now())
                pid = pub.publish(f"t/{index}", payload, qos)
                pub.note(f"sends {payload.decode()} qos={qos} id={pid}")
        elif op.kind == "offline":
            self.offline.add(op.args[0])
            self.subscribers[op.args[0]].hang_up()
        elif op.kind == "online":
            index, node = op.args
            self.offline.discard(index)
            slot = cluster[node]
            if slot.up:  # a takeover when it lands elsewhere: the old socket is left to the broker to close
                self.subscribers[index].connect(slot, abandon=True)
        elif op.kind == "clean":
            index, node = op.args
            slot = cluster[node]
            if slot.up:
                self.loop.create_task(self.clean_client(index, slot))
        elif op.kind == "partition":
            side, other = op.args
            cluster.memory.partition([cluster[n].name for n in side], [cluster[n].name for n in other])
        elif op.kind == "heal":
            cluster.memory.heal_all()
        elif op.kind == "crash":
            node, keep_disk = op.args
            slot = cluster[node]
            if not keep_disk:
                for sub, nodes in self.sessions_of.items():
                    if slot.name in nodes:
                        self.outcome.disk_lost.setdefault(sub, []).append(self.now())
            await slot.crash(keep_disk)
            # a kill -9 may leave in the log writes it interrupted before they were durable: not judged
            self.log_from[node] = len(_log_lines(slot)) if keep_disk else 0
            if not keep_disk:
                self.lost_disk.add(node)
        elif op.kind == "restart":
            await self.restart(cluster[op.args[0]])
        elif op.kind == "leave":
            node, runner = op.args
            if cluster[node].up and cluster[runner].up:
                self.loop.create_task(self.leave(cluster[node], cluster[runner]))
        elif op.kind == "rejoin":
            node, runner = op.args
            if cluster[node].up:
                # a load balancer sends a publisher to the node as its join starts: until the cluster's records
                # are here it must refuse it (it knows no subscriber), or lose what it acknowledges
                self.loop.call_later(0.5, self.publishers[op.args[0] != "n1"].connect, cluster[node])
                await self.rejoin(cluster[node], cluster[runner])
        elif op.kind == "slow":
            node, seconds = op.args
            for other in cluster.slots:
                if other.label != node:
                    cluster.memory.slow(cluster[node].name, other.name, seconds)
        elif op.kind == "step":
            node, seconds = op.args
            self.clock.step(cluster[node].name, seconds)

    async def restart(self, slot: Slot) -> None:
        if slot.up:
            return
        await slot.start()
        if slot.label in self.lost_disk:  # a new node under the old name: it joins again
            self.lost_disk.discard(slot.label)
            await self.rejoin(slot, self.another(slot))

    def another(self, slot: Slot) -> Slot:
        return next(other for other in self.cluster.slots if other is not slot)

    async def leave(self, slot: Slot, runner: Slot) -> None:
        """`vmq-admin cluster leave node=SLOT -k` run on `runner` (its answer or refusal is not checked)."""
        node = runner.node
        if node is None or node.departure is None:
            return
        try:
            await node.departure.leave(slot.name, 0.5, 10.0)
        except Exception as exc:  # refused, or the runner went down: the checkers judge what it left behind
            self.faults.append(f"{self.loop.time():10.3f} ** leave of {slot.label} on {runner.label}: "
                               f"{type(exc).__name__}")

    async def rejoin(self, slot: Slot, to: Slot) -> None:
        """`vmq-admin cluster join discovery-node=TO` run on `slot` when it is no member (it left, or lost its
        disk), through another member when `to` is not up."""
        node = slot.node
        if node is None or node.cluster is None or node.departure is None:
            return
        if not node.cluster.removed and len(node.cluster.members) > 1:
            return
        for other in (to, *self.up()):
            if other is slot or not other.up:
                continue
            try:
                await node.departure.before_join()
                await self.cluster.join(slot, other)
                return
            except Exception as exc:
                self.faults.append(f"{self.loop.time():10.3f} ** join of {slot.label} to {other.label}: "
                                   f"{type(exc).__name__}")

    async def clean_client(self, index: int, slot: Slot) -> None:
        client = SimClient(f"clean{index}", 1000 + index, self.rng, clean=True)
        client.connect(slot)
        await asyncio.sleep(0.5)
        if not client.connected:
            client.hang_up()
            return
        client.subscribe(f"c/{index}", 1)
        await asyncio.sleep(0.5)
        client.disconnect()
        self.outcome.left_clean.append(client.client_id)

    async def finish(self) -> None:
        """Heal, restart, bring every subscriber back, let it settle; then collect."""
        cluster = self.cluster
        cluster.memory.heal_all()
        for slot in cluster.slots:
            for other in cluster.slots:
                cluster.memory.slow(slot.name, other.name, 0.0)
        for slot in cluster.slots:
            await self.restart(slot)
        await asyncio.sleep(SETTLE / 2)  # leaves still under way end
        for slot in cluster.slots:
            await self.rejoin(slot, self.another(slot))
        self.offline.clear()
        await asyncio.sleep(SETTLE)
        for sub in self.subscribers:
            if not sub.connected:
                sub.connect(self.rng.choice(self.up()))
        await asyncio.sleep(SETTLE)
        self.collect()

    def collect(self) -> None:
        outcome = self.outcome
        outcome.trace = sorted([*self.faults, *(line for client in (*self.subscribers, *self.publishers)
                                                for line in client.trace)])
        for sub in self.subscribers:
            outcome.deliveries[sub.client_id] = [(payload, qos) for _topic, payload, qos in sub.deliveries]
            outcome.connected_at_end[sub.client_id] = sub.connected
        for slot in self.up():
            node = slot.node
            assert node is not None and node.broker is not None and node.metadata is not None
            for client_id, session in node.broker.sessions.items():
                if session.online:
                    outcome.live_sessions.setdefault(client_id, []).append(f"a session on {slot.label}")
            for conn in node.connections:
                if conn.client_id and conn.session is not None and not conn.closing:
                    outcome.live_sessions.setdefault(conn.client_id, []).append(f"a connection on {slot.label}")
            outcome.stores[slot.name] = {prefix: dict(node.metadata.fold(prefix)) for prefix in PREFIXES}
            assert node.metadata.replica is not None
            outcome.clocks[slot.name] = node.metadata.replica.node_clock
        for slot in self.cluster.slots:
            outcome.logged += _writes(slot.label, _log_lines(slot), self.log_from.get(slot.label, 0))

    async def stop(self) -> None:
        for client in (*self.subscribers, *self.publishers):
            client.on_lost = None
        for slot in self.cluster.slots:
            if slot.up:
                await slot.stop()


def check(outcome: Outcome) -> list[str]:
    """Every promise the outcome breaks, one line each (empty: none)."""
    problems: list[str] = []
    for client_id, connected in outcome.connected_at_end.items():
        if not connected:
            problems.append(f"stuck: {client_id} could not connect again after the end of the history")
    for client_id, windows in outcome.windows.items():
        got = {payload for payload, _qos in outcome.deliveries.get(client_id, [])}
        lost_disk = outcome.disk_lost.get(client_id, [])
        for start, end in windows:
            assert start is not None
            excused = end is not None and any(start <= at <= end for at in lost_disk)
            if end is not None and not excused:
                problems.append(f"forgotten: the session of {client_id} was gone at {end:.3f} (CONNACK without "
                                f"session present), and no node that held it lost its disk")
            for sent in outcome.sent.values():
                if sent.acked_at is None or sent.payload in got or excused:
                    continue
                if start <= sent.sent_at and (end is None or sent.sent_at < end):
                    problems.append(f"lost: {sent.payload.decode()} (QoS {sent.qos}, sent at {sent.sent_at:.3f}, "
                                    f"acknowledged at {sent.acked_at:.3f}) never reached {client_id}")
    for client_id, deliveries in outcome.deliveries.items():
        seen: dict[bytes, int] = {}
        for payload, qos in deliveries:
            if qos == 2:
                seen[payload] = seen.get(payload, 0) + 1
        problems += [f"duplicated: {payload.decode()} reached {client_id} {count} times at QoS 2"
                     for payload, count in seen.items() if count > 1]
    for client_id, nodes in outcome.live_sessions.items():
        if sum(1 for live in nodes if "session" in live) > 1 or sum(1 for live in nodes if "connection" in live) > 1:
            problems.append(f"sessions: {client_id} is live more than once: {', '.join(sorted(nodes))}")
    stores = list(outcome.stores.items())
    for name, store in stores[1:]:
        first, reference = stores[0]
        for prefix in PREFIXES:
            if store[prefix] != reference[prefix]:
                differ = sorted(map(repr, set(store[prefix].items() ^ reference[prefix].items())
                                    if _hashable(store[prefix], reference[prefix]) else store[prefix].keys()))
                problems.append(f"diverged: {prefix} of {name} and {first} differ: {differ[:4]}")
    for name, store in outcome.stores.items():
        for prefix in (records.SESSION, records.SUBSCRIPTION):
            for key in store[prefix]:
                if any(part in outcome.left_clean for part in _parts(key)):
                    problems.append(f"resurrected: {prefix} {key!r} of a clean session that ended, on {name}")
    for write in outcome.logged:
        if write.removed and not write.known:
            continue  # what a removed node wrote before it knew may go with it (when it was out of reach)
        missing = [name for name, clock in outcome.clocks.items() if write.dot not in clock]
        if missing:
            problems.append(f"vanished: {write} never reached {', '.join(sorted(missing))}")
    return problems


def _log_lines(slot: Slot) -> list[str]:
    """The lines of `slot`'s replication log on disk (every node's log is the default file of its data dir)."""
    path = slot.data_dir / "replication.log"
    return path.read_text().splitlines() if path.exists() else []


def _writes(node: str, lines: list[str], start: int) -> list[Logged]:
    """The md_write lines of `node`'s log from line `start` on (docs/replication-log.md), each marked `removed`
    when the cluster removed its incarnation and the node learned it (a `cluster_view` listing it alone after
    one that listed other members), and `known` when it was written after that."""
    shared: set[str] = set()  # incarnations whose views listed other members
    left: set[str] = set()  # incarnations that learned they were removed
    found: list[tuple[dict[str, Any], bool]] = []
    for number, line in enumerate(lines):
        record = json.loads(line)
        if record["event"] == "cluster_view":
            incarnation = record["hlc"][2]  # the stamp of a view is the node's own
            if record["members"] != [record["node"]]:
                shared.add(incarnation)
            elif incarnation in shared:
                left.add(incarnation)
        elif record["event"] == "md_write" and number >= start:
            found.append((record, record["dot"][0] in left))
    out: list[Logged] = []
    for record, known in found:
        replica, counter = record["dot"]
        key = record["key"]
        out.append(Logged(node, (replica, counter), record["prefix"], tuple(key) if isinstance(key, list) else key,
                          record["op"], known=known, removed=replica in left))
    return out


def _parts(key: Any) -> tuple[Any, ...]:
    return tuple(key) if isinstance(key, (tuple, list)) else (key,)


def _hashable(*stores: dict[Any, Any]) -> bool:
    try:
        for store in stores:
            set(store.items())
        return True
    except TypeError:
        return False


def simulate(history: History, root: Path | None = None) -> Outcome:
    """Play `history` on three fresh nodes under simulated time; the outcome, checked by `check`."""
    clock = VirtualClock()
    loop = VirtualLoop(clock)
    errors: list[str] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(str(context.get("message"))
                                                                    + ": " + repr(context.get("exception"))))
    started = time.process_time()
    with (tempfile.TemporaryDirectory(prefix="vmqpy-sim-") as scratch, clock_patches(clock, history.seed),
          process_patches()):
        cluster = SimCluster(root or Path(scratch), history.seed, NODES)

        async def main() -> Outcome:
            player = Player(cluster, history, clock)
            try:
                await player.setup()
                await player.play()
                await player.finish()
            finally:
                await player.stop()
            return player.outcome

        try:
            outcome = loop.run_until_complete(main())
        finally:
            close_loop(loop)
    outcome.errors = errors
    outcome.cpu = time.process_time() - started
    return outcome
