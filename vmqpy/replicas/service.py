"""The queue replicas of one node: the replica side applies what arrives on the replica transport, the owner side
(`replicator`) sends, `failover` fetches, `rebalancer` moves the copies when the membership changes and fills every
replica node once after a start. node.py builds it when `queue.replicas` > 1 and the node has cluster links, then
builds the owner side's parts (the transport is a second forwarding driver: REPLICA frames, `rep_ack`) and hands
them to `start`; node.py also wires them to the cluster, the broker and registration (vmqpy.node).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, cast

import structlog

from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.replicas.audit import UnderReplication
from vmqpy.replicas.copies import KeyValue, ReplicaCopies
from vmqpy.replicas.failover import Failover
from vmqpy.replicas.ops import decode_op
from vmqpy.replicas.owner import QueueReplicator
from vmqpy.replicas.rebalancer import Rebalancer

if TYPE_CHECKING:
    from vmqpy.cluster.policy import Policy
    from vmqpy.config import Config
    from vmqpy.storage import Storage as NodeStorage

__all__ = ["DurableStorage", "QueueReplication"]

log = structlog.get_logger("vmqpy.replicas")

PRUNE_EVERY = 10_000  # operations applied between two prunings of the tombstones
AUDIT_EVERY = 1.0  # seconds between two samples of the under-replicated counts (audit.py)


class ReplicaStorage(KeyValue, Protocol):
    def barrier(self) -> Future[None]: ...


class DurableStorage:
    """The node's storage as the acknowledgements see it: `barrier()` is the composite barrier (local storage
    and the queue replicas); everything else is the storage's own."""

    def __init__(self, storage: ReplicaStorage, barrier: Callable[[], Future[None]]) -> None:
        self._storage = storage
        self.barrier = barrier

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


