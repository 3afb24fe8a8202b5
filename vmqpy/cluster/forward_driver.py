"""Forwarding of publishes between nodes over the node links: the asyncio side of forwarding.py.

The publishes' `ForwardDriver` is the broker's `Forwarder` (vmqpy.broker.core.ports; node.py hands it over; the queue
replicas have a second one: vmqpy.replicas). It collects the forwards to each node during one turn of the event
loop and the next, and sends them as one FORWARD frame at the end of the second turn (or sooner, once
`BATCH_BYTES` are collected); it delivers the batches that arrive (each in one call of the broker's when it has
one: `deliver_batch`), each numbered forward once; it acknowledges them to their sender (CONTROL `fwd_ack`,
cumulative, after the storage barrier when a persistent session took one); it sends again what a node did not
acknowledge when its link comes back; it holds the acknowledgement of a forward the broker passed on to another
node until that node has it; and it carries the congestion signals of the subscribers its forwards feed (CONTROL
`congestion`). node.py registers its frame type and its ops (`control_ops`) in the node's control table
(vmqpy.cluster.controls). The numbering, duplicate detection and batch encoding are forwarding.py's (pure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from vmqpy.cluster.forwarding import (
    BATCH_OVERHEAD,
    ENTRY_OVERHEAD,
    ForwardReceiver,
    ForwardSender,
    new_epoch,
    pack_batch,
    unpack_batch,
)
from vmqpy.cluster.framing import FrameType

__all__ = ["BATCH_BYTES", "Deliver", "DeliverBatch", "ForwardDriver", "ForwardLinks"]

log = structlog.get_logger("vmqpy.cluster")

BATCH_BYTES = 64 * 1024  # a batch of forwards is sent once this large, without waiting for the end of the turn
CONGESTION = "congestion"  # the CONTROL op of a congestion signal: {"op": "congestion", "on": bool}

#: ``deliver(record, now, sender, seq)``: hand a forwarded publish to the local sessions; True when a
#: persistent session took it (its acknowledgement then waits for the storage barrier). `seq` 0: QoS 0.
Deliver = Callable[[Any, float, str, int], bool]
#: ``deliver_batch(entries, now, sender)``: the same for the forwards of one frame that are due (duplicates left
#: out), ``(seq, record)`` in order; True when a persistent session took any of them.
DeliverBatch = Callable[[list[tuple[int, Any]], float, str], bool]


class ForwardLinks(Protocol):
    """What forwarding needs of the node links (vmqpy.cluster.tcp.ClusterNetwork)."""

    def send_frame(self, peer: str, type: FrameType, body: Any, *, flush: bool = False) -> bool: ...

    def room(self, peer: str) -> int: ...

    @property
    def max_frame(self) -> int: ...


@dataclass(slots=True)
class _Batch:
    """The forwards to one node during this turn of the event loop."""

    entries: list[Any] = field(default_factory=list)  # number, record, number, record, ...
    size: int = 0  # bytes, with the entries' overhead
    limit: int = 0  # what the network takes (room in the outgoing buffer, the largest frame), read at the first
    send_at: int = 0  # bytes of entries from which the batch leaves before the end of the turn (`_batch_limit`)
    refused_at: int | None = None  # the buffer's room when a forward was refused for want of it


def _ignore_failure(_why: str) -> None:
    return None


class ForwardDriver:
    """Forwards to and from the other nodes of one node, over `network`.

    `deliver`: see `Deliver`. `barrier()`: a future that resolves once everything written to storage so far is
    on disk (None: nothing is stored, acknowledgements leave at once).
    """

    def __init__(
        self, network: ForwardLinks, deliver: Deliver, barrier: Callable[[], Any] | None = None, *,
        frame_type: FrameType = FrameType.FORWARD, ack_op: str = "fwd_ack", deliver_batch: DeliverBatch | None = None,
        on_congestion: Callable[[str, bool], None] | None = None,
    ) -> None:
        """`frame_type`, `ack_op`: the frame its batches travel in and the CONTROL op of its acknowledgements
        (FORWARD / `fwd_ack` for publishes; the queue replicas use a second instance: vmqpy.replicas).
        `deliver_batch`: the same delivery as `deliver`, a frame's forwards in one call (the broker's); None: one
        by one. `on_congestion(peer, congested)`: a peer's `congestion` signal (see `signal_congestion`)."""
        self.network = network
        self.frame_type = frame_type
        self.ack_op = ack_op
        self.counters = {
            "forward_entries_received": 0,
            "forward_duplicates": 0,
            "forwards_resent": 0,
            "forwards_refused": 0,
            "forward_malformed": 0,
        }
        self.sender = ForwardSender()
        self.receiver = ForwardReceiver()
        self.epoch = new_epoch()
        self._deliver = deliver
        self.deliver_batch = deliver_batch
        self._on_congestion = on_congestion
        self._barrier = barrier
        self._acks_due: set[str] = set()  # peers whose forwards arrived since the last acknowledgements
        self._acks_scheduled = False
        self._acks_durable = False  # a persistent session took one of the forwards to acknowledge
        self._barriers_in_flight = 0
        self._batches: dict[str, _Batch] = {}  # forwards of this turn of the event loop, per peer
        self._batches_scheduled = False

    def new_run(self) -> None:
        """This node starts again as a new incarnation: nothing of the old run is pending (its peers were
        dropped); new numbers under a new epoch."""
        self.sender = ForwardSender()
        self.receiver = ForwardReceiver()
        self.epoch = new_epoch()

    def control_ops(self) -> dict[str, Callable[[str, dict[str, Any]], None]]:
        """The CONTROL ops this driver takes (vmqpy.cluster.controls): its acknowledgements, and the congestion
        signals when it has an `on_congestion`."""
        ops: dict[str, Callable[[str, dict[str, Any]], None]] = {self.ack_op: self.acknowledged}
        if self._on_congestion is not None:
            ops[CONGESTION] = self._congestion
        return ops

    def signal_congestion(self, node: str, congested: bool) -> None:
        """Tell `node` that subscribers here that its forwards feed are congested (it should slow its publishers
        down), or no longer are."""
        self.network.send_frame(node, FrameType.CONTROL, {"op": CONGESTION, "on": congested})

    def _congestion(self, peer: str, body: dict[str, Any]) -> None:
        if self._on_congestion is not None:
            self._on_congestion(peer, bool(body.get("on")))

    def drop_peer(self, node: str) -> None:
        """`node` left the cluster: what it did not acknowledge fails (their publishers are not acknowledged)."""
        for fail in self.sender.drop_peer(node, f"{node} left the cluster"):
            fail()

    # ------------------------------------------------------------------------------------------ sending

    def forward(
        self,
        node: str,
        record: Any,
        size: int,
        on_ack: Callable[[], None] | None = None,
        on_fail: Callable[[str], None] | None = None,
    ) -> bool:
        """Send a publish to `node` (`record`, at most `size` bytes in msgpack). With `on_ack` (QoS 1/2) it is
        numbered, kept until `node` acknowledges it (then `on_ack` runs) and sent again after a broken link
        (forwarding.py); `on_fail` runs if `node` leaves the cluster first. False: it cannot even be buffered.

        The forwards to one node in one turn of the event loop (and the next) leave in one frame at the end of
        the next turn (`_flush_next_turn`)."""
        size += ENTRY_OVERHEAD
        box = self._batches.get(node)
        if box is None:
            box = self._batches[node] = _Batch()
        if box.refused_at is not None:  # once full, refuse until the buffer drained (in order, never one in a gap)
            if box.entries or self.network.room(node) <= box.refused_at:
                return False
            box.refused_at = None
        if not box.entries:  # the first forward of this turn: how much the network takes now
            box.limit = min(self.network.room(node), self.network.max_frame) - BATCH_OVERHEAD
            box.send_at = self._batch_limit()
        if box.size + size > box.limit:
            largest = self.network.max_frame - BATCH_OVERHEAD
            if size > largest:
                log.warning(
                    "publish too large to forward",
                    node=node,
                    size=size - ENTRY_OVERHEAD,
                    maximum=largest - ENTRY_OVERHEAD,
                )
                return False
            if box.entries and box.limit >= largest:  # the frame is full, not the buffer: a new batch
                self._send_batch(node, box)
                return self.forward(node, record, size - ENTRY_OVERHEAD, on_ack, on_fail)
            box.refused_at = self.network.room(node)  # no room in the outgoing buffer
            return False
        if on_ack is None:
            seq = 0
        else:
            seq, _low = self.sender.add(node, record, on_ack, on_fail or _ignore_failure, size)
        box.entries += (seq, record)
        box.size += size
        if box.size >= box.send_at:
            self._send_batch(node, box)
        elif not self._batches_scheduled:
            self._batches_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_next_turn)
        return True

    def _flush_next_turn(self) -> None:
        """The batches leave one turn of the event loop later: the publishes read in that turn join them too.
        Under load that is twice the forwards per frame, half the frames' own cost (framing, authentication
        tag, a write here and a read there, a wake-up of the other node) per publish; when idle the next turn
        comes at once."""
        asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Send the forwards collected so far now."""
        self._batches_scheduled = False
        for node, box in list(self._batches.items()):
            if box.entries:
                self._send_batch(node, box)

    def resend(self, peer: str) -> None:
        """The link to `peer` is back: what it did not acknowledge goes again (after this turn's batch)."""
        box = self._batches.get(peer)
        if box is not None and box.entries:
            self._send_batch(peer, box)
        limit = self._batch_limit()
        low = self.sender.low(peer)
        entries: list[Any] = []
        size = 0
        for seq, record, record_size in self.sender.unacknowledged(peer):
            if entries and size + record_size > limit:
                self.network.send_frame(peer, self.frame_type, pack_batch(self.epoch, low, entries))
                entries, size = [], 0
            entries += (seq, record)
            size += record_size
            self.counters["forwards_resent"] += 1
        if entries:
            self.network.send_frame(peer, self.frame_type, pack_batch(self.epoch, low, entries), flush=True)

    def acknowledged(self, peer: str, body: dict[str, Any]) -> None:
        """A `fwd_ack` from `peer`: the forwards it covers are acknowledged to their publishers."""
        if body.get("epoch") == self.epoch:  # not an answer to a run of this node before a restart
            for callback in self.sender.acked(peer, int(body.get("upto", 0))):
                callback()

    def _batch_limit(self) -> int:
        """Bytes of entries from which a batch is sent without waiting for the end of the turn."""
        return min(BATCH_BYTES, self.network.max_frame) - BATCH_OVERHEAD

    def _send_batch(self, node: str, box: _Batch) -> None:
        entries = box.entries
        box.entries = []
        box.size = 0
        body = pack_batch(self.epoch, self.sender.low(node), entries)
        if self.network.send_frame(node, self.frame_type, body, flush=True):
            return
        # The link went down in this turn and the buffer has no room left (forward() checked it had):
        # QoS 0 forwards are dropped, QoS 1/2 ones fail (their publishers are not acknowledged).
        numbered = [seq for seq in entries[::2] if type(seq) is int and seq]
        log.warning(
            "batch of forwards not sent: the outgoing buffer is full",
            node=node,
            qos0_dropped=len(entries) // 2 - len(numbered),
            qos12_failed=len(numbered),
        )
        self.counters["forwards_refused"] += len(entries) // 2
        for seq in numbered:
            on_fail = self.sender.forget(node, seq)
            if on_fail is not None:
                on_fail("the outgoing buffer to that node is full")

    # ------------------------------------------------------------------------------------------ receiving

    def receive(self, peer: str, body: Any) -> None:
        """A FORWARD frame from `peer`: deliver each forward in it once, and acknowledge the numbered ones."""
        try:
            epoch, low, entries = unpack_batch(bytes(body))
        except ValueError as exc:
            self.counters["forward_malformed"] += 1
            log.warning("malformed batch of forwards", peer=peer, error=str(exc))
            return
        self.counters["forward_entries_received"] += len(entries)
        accept = self.receiver.accept
        now = time.time()
        deliver_batch = self.deliver_batch
        if deliver_batch is not None:
            due: list[tuple[int, Any]] = []
            numbered = False
            for entry in entries:
                seq = entry[0]
                if not seq:
                    due.append(entry)
                    continue
                numbered = True
                if accept(peer, seq, low, epoch):
                    due.append(entry)
                else:
                    self.counters["forward_duplicates"] += 1
            if due and deliver_batch(due, now, peer) and numbered:
                self._acks_durable = True
            if numbered:
                self._ack_soon(peer)
            return
        deliver = self._deliver
        numbered = False
        for seq, record in entries:
            if not seq:
                deliver(record, now, peer, 0)
                continue
            numbered = True
            if accept(peer, seq, low, epoch):
                if deliver(record, now, peer, seq):
                    self._acks_durable = True
            else:
                self.counters["forward_duplicates"] += 1
        if numbered:
            self._ack_soon(peer)

    def hold(self, peer: str, seq: int) -> Callable[[], None]:
        """The broker passes forward `seq` of `peer` (being delivered now) on to another node (its subscriber
        moved there): it is acknowledged to `peer` only when the returned function is called (that node
        acknowledged it, or cannot any more)."""
        epoch = self.receiver.acknowledgeable(peer)[0]
        self.receiver.hold(peer, seq)

        def release() -> None:
            self.receiver.release(peer, seq, epoch)
            self._ack_soon(peer)

        return release

    def _ack_soon(self, peer: str) -> None:
        """Acknowledge what `peer` forwarded at the end of this turn of the event loop."""
        self._acks_due.add(peer)
        if not self._acks_scheduled:
            self._acks_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_acks)

    def _send_acks(self) -> None:
        """Acknowledge, per sender, what was delivered here: at once when only online or clean sessions took
        it, after the storage barrier when a persistent session did (and, to keep the cumulative
        acknowledgements in order, whenever an earlier barrier is still pending)."""
        self._acks_scheduled = False
        due = [(peer, *self.receiver.acknowledgeable(peer)) for peer in self._acks_due]
        self._acks_due.clear()
        barrier = self._barrier
        durable, self._acks_durable = self._acks_durable, False
        if barrier is None or not (durable or self._barriers_in_flight):
            self._ack(due)
            return
        self._barriers_in_flight += 1
        loop = asyncio.get_running_loop()
        barrier().add_done_callback(lambda f: loop.call_soon_threadsafe(self._ack_if_stored, due, f))

    def _ack_if_stored(self, due: list[tuple[str, int, int]], future: Any) -> None:
        self._barriers_in_flight -= 1
        if future.exception() is None:
            self._ack(due)
        else:
            log.error("storage failed: forwarded publishes not acknowledged", error=str(future.exception()))

    def _ack(self, due: list[tuple[str, int, int]]) -> None:
        for peer, epoch, upto in due:
            if upto:
                self.network.send_frame(
                    peer, FrameType.CONTROL, {"op": self.ack_op, "epoch": epoch, "upto": upto}, flush=True
                )
