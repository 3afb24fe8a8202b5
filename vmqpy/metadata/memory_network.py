"""An in-memory network of replicas for tests and simulations: deterministic given its seed.

:class:`MemoryNetwork` owns a simulated clock (``now``, seconds), N :class:`~vmqpy.metadata.replica.Replica`
objects, and an event queue of in-flight messages.  Every ``SendTo`` output is encoded with
:func:`~vmqpy.metadata.messages.encode` (so the codec is exercised and bytes are counted), delayed by
a random latency (so messages are reordered), dropped with probability ``drop_rate`` or when the link
is cut, and decoded at delivery.  ``Persist`` outputs go to a per-node in-memory table store (so a
replica can be crashed and restored from it), ``Changed`` and ``Logged`` outputs are recorded per node.

Topology vocabulary: :meth:`partition` (groups that cannot talk to each other), :meth:`partition_off`
(cut some nodes off from the rest), :meth:`bridge` (two sides that cannot talk, one node that sees
both), :meth:`heal_all`.  By default the network acts as a perfect failure detector: after every
topology change each replica is told (``set_reachable``) exactly which peers it can reach.

Driving: :meth:`step` runs the next event (a delivery, or the earliest replica timer) and advances
``now`` to it; :meth:`run_until_quiet` runs until no message is in flight and no replica has urgent
work; :meth:`run_for` runs for a simulated duration; :meth:`converged` compares the replicas' values,
contexts and node clocks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from vmqpy.metadata import messages
from vmqpy.metadata.messages import Key, StoreMessage
from vmqpy.metadata.replica import Changed, Logged, Output, Persist, Replica, SendTo

__all__ = ["MemoryNetwork"]


class MemoryNetwork:
    """Replicas wired by a lossy, reordering, partitionable in-memory network."""

    def __init__(
        self,
        seed: int,
        *,
        latency: tuple[float, float] = (0.001, 0.010),
        drop_rate: float = 0.0,
        auto_reachability: bool = True,
        codec: bool = True,
        dup_rate: float = 0.0,
        late_rate: float = 0.0,
        late_delay: tuple[float, float] = (1.0, 10.0),
        durability: bool = False,
    ) -> None:
        import random  # the network's own seeded generator (the package never uses global randomness)

        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0.0
        self.latency = latency
        self.drop_rate = drop_rate
        self.auto_reachability = auto_reachability
        self.codec = codec
        self.dup_rate = dup_rate  # a sent message is delivered twice
        self.late_rate = late_rate  # a sent message is delayed by `late_delay` (long after later ones)
        self.late_delay = late_delay
        # With `durability`, Persist outputs stay volatile until `flush(node)`, a SyncRequest/SyncReply leaving the
        # node (the driver makes them durable first) or a local write (acknowledged once stored); a crash loses
        # them. Without it they are durable at once.
        self.durability = durability
        self.volatile: dict[str, list[Persist]] = {}
        self.views: dict[str, list[str]] = {}  # the membership each replica was last told (set_members)
        self.replicas: dict[str, Replica] = {}
        self.kwargs: dict[str, dict[str, Any]] = {}
        self.storage: dict[str, dict[str, dict[bytes, bytes]]] = {}
        self.changes: dict[str, list[Changed]] = {}
        self.logs: dict[str, list[Logged]] = {}
        self.down: set[str] = set()
        self._cut: set[frozenset[str]] = set()
        self._queue: list[tuple[float, int, str, str, Any]] = []
        self._deadlines: dict[str, float | None] = {}  # each replica's next_deadline() after its last call
        self._seq = 0
        self.steps = 0
        self.sent = 0
        self.delivered = 0
        self.dropped = 0
        self.bytes_sent = 0

    # -- replicas -----------------------------------------------------------------------------------
    def add_replica(self, node_id: str, **kwargs: Any) -> Replica:
        """Create a replica (its rng is seeded from the network's) with no peers yet."""
        kwargs.setdefault("rng", self._child_rng())
        replica = Replica(node_id, **kwargs)
        self._deadlines.pop(node_id, None)
        self.kwargs[node_id] = {k: v for k, v in kwargs.items() if k != "rng"}
        self.replicas[node_id] = replica
        self.storage.setdefault(node_id, {})
        self.volatile.setdefault(node_id, [])
        self.changes.setdefault(node_id, [])
        self.logs.setdefault(node_id, [])
        return replica

    def _child_rng(self) -> Any:
        """A generator for a replica, seeded from the network's."""
        return type(self.rng)(self.rng.random())

    def set_members(self, nodes: Iterable[str], *, on: Iterable[str] | None = None) -> None:
        """Tell the replicas in ``on`` (default: ``nodes``) that the cluster is ``nodes``."""
        members = list(nodes)
        for node in members if on is None else list(on):
            if node in self.replicas and node not in self.down:
                self.views[node] = members
                self.dispatch(node, self.replicas[node].set_peers(members))
        self.update_reachability()

    def crash(self, node: str) -> None:
        """Stop ``node``: its in-flight messages are lost, its durable storage stays (what was volatile is lost)."""
        self.volatile[node] = []
        self.down.add(node)
        self.update_reachability()

    def restart(self, node: str, **kwargs: Any) -> Replica:
        """Restore ``node`` from what its Persist outputs wrote, and bring it back."""
        rows = {table: sorted(entries.items()) for table, entries in self.storage[node].items()}
        merged = {**self.kwargs[node], **kwargs}
        merged.setdefault("rng", self._child_rng())
        replica = Replica.restore(node, rows, **merged)
        self.replicas[node] = replica
        self._deadlines.pop(node, None)
        self.down.discard(node)
        if node in self.views:  # the cluster layer gives a restarted node the membership it knows (node.py)
            self.dispatch(node, replica.set_peers(self.views[node]))
        self.update_reachability()
        return replica

    def alive(self) -> list[str]:
        """Replicas that are up, in insertion order."""
        return [n for n in self.replicas if n not in self.down]

    # -- topology -----------------------------------------------------------------------------------
    def can_talk(self, a: str, b: str) -> bool:
        """The link a <-> b is up (both nodes up, no partition between them)."""
        return a not in self.down and b not in self.down and frozenset((a, b)) not in self._cut

    def partition(self, *groups: Iterable[str]) -> None:
        """Only nodes in the same group can talk; a node in no group is cut off from everyone."""
        group_of: dict[str, int] = {}
        for i, group in enumerate(groups):
            for node in group:
                group_of[node] = i
        nodes = list(self.replicas)
        self._cut = set()
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                ga, gb = group_of.get(a, -1 - i), group_of.get(b, -2 - len(nodes) - i)
                if ga != gb:
                    self._cut.add(frozenset((a, b)))
        self.update_reachability()

    def partition_off(self, nodes: Iterable[str]) -> None:
        """Cut ``nodes`` (together) off from all the others."""
        cut = set(nodes)
        self.partition([n for n in self.replicas if n in cut], [n for n in self.replicas if n not in cut])

    def bridge(self, left: Iterable[str], right: Iterable[str], bridge_node: str) -> None:
        """``left`` and ``right`` cannot talk to each other; ``bridge_node`` talks to both."""
        lset, rset = set(left) - {bridge_node}, set(right) - {bridge_node}
        self._cut = {frozenset((a, b)) for a in lset for b in rset}
        self.update_reachability()

    def heal_all(self) -> None:
        """Every link is up again."""
        self._cut = set()
        self.update_reachability()

    def update_reachability(self) -> None:
        """Tell every replica which peers it can reach (a perfect failure detector)."""
        if not self.auto_reachability:
            return
        for node in self.alive():
            replica = self.replicas[node]
            replica.set_reachable(p for p in self.replicas if p != node and self.can_talk(node, p))
            self._deadlines[node] = replica.next_deadline()

    def touch(self, node: str) -> None:
        """Re-read ``node``'s next deadline (after calling its replica directly, not through the network)."""
        self._deadlines.pop(node, None)

    # -- outputs ------------------------------------------------------------------------------------
    def dispatch(self, node: str, outputs: list[Output]) -> None:
        """Apply a replica's outputs: persist, record, send."""
        if node in self.replicas:
            self._deadlines[node] = self.replicas[node].next_deadline()
        wrote = False
        for output in outputs:
            if isinstance(output, Persist):
                if self.durability:
                    self.volatile[node].append(output)
                else:
                    self._persist(node, output)
            elif isinstance(output, SendTo):
                if self.durability and isinstance(output.message, messages.SyncRequest | messages.SyncReply):
                    self.flush(node)
                self._send(node, output.peer, output.message)
            elif isinstance(output, Changed):
                self.changes[node].append(output)
            elif isinstance(output, Logged):
                self.logs[node].append(output)
                wrote = wrote or output.event == "md_write"
        if wrote:
            self.flush(node)

    def _persist(self, node: str, output: Persist) -> None:
        table = self.storage[node].setdefault(output.table, {})
        if output.value is None:
            table.pop(output.key, None)
        else:
            table[output.key] = output.value

    def flush(self, node: str) -> None:
        """Make what ``node`` persisted so far durable (with ``durability``)."""
        pending, self.volatile[node] = self.volatile.get(node, []), []
        for output in pending:
            self._persist(node, output)

    def _send(self, src: str, dst: str, message: StoreMessage) -> None:
        self.sent += 1
        payload: Any = message
        if self.codec:
            payload = messages.encode(message)
            self.bytes_sent += len(payload)
        if not self.can_talk(src, dst) or dst not in self.replicas or self.rng.random() < self.drop_rate:
            self.dropped += 1
            return
        copies = 2 if self.dup_rate and self.rng.random() < self.dup_rate else 1
        for _ in range(copies):
            late = self.late_rate and self.rng.random() < self.late_rate
            delay = self.rng.uniform(*(self.late_delay if late else self.latency))
            self._seq += 1
            heapq.heappush(self._queue, (self.now + delay, self._seq, src, dst, payload))

    # -- local operations ---------------------------------------------------------------------------
    def put(self, node: str, prefix: str, key: Key, value: Any) -> list[Output]:
        """``put`` on ``node`` at the network's ``now``; outputs are dispatched (and returned)."""
        out = self.replicas[node].put(prefix, key, value, self.now)
        self.dispatch(node, out)
        return out

    def delete(self, node: str, prefix: str, key: Key) -> list[Output]:
        """``delete`` on ``node`` at the network's ``now``."""
        out = self.replicas[node].delete(prefix, key, self.now)
        self.dispatch(node, out)
        return out

    def exchange(self, node: str, peer: str | None = None) -> None:
        """``exchange_now`` on ``node``."""
        self.dispatch(node, self.replicas[node].exchange_now(peer, self.now))

    # -- driving ------------------------------------------------------------------------------------
    def _next_timer(self) -> tuple[float, str] | None:
        best: tuple[float, str] | None = None
        for node in self.alive():
            if node not in self._deadlines:
                self._deadlines[node] = self.replicas[node].next_deadline()
            deadline = self._deadlines[node]
            if deadline is not None and (best is None or deadline < best[0]):
                best = (deadline, node)
        return best

    def step(self) -> bool:
        """Run the next event (a delivery, else the earliest timer); False when there is none."""
        timer = self._next_timer()
        if self._queue and (timer is None or self._queue[0][0] <= timer[0]):
            when, _, src, dst, payload = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            self.steps += 1
            if not self.can_talk(src, dst):
                self.dropped += 1
                return True
            message = messages.decode(payload) if self.codec else payload
            self.delivered += 1
            self.dispatch(dst, self.replicas[dst].receive(src, message, self.now))
            return True
        if timer is None:
            return False
        self.now = max(self.now, timer[0])
        self.steps += 1
        self.dispatch(timer[1], self.replicas[timer[1]].on_timer(self.now))
        return True

    def in_flight(self) -> int:
        """Messages sent and not yet delivered (or dropped)."""
        return len(self._queue)

    def quiet(self) -> bool:
        """No message in flight, no replica with an exchange, a queued exchange or a pending write-back."""
        return not self._queue and not any(self.replicas[n].busy() for n in self.alive())

    def run_until_quiet(self, max_steps: int = 100_000) -> bool:
        """Step until :meth:`quiet` (True) or ``max_steps`` steps ran (False)."""
        for _ in range(max_steps):
            if self.quiet():
                return True
            if not self.step():
                return self.quiet()
        return self.quiet()

    def run_for(self, duration: float, max_steps: int = 1_000_000) -> None:
        """Step through ``duration`` simulated seconds (or ``max_steps`` steps)."""
        end = self.now + duration
        for _ in range(max_steps):
            timer = self._next_timer()
            nxt = min(
                [t for t in (self._queue[0][0] if self._queue else None, timer[0] if timer else None) if t is not None],
                default=None,
            )
            if nxt is None or nxt > end:
                break
            self.step()
        self.now = max(self.now, end)

    def run_until(self, predicate: Callable[[], bool], max_time: float, max_steps: int = 1_000_000) -> bool:
        """Step until ``predicate()`` holds (True) or ``max_time`` simulated seconds passed (False)."""
        end = self.now + max_time
        for _ in range(max_steps):
            if predicate():
                return True
            if self.now > end or not self.step():
                break
        return predicate()

    # -- convergence --------------------------------------------------------------------------------
    @staticmethod
    def state_of(replica: Replica) -> dict[str, Any]:
        """What must agree across converged replicas: the node clock, and per live key its versions and
        full (filled) context."""
        dump = replica.dump()
        live: dict[tuple[str, Key], Any] = {}
        for prefix, objs in dump["data"].items():
            for key, obj in objs.items():
                if obj["values"]:
                    live[(prefix, key)] = (obj["values"], obj["filled"])
        clock = {n: tuple(e) for n, e in dump["clock"].items() if tuple(e) != (0, 0)}
        return {"clock": clock, "live": live}

    def converged(self, nodes: Iterable[str] | None = None) -> bool:
        """The replicas (default: all up) hold the same values, contexts and node clocks."""
        names = list(self.alive() if nodes is None else nodes)
        if len(names) < 2:
            return True
        clock = self.replicas[names[0]].node_clock
        if any(self.replicas[n].node_clock != clock for n in names[1:]):
            return False  # cheap first: converged replicas have equal node clocks
        first = self.state_of(self.replicas[names[0]])
        return all(self.state_of(self.replicas[n]) == first for n in names[1:])

    def values(self, node: str) -> Mapping[tuple[str, Key], list[Any]]:
        """``(prefix, key) -> siblings`` of every live key on ``node``."""
        dump = self.replicas[node].dump()
        return {
            (prefix, key): [v for _, _, v in obj["values"]]
            for prefix, objs in dump["data"].items()
            for key, obj in objs.items()
            if obj["values"]
        }