class QueueReplication:
    """Both sides of the queue replicas of this node."""

    def __init__(self, storage: ReplicaStorage, *, replicas: int, write_quorum: int, strict: Callable[[], bool],
                 failover_timeout: float = 0.0, rebalance_rate: float = 1000.0) -> None:
        self.storage = storage
        self.rebalance_rate = rebalance_rate
        self.rebalancer: Rebalancer | None = None
        self.failover_timeout = failover_timeout
        self.settings = (replicas, write_quorum)
        self.strict = strict
        self.copies = ReplicaCopies(storage)
        self.copies.load()
        self.replicator: QueueReplicator | None = None
        self.failover: Failover | None = None
        self._driver: ForwardDriver | None = None
        self._epochs: dict[str, int] = {}
        self._applied = 0
        self._audit: asyncio.Task[None] | None = None
        self._audit_state = UnderReplication()
        self._audit_write: Callable[[dict[str, Any]], None] | None = None
        self.counters = {"operations_applied": 0, "operations_superseded": 0, "operations_malformed": 0}

    @classmethod
    def configured(cls, config: Config, storage: ReplicaStorage, policy: Policy) -> QueueReplication | None:
        """The queue replicas `config` asks for (None: `queue.replicas = 1`). Unreachable replicas hold the
        acknowledgements in the stop-serving mode only (readiness `all`, publishes refused during a netsplit)."""
        replicas = config.queue_replicas
        if replicas <= 1:
            return None

        def strict() -> bool:
            settings = policy.settings
            return settings.readiness == "all" and not settings.allow_publish

        quorum = min(config.queue_write_quorum or replicas, replicas)
        return cls(storage, replicas=replicas, write_quorum=quorum, strict=strict,
                   failover_timeout=config.queue_failover_timeout, rebalance_rate=config.queue_rebalance_rate)

    def start(self, driver: ForwardDriver, replicator: QueueReplicator, failover: Failover,
              rebalancer: Rebalancer) -> None:
        """Serve with the owner side's parts node.py built: the replica transport (`driver`, which delivers
        here: `deliver`), the `replicator` the broker's persistent sessions journal to, the `failover` and the
        `rebalancer` (started now: every replica node gets each session's whole state, rebalance.py)."""
        self._driver = driver
        self.replicator = replicator
        self.failover = failover
        self.rebalancer = rebalancer
        rebalancer.start()

    def show_columns(self, member: str) -> dict[str, Any]:
        """`cluster show`'s columns of `member`: this node's sessions (and messages) not yet confirmed on all
        their replica nodes ("-": another node's, not known here)."""
        if self.rebalancer is None or self.replicator is None or member != self.replicator.node:
            return {"Under-replicated sessions": "-", "Under-replicated messages": "-"}
        sessions, messages = self.rebalancer.under_replicated()
        return {"Under-replicated sessions": sessions, "Under-replicated messages": messages}

    def audit(self, write: Callable[[dict[str, Any]], None]) -> None:
        """Write a line (`write(fields)`) where a window of under-replication starts and where it ends
        (audit.py): the replication log's `queue_replicas` lines. Sampled once a second, and at once where the
        ledger's or the rebalancer's count leaves zero or comes back to it (a window of a second or less went
        unlogged between two samples)."""
        self._audit_write = write
        if self.replicator is not None:
            self.replicator.ledger.on_edge = self._sample_at_edge
        if self.rebalancer is not None:
            self.rebalancer.on_edge = self._sample_at_edge
        self._audit = asyncio.get_running_loop().create_task(self._sample_every())

    async def _sample_every(self) -> None:
        while self._audit_write is not None:
            self._sample()
            await asyncio.sleep(AUDIT_EVERY)

    def _sample_at_edge(self) -> None:
        """Called from within the ledger and the rebalancer: the audit's trouble must not stop them."""
        try:
            self._sample()
        except Exception:
            log.exception("queue replica audit sample failed")

    def _sample(self) -> None:
        write = self._audit_write
        if self.rebalancer is None or self.replicator is None or write is None:
            return
        sessions, messages = self.rebalancer.under_replicated()
        ledger = self.replicator.ledger
        fields = self._audit_state.sample(sessions, messages, ledger.under_replicated, ledger.take_peak())
        if fields is not None:
            write(fields)

    def stop(self) -> None:
        self._audit_write = None
        if self.replicator is not None:
            self.replicator.ledger.on_edge = None
        if self.rebalancer is not None:
            self.rebalancer.on_edge = None
        if self._audit is not None:
            self._audit.cancel()
            self._audit = None
        if self.rebalancer is not None:
            self.rebalancer.stop()

    def durable(self, storage: NodeStorage) -> NodeStorage:
        """`storage` as the acknowledgements see it (ack_order.py, registration.py use only its `barrier()`)."""
        return cast("NodeStorage", DurableStorage(storage, self.barrier))

    def barrier(self) -> Future[None]:
        """The composite barrier (owner.py): local storage and the replicas."""
        if self.replicator is None:
            return self.storage.barrier()
        return self.replicator.barrier()

    def deliver(self, record: Any, _now: float, sender: str, seq: int) -> bool:
        """A replica operation from owner `sender`, numbered `seq`: applied (acknowledged after this node's own
        storage barrier: True)."""
        driver = self._driver
        if driver is not None:
            epoch, settled = driver.receiver.acknowledgeable(sender)
            if self._epochs.get(sender) != epoch:  # a new run of the owner: its numbers start again
                self._epochs[sender] = epoch
                self.copies.new_run(sender)
            self._applied += 1
            if self._applied % PRUNE_EVERY == 0:
                self.copies.prune(sender, settled)
        try:
            op = decode_op(record)
        except ValueError as exc:
            self.counters["operations_malformed"] += 1
            log.warning("malformed replica operation", peer=sender, error=str(exc))
            return False
        if self.copies.apply(sender, op, seq):
            self.counters["operations_applied"] += 1
        else:
            self.counters["operations_superseded"] += 1
        return True

    def on_reachability(self, peer: str, reachable: bool) -> None:
        if self.replicator is not None:
            self.replicator.refresh()
        if self.failover is not None:
            self.failover.on_reachability(peer, reachable)
        if self.rebalancer is not None:
            self.rebalancer.on_reachability(peer, reachable)

    async def held_for(self, owner: str) -> int:
        """Messages of `owner`'s sessions the reachable replicas hold (failover.py)."""
        return 0 if self.failover is None else await self.failover.held_for(owner)

    async def recovered(self, client_id: str) -> None:
        """Until a recovery of `client_id` adopted its copies (failover.py)."""
        if self.failover is not None:
            await self.failover.wait(client_id)

    def on_recreated(self, client_id: str, released: str | None = None) -> None:
        if self.failover is not None:
            self.failover.recover(client_id, released)

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        if self.replicator is not None:
            out.update(self.replicator.stats())
        if self.failover is not None:
            out.update(self.failover.counters)
        if self.rebalancer is not None:
            out.update(self.rebalancer.stats())
        if self._driver is not None:
            out.update({f"transport_{k}": v for k, v in self._driver.counters.items()})
        out["copies_sessions"] = self.copies.sessions()
        out["copies_messages"] = self.copies.messages()
        out["copies_lineage"] = self.copies.lineage_batches()
        return out
