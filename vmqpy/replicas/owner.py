"""The owner side: every journal write of a persistent session also goes to the session's replica nodes, and
the barrier that gates acknowledgements waits for them (docs/replication.md, "Queue replicas").

`QueueReplicator` is given to the node's SessionStore (vmqpy.broker.persistence): for each write it numbers a
replica operation (ops.py), sends it to each replica node (placement.py) over the replica transport (a second
`ForwardDriver`: numbered, batched per node per turn of the event loop, acknowledged by the replica after its
own storage barrier, sent again after a broken link, failed when the node leaves) and records it in the
`WriteLedger`. `barrier()` is the composite barrier: a future resolved once the local storage barrier is and
every write issued before it is settled (ledger.py). A write the transport cannot even buffer (the outgoing
buffer is full) waits in a backlog, in order, and is offered again shortly: the acknowledgements wait.
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

__all__ = ["QueueReplicator", "Transport"]

RETRY_DELAY = 0.05  # seconds before a backlog is offered to the transport again
_TARGETS_CACHE = 100_000  # client ids whose replica nodes are remembered (for the current members)


class Transport(Protocol):
    """The replica transport (vmqpy.cluster.forward_driver.ForwardDriver)."""

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool: ...


@dataclass(slots=True)
class _Waiter:
    mark: int  # the last write issued before the barrier was asked for
    future: Future[None]
    local: bool = False  # the local storage barrier resolved


class QueueReplicator:
    """Sends a persistent session's journal writes to its replica nodes; the composite barrier."""

    def __init__(self, node: str, members: Callable[[], Iterable[str]], reachable: Callable[[str], bool],
                 transport: Transport, local_barrier: Callable[[], Future[None]], *, replicas: int,
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

    def drop(self, client_id: str) -> None:
        self._emit(Op("drop", client_id))

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

    def _emit(self, op: Op) -> None:
        targets = self.targets(op.client_id)
        if not targets:
            return
        write = self.ledger.issue(targets, self.write_quorum)
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
        self.refresh()

    def _failed(self, write: int, node: str, _why: str) -> None:
        self.counters["operations_failed"] += 1
        self.ledger.failed(write, node)
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
