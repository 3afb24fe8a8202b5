"""The asyncio driver of one node's metadata replica: storage, the replication log, peers and one timer.

It only moves things: local calls and received frames go into the sans-I/O `Replica`; its outputs come out
as storage writes (`Persist`), frames to peers (`SendTo`), change callbacks (`Changed`) and log lines
(`Logged`). The replica's next deadline arms a single `call_at`.

Confirmed writes (docs/cluster.md, "A SUBACK the cluster honours"): the pushes of the `acknowledged` prefixes are
answered by each member once applied; the answers of one loop turn leave as one `PushAck` per peer. A write made
with a `Confirmation` (`confirmation`, `put(..., confirm=)`, `seal`) is done once every reachable member it was
pushed to answered, or the member became unreachable, or `ack_timeout` passed (counted in `late_confirmations`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

import structlog

from vmqpy.bulk_load import bulk_load
from vmqpy.metadata import messages
from vmqpy.metadata.confirmations import Confirmation, Confirmations
from vmqpy.metadata.errors import MessageDecodeError
from vmqpy.metadata.replica import Acked, Changed, Key, Logged, Output, Persist, Replica, SendTo
from vmqpy.metadata.replication_log import ReplicationLog
from vmqpy.metadata.resolve import Resolver
from vmqpy.storage import Storage

log = structlog.get_logger("vmqpy.metadata")

ChangeHandler = Callable[[Key, Any, Any], None]


class Transport(Protocol):
    """How replicas reach each other: the cluster's node links, or an in-memory network in tests."""

    def send(self, peer: str, data: bytes) -> None:
        """Send one frame to `peer` (buffered or dropped by the transport when the peer is unreachable)."""

    def set_receiver(self, receiver: Callable[[str, bytes], None]) -> None:
        """Call `receiver(peer, frame)` for every frame that arrives."""


