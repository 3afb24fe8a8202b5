"""The owner side: every journal write of a persistent session also goes to the session's replica nodes, and
the barrier that gates acknowledgements waits for them (docs/replication.md, "Queue replicas").

`QueueReplicator` is given to the node's SessionStore (vmqpy.broker.core.persistence): for each write it numbers a
replica operation (ops.py), sends it to each replica node (placement.py) over the replica transport (a second
`ForwardDriver`: numbered, batched per node per turn of the event loop, acknowledged by the replica after its
own storage barrier, sent again after a broken link, failed when the node leaves) and records it in the
`WriteLedger`. `barrier()` is the composite barrier: a future resolved once the local storage barrier is and
every write issued before it is settled (ledger.py). A write the transport cannot even buffer (the outgoing
buffer is full) waits in a backlog, in order, and is offered again shortly: the acknowledgements wait.

Membership changes (rebalance.py): a session's writes go to its replica nodes among the current members *and*
to the nodes that still hold its copy (`holders`: placed by the rebalancer, or the replica nodes over the members
of the last completed rebalance), so no copy falls behind while the rebalancer fills the new replica nodes
(`sync`) and only then drops the old ones (`drop_on`).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from vmqpy.replicas.ledger import WriteLedger
from vmqpy.replicas.ops import Op, encode_op
from vmqpy.replicas.placement import replica_nodes

__all__ = ["QueueReplicator", "ReplicaTransport"]

RETRY_DELAY = 0.05  # seconds before a backlog is offered to the transport again
_TARGETS_CACHE = 100_000  # client ids whose replica nodes are remembered (for the current members)


class ReplicaTransport(Protocol):
    """The replica transport (vmqpy.cluster.forward_driver.ForwardDriver)."""

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool: ...


@dataclass(slots=True)
class _Waiter:
    mark: int  # the last write issued before the barrier was asked for
    future: Future[None]
    local: bool = False  # the local storage barrier resolved


@dataclass(slots=True)
class _SyncProgress:
    """The writes of one sync to one node: `done(node, ok)` once all were acknowledged or one failed."""

    node: str
    left: int
    done: Callable[[str, bool], None]
    over: bool = False

    def acked(self) -> None:
        self.left -= 1
        if self.left == 0 and not self.over:
            self.over = True
            self.done(self.node, True)

    def failed(self) -> None:
        if not self.over:
            self.over = True
            self.done(self.node, False)


class QueueReplicator:
    """Sends a persistent session's journal writes to its replica nodes; the composite barrier."""

    def __init__(self, node: str, members: Callable[[], Iterable[str]], reachable: Callable[[str], bool],
                 transport: ReplicaTransport, local_barrier: Callable[[], Future[None]], *, replicas: int,
                 write_quorum: int, strict: Callable[[], bool]) -> None:
        """`strict()`: an unreachable replica holds the acknowledgements (the consistency modes)."""
        self.node = node
        self.replicas = replicas
        self.write_quorum = write_quorum
        self._members = members
        self._reachable = reachable
        self._transport = transport
        self._local_barrier = local_barrier
        self._strict = strict
        self.ledger = WriteLedger()
        self._waiters: deque[_Waiter] = deque()
        self._backlog: dict[str, deque[tuple[int, Any, int]]] = {}
        self._retry_armed = False
        self._seen_members: tuple[str, ...] = ()
        self._targets: dict[str, list[str]] = {}
        self._placed: dict[str, tuple[str, ...]] = {}  # client id -> the nodes holding its copy (rebalance.py)
        self._settled: tuple[str, ...] | None = None  # members every session was last placed for (None: not yet)
        self._settled_targets: dict[str, list[str]] = {}  # client id -> its replica nodes over `_settled`
        self._progress: dict[int, _SyncProgress] = {}  # write -> the sync it belongs to
        self.counters = {"operations_sent": 0, "operations_acked": 0, "operations_failed": 0}

    # ------------------------------------------------------------------------------------------ the journal

    def message(self, client_id: str, seq: int, record: bytes) -> None:
        self._emit(Op("put", client_id, seq=seq, value=record))

    def message_gone(self, client_id: str, seq: int) -> None:
        self._emit(Op("del", client_id, seq=seq))

    def incoming(self, client_id: str, packet_id: int, present: bool) -> None:
        self._emit(Op("in", client_id, packet_id=packet_id, present=present))

    def session(self, client_id: str, record: bytes) -> None:
        self._emit(Op("session", client_id, value=record))

    def lineage(self, client_id: str, names: bytes) -> None:
        self._emit(Op("lin", client_id, value=names))

    def drop(self, client_id: str) -> None:
        self._emit(Op("drop", client_id))
        self._placed.pop(client_id, None)

    def targets(self, client_id: str) -> list[str]:
        """The replica nodes of `client_id` (this node owning it) among the current members."""
        members = tuple(self._members())
        if members != self._seen_members or len(self._targets) > _TARGETS_CACHE:
            self._seen_members = members
            self._targets = {}
        targets = self._targets.get(client_id)
        if targets is None:
            targets = self._targets[client_id] = replica_nodes(client_id, self.node, members, self.replicas)
        return targets

    def members(self) -> tuple[str, ...]:
        """The current members (this node's included), as `settle` wants them."""
        return tuple(self._members())

    def holders(self, client_id: str) -> list[str]:
        """The nodes believed to hold a copy of `client_id` (current members only; before the first completed
        rebalance: its replica nodes now)."""
        placed = self._placed.get(client_id)
        members = self._seen_members if self._seen_members else tuple(self._members())
        if placed is not None:
            return [n for n in placed if n in members]
        if self._settled is None or self._settled == members:
            return self.targets(client_id)
        old = self._settled_targets.get(client_id)
        if old is None:
            if len(self._settled_targets) > _TARGETS_CACHE:
                self._settled_targets = {}
            old = self._settled_targets[client_id] = replica_nodes(client_id, self.node, self._settled,
                                                                   self.replicas)
        return [n for n in old if n in members]

    def write_targets(self, client_id: str) -> list[str]:
        """Where a write of `client_id` goes: its replica nodes and the nodes still holding its copy."""
        targets = self.targets(client_id)
        if self._settled == self._seen_members and client_id not in self._placed:
            return targets
        return targets + [n for n in self.holders(client_id) if n not in targets]

    def place(self, client_id: str, nodes: list[str]) -> None:
        """`nodes` hold a complete copy of `client_id` (the rebalancer filled them or dropped the others)."""
        self._placed[client_id] = tuple(nodes)

    def settle(self, members: tuple[str, ...]) -> None:
        """Every session was placed for `members` (a rebalance completed): forget the placements that say so."""
        self._settled = members
        self._settled_targets = {}
        for client_id, placed in list(self._placed.items()):
            if sorted(placed) == sorted(replica_nodes(client_id, self.node, members, self.replicas)):
                del self._placed[client_id]

    def sync(self, client_id: str, record: bytes, incoming: list[int], messages: list[tuple[int, bytes]],
             nodes: list[str], done: Callable[[str, bool], None], lineage: bytes | None = None) -> None:
        """Replace the copy of `client_id` on each of `nodes` by this state (`sync`, then a `put` per message
        and a `lin` with the session's lineage, numbered one after the other before any later write);
        `done(node, ok)` once `node` acknowledged all of them (ok) or left the cluster (not ok)."""
        ops = [Op("sync", client_id, value=record, incoming=tuple(sorted(incoming)))]
        ops += [Op("put", client_id, seq=seq, value=value) for seq, value in messages]
        if lineage is not None:
            ops.append(Op("lin", client_id, value=lineage))
        for node in nodes:
            progress = _SyncProgress(node, len(ops), done)
            for op in ops:
                self._emit(op, [node], progress)

    def drop_on(self, client_id: str, nodes: list[str]) -> None:
        """Forget the copy of `client_id` on `nodes` (no longer its replica nodes)."""
        if nodes:
            self._emit(Op("drop", client_id), nodes)

    def _emit(self, op: Op, nodes: list[str] | None = None, progress: _SyncProgress | None = None) -> None:
        targets = self.write_targets(op.client_id) if nodes is None else nodes
        if not targets:
            return
        write = self.ledger.issue(targets, self.write_quorum)
        if progress is not None:
            self._progress[write] = progress
        record = encode_op(op)
        size = len(op.client_id.encode()) + len(op.value) + 48  # msgpack of the record, at most
        for node in targets:
            self._send(node, write, record, size)

    def _send(self, node: str, write: int, record: Any, size: int) -> None:
        backlog = self._backlog.get(node)
        if backlog:  # in order: nothing overtakes what waits
            backlog.append((write, record, size))
            return
        if not self._offer(node, write, record, size):
            self._backlog.setdefault(node, deque()).append((write, record, size))
            self._arm_retry()

    def _offer(self, node: str, write: int, record: Any, size: int) -> bool:
        sent = self._transport.forward(node, record, size, functools.partial(self._acked, write, node),
                                       functools.partial(self._failed, write, node))
        if sent:
            self.counters["operations_sent"] += 1
        return sent

    def _arm_retry(self) -> None:
        if not self._retry_armed:
            self._retry_armed = True
            asyncio.get_running_loop().call_later(RETRY_DELAY, self._retry)

    def _retry(self) -> None:
        self._retry_armed = False
        for node, backlog in list(self._backlog.items()):
            if node not in self._seen_members:  # it left: these writes will never reach it
                for write, _record, _size in backlog:
                    self._failed(write, node, "it left the cluster")
                del self._backlog[node]
                continue
            while backlog and self._offer(node, *backlog[0]):
                backlog.popleft()
            if not backlog:
                del self._backlog[node]
        if self._backlog:
            self._arm_retry()

    def _acked(self, write: int, node: str) -> None:
        self.counters["operations_acked"] += 1
        self.ledger.acked(write, node)
        progress = self._progress.pop(write, None)
        if progress is not None:
            progress.acked()
        self.refresh()

    def _failed(self, write: int, node: str, _why: str) -> None:
        self.counters["operations_failed"] += 1
        self.ledger.failed(write, node)
        progress = self._progress.pop(write, None)
        if progress is not None:
            progress.failed()
        self.refresh()

    # ------------------------------------------------------------------------------------------ the barrier

    def barrier(self) -> Future[None]:
        """Resolved once everything written to the local storage so far is committed and every replica write
        issued so far is settled (ledger.py); failed when the local storage fails."""
        local = self._local_barrier()
        mark = self.ledger.last
        if mark <= self.ledger.passed:
            return local
        waiter = _Waiter(mark, Future())
        self._waiters.append(waiter)
        loop = asyncio.get_running_loop()
        local.add_done_callback(lambda f: loop.call_soon_threadsafe(self._local_done, waiter, f))
        return waiter.future

    def _local_done(self, waiter: _Waiter, local: Future[None]) -> None:
        error = local.exception()
        if error is not None:
            self._waiters.remove(waiter)
            waiter.future.set_exception(error)
            return
        waiter.local = True
        self.refresh()

    def refresh(self) -> None:
        """Pass what is settled now (an acknowledgement, a node reachable or not, a mode changed) and resolve
        the barriers it satisfies."""
        passed = self.ledger.advance(self._reachable, self._strict())
        waiters = self._waiters
        while waiters and waiters[0].local and waiters[0].mark <= passed:
            waiters.popleft().future.set_result(None)

    def stats(self) -> dict[str, int]:
        return {
            **self.counters,
            "operations_pending": self.ledger.pending(),
            "operations_backlog": sum(len(b) for b in self._backlog.values()),
            "under_replicated": self.ledger.under_replicated,
            "barriers_waiting": len(self._waiters),
        }