class MetadataService:
    """One node's replica of the metadata store, driven on the node's event loop."""

    def __init__(
        self,
        node_id: str,
        storage: Storage,
        *,
        replication_log: ReplicationLog | None = None,
        transport: Transport | None = None,
        resolvers: Mapping[str, Resolver] | None = None,
        sync_interval: float = 1.0,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        seed: int | None = None,
        reply_bytes: int = 8 << 20,
        acknowledged: Iterable[str] = (),
        ack_timeout: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self.storage = storage
        self.replication_log = replication_log
        self.transport = transport
        self._resolvers = resolvers
        self._sync_interval = sync_interval
        self._reply_bytes = reply_bytes  # below the largest cluster frame: an anti-entropy reply must fit in one
        self._wall = wall  # HLC stamps only
        self._monotonic = monotonic  # every timer and deadline: a step of the wall clock moves none of them
        self._rng = random.Random(seed)
        self._handlers: dict[str, list[ChangeHandler]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.replica: Replica | None = None
        self.decode_errors = 0
        self._outbox: deque[tuple[Future[None] | None, list[tuple[str, bytes]]]] = deque()
        self._log_flush_due = False
        self._frozen = False  # the node left its cluster: see freeze()
        self._acknowledged = tuple(acknowledged)  # prefixes whose pushes the members answer (PushAck)
        self.ack_timeout = ack_timeout
        self._confirms = Confirmations()
        self._confirm_timer: asyncio.TimerHandle | None = None
        self._acks: dict[str, list[int]] = {}  # the PushAcks of this turn, per peer

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Rebuild the replica from storage and arm its timer. Call from the event loop."""
        self._loop = asyncio.get_running_loop()
        with bulk_load() as load:
            rows = {table: self.storage.load(table) for table in Replica.TABLES}
            load.records = sum(map(len, rows.values()))
            self.replica = self._build(rows)
            del rows
        if self.transport is not None:
            self.transport.set_receiver(self._on_frame)
        self._arm()

    def _build(self, rows: Mapping[str, list[tuple[bytes, bytes]]]) -> Replica:
        return Replica.restore(
            self.node_id, rows, resolvers=self._resolvers, rng=self._rng, sync_interval=self._sync_interval,
            reply_bytes=self._reply_bytes, acknowledged=self._acknowledged,
        )

    async def reincarnate(self, node_id: str) -> None:
        """Forget every state of this replica and start again, empty, as `node_id` (a node that was removed from
        its cluster and joins again: docs/replication.md, "node ids are incarnations"). The rows are deleted
        durably before the new identity is used; the change handlers see every key go (old value -> None), so
        what they derived (routes, retained messages) goes with it until the cluster's records arrive."""
        old = self._replica
        self._disarm()
        self._outbox.clear()  # messages of the old identity: its links are gone
        self._confirms.keep_peers(())  # nor are the members that were to answer its writes
        self._acks.clear()
        for table in Replica.TABLES:
            self.storage.delete_prefix(table, b"")
        await self.storage.sync()
        self.node_id = node_id
        self.replica = self._build({table: [] for table in Replica.TABLES})
        self._frozen = False
        for prefix in list(self._handlers):
            for key, value in list(old.fold(prefix)):
                self._notify(prefix, key, value, None)
        log.warning("metadata store emptied for a new incarnation", replica=node_id)
        self._arm()

    def stop(self) -> None:
        self._disarm()
        if self._confirm_timer is not None:
            self._confirm_timer.cancel()
            self._confirm_timer = None
        if self.replication_log is not None:
            self.replication_log.flush()

    @property
    def _replica(self) -> Replica:
        if self.replica is None:
            raise RuntimeError("the metadata service is not started")
        return self.replica

    # ------------------------------------------------------------------------------------------ local API

    def on_change(self, prefix: str, handler: ChangeHandler) -> None:
        """Call `handler(key, old, new)` whenever the resolved value of a key of `prefix` changes."""
        self._handlers.setdefault(prefix, []).append(handler)

    def get(self, prefix: str, key: Key) -> Any | None:
        return self._replica.get(prefix, key)

    def fold(self, prefix: str) -> Iterator[tuple[Key, Any]]:
        return self._replica.fold(prefix)

    def freeze(self) -> None:
        """This node left its cluster (cluster/service.py): the store takes no more writes and runs no timer
        (no write-back, no GC) until `reincarnate` empties it. Whatever it wrote now could reach no member and
        would be wiped at the rejoin: the replication log would show writes that then vanish (the chaos
        retained checker took such a write-back for a version that must survive)."""
        self._frozen = True
        self._disarm()

    def put(self, prefix: str, key: Key, value: Any, confirm: Confirmation | None = None) -> None:
        """Write `value`; with `confirm`, it also waits for the reachable members to apply this write."""
        if self._frozen:
            return
        # A local write makes nothing due sooner than what the armed timer waits for (at worst garbage
        # collection waits for that timer), so the deadline is only recomputed when no timer is armed.
        outputs = self._replica.put(prefix, key, value, self._monotonic(), self._wall())
        if confirm is not None:
            self._expect(confirm, outputs)
        self._apply(outputs, arm=self._timer is None)

    def delete(self, prefix: str, key: Key, confirm: Confirmation | None = None) -> None:
        """Delete the key; with `confirm`, as `put`."""
        if self._frozen:
            return
        outputs = self._replica.delete(prefix, key, self._monotonic(), self._wall())
        if confirm is not None:
            self._expect(confirm, outputs)
        self._apply(outputs, arm=self._timer is None)

    # ------------------------------------------------------------------------------------------ confirmed writes

    def confirmation(self) -> Confirmation:
        """A new confirmation, waiting `ack_timeout` from now at the most: pass it to the writes of one operation,
        then `seal` it."""
        confirm = self._confirms.open(self._monotonic() + self.ack_timeout)
        if self._confirm_timer is None and self._loop is not None:
            self._confirm_timer = self._loop.call_later(self.ack_timeout, self._on_confirm_timer)
        return confirm

    def seal(self, confirm: Confirmation) -> Confirmation | None:
        """No more writes for `confirm`. None when nothing is left to wait for (no member was reachable, every
        one answered already, or its time is up); else `confirm`, done when the last member answered."""
        return None if self._confirms.seal(confirm) else confirm

    @property
    def late_confirmations(self) -> int:
        """Confirmations that gave up at `ack_timeout` with members still to answer."""
        return self._confirms.late

    def _expect(self, confirm: Confirmation, outputs: list[Output]) -> None:
        acknowledged = self._acknowledged
        for output in outputs:
            if type(output) is SendTo and type(output.message) is messages.Push \
                    and output.message.prefix in acknowledged:
                self._confirms.expect(confirm, output.peer, output.message.dot[1])

    def _on_confirm_timer(self) -> None:
        self._confirm_timer = None
        for late in self._confirms.expire(self._monotonic()):
            log.debug("writes not confirmed by every member in time", waited=self.ack_timeout,
                      unanswered=sorted(late.unanswered))
        deadline = self._confirms.next_deadline()
        if deadline is not None and self._loop is not None:
            self._confirm_timer = self._loop.call_later(max(0.0, deadline - self._monotonic()),
                                                        self._on_confirm_timer)

    def _keep_confirming(self) -> None:
        """Only reachable members hold a confirmation back."""
        if len(self._confirms):
            self._confirms.keep_peers(self._replica.usable_peers())

    def _queue_ack(self, peer: str, counters: tuple[int, ...]) -> None:
        """Answer `peer`'s pushes once this turn's frames are handled: one PushAck per peer and turn."""
        pending = self._acks.get(peer)
        if pending is None:
            if not self._acks and self._loop is not None:
                self._loop.call_soon(self._send_acks)
            self._acks[peer] = list(counters)
        else:
            pending.extend(counters)

    def _send_acks(self) -> None:
        acks, self._acks = self._acks, {}
        transport = self.transport
        if transport is None:
            return
        for peer, counters in acks.items():
            transport.send(peer, messages.encode(messages.PushAck(tuple(counters))))

    def hlc_now(self) -> Any:
        return self._replica.hlc_now(self._wall())

    def witness(self, stamp: Any) -> None:
        """Make every later stamp of this node greater than `stamp` (a `[wall_ms, logical, node]` learnt outside
        the store, e.g. the owner record a registration replaces); anything else is ignored."""
        self._replica.witness(stamp)

    # ------------------------------------------------------------------------------------------ cluster

    def set_peers(self, peers: Iterable[str]) -> None:
        self._apply(self._replica.set_peers(peers))
        self._keep_confirming()

    def set_reachable(self, peers: Iterable[str]) -> None:
        self._replica.set_reachable(peers)
        self._keep_confirming()
        self._arm()

    def exchange_now(self, peer: str | None = None) -> None:
        if self._frozen:
            return
        self._apply(self._replica.exchange_now(peer, self._monotonic(), self._wall()))

    def covered_by(self, peer: str) -> bool:
        """`peer` (a replica id) is known to hold every dot this node holds (Replica.covered_by)."""
        return self._replica.covered_by(peer)

    def unaccounted_dots(self, gone: str) -> int:
        """Dots of `gone` (a replica id) no remaining member is known to hold (Replica.unaccounted_dots)."""
        return self._replica.unaccounted_dots(gone)

    def known_to(self, peer: str, prefix: str, key: Key) -> bool:
        """`peer` (a replica id) had the current value of the key when it last reported (Replica.known_to)."""
        return self._replica.known_to(peer, prefix, key)

    def holds_all_of(self, peer: str) -> bool:
        """This node holds every dot `peer` (a replica id) said it holds in its last report (Replica.holds_all_of)."""
        return self._replica.holds_all_of(peer)

    def reports_from(self, peer: str) -> int:
        """How many messages of `peer` reported its clock so far (Replica.reports_from)."""
        return self._replica.reports_from(peer)

    def _on_frame(self, peer: str, data: bytes) -> None:
        try:
            message = messages.decode(data)
        except MessageDecodeError as exc:
            self.decode_errors += 1
            log.warning("undecodable metadata frame", peer=peer, error=str(exc))
            return
        self._apply(self._replica.receive(peer, message, self._monotonic(), self._wall()))

    # ------------------------------------------------------------------------------------------ outputs

    def _apply(self, outputs: list[Output], arm: bool = True) -> None:
        persisted = False
        sends: list[tuple[str, bytes]] = []
        for output in outputs:
            if isinstance(output, Persist):
                persisted = True
                if output.value is None:
                    self.storage.delete(output.table, output.key)
                else:
                    self.storage.put(output.table, output.key, output.value)
            elif isinstance(output, Changed):
                self._notify(output.prefix, output.key, output.old, output.new)
            elif isinstance(output, SendTo):
                if type(output.message) is messages.PushAck:
                    self._queue_ack(output.peer, output.message.counters)  # need not wait for the disk
                elif self.transport is not None:
                    sends.append((output.peer, messages.encode(output.message)))
            elif isinstance(output, Acked):
                self._confirms.acked(output.peer, output.counters)
            elif isinstance(output, Logged):
                if self.replication_log is not None:
                    self.replication_log.write(output.event, output.fields.pop("hlc", None), output.fields)
                    self._flush_log_soon()
        if sends:
            # Peers garbage-collect from the clock our messages carry: what they say we hold must be on disk
            # before they hear it. Sends leave in order, each after the writes queued before it committed.
            loop = self._loop
            if persisted and loop is not None:
                future = self.storage.barrier()
                self._outbox.append((future, sends))
                future.add_done_callback(lambda _f: loop.call_soon_threadsafe(self._flush_outbox))
            elif self._outbox:
                self._outbox.append((None, sends))
            else:
                self._send_all(sends)
        if arm:
            self._arm()

    def _flush_outbox(self) -> None:
        outbox = self._outbox
        while outbox:
            future, sends = outbox[0]
            if future is not None and not future.done():
                return
            outbox.popleft()
            if future is not None and future.exception() is not None:
                log.error("storage failed; metadata messages not sent", error=str(future.exception()))
                continue
            self._send_all(sends)

    def _send_all(self, sends: list[tuple[str, bytes]]) -> None:
        transport = self.transport
        if transport is None:
            return
        for peer, data in sends:
            transport.send(peer, data)

    def _notify(self, prefix: str, key: Key, old: Any, new: Any) -> None:
        for handler in self._handlers.get(prefix, ()):
            try:
                handler(key, old, new)
            except Exception:
                log.exception("change handler failed", prefix=prefix, key=key)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        loop = self._loop
        replica = self.replica
        if loop is None or replica is None or self._frozen:
            return
        deadline = replica.next_deadline()
        if deadline is None or (self._timer is not None and self._armed_for <= deadline):
            return  # the armed timer fires first (or nothing is due); it re-arms when it fires
        if self._timer is not None:
            self._timer.cancel()
        self._armed_for = deadline
        self._timer = loop.call_later(max(0.0, deadline - self._monotonic()), self._on_timer)

    def log(self, event: str, fields: dict[str, Any]) -> None:
        """A line of another part of the node (the queue replicas' under-replication windows) in the replication
        log, stamped with this node's HLC and handed to the OS at the end of this loop turn, as the service's own
        lines are. Written without that hand-over, a line waited in memory for the next metadata event (none came
        on a quiet cluster: a window's end went missing from the log)."""
        if self.replication_log is not None:
            self.replication_log.write(event, self.hlc_now(), fields)
            self._flush_log_soon()

    def _flush_log_soon(self) -> None:
        """Hand the replication log's lines to the OS once this loop turn's work is done (one write for the turn):
        a kill -9 of the node then loses at most the turn it interrupts (never the line of an acknowledged write,
        whose acknowledgement waits for the storage); a crash of the machine can lose what the OS has not written.
        Lines kept for up to a second went with a killed node, and the convergence report then counted the writes
        they recorded as never visible there."""
        if not self._log_flush_due and self._loop is not None:
            self._log_flush_due = True
            self._loop.call_soon(self._flush_log)

    def _flush_log(self) -> None:
        self._log_flush_due = False
        if self.replication_log is not None:
            self.replication_log.flush()

    def _on_timer(self) -> None:
        self._timer = None
        self._apply(self._replica.on_timer(self._monotonic(), self._wall()))
