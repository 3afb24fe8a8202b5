"""One client's session: subscriptions, the outgoing in-flight table and queue, incoming QoS 2 state.

The session outlives its connections (persistent sessions) and holds every piece of protocol state as plain
data: packet ids in flight, what was sent and what is waiting, so it can be inspected, persisted and resumed.
It does no I/O: it hands packets to the `Sink` of the live connection, if any, and records changes in a
`Journal` (the SQLite persistence of persistent sessions, or nothing for clean ones).

It counts what becomes of the messages routed to it in the node's `metrics` (the broker's Counter; VerneMQ's
names, docs/operations.md): taken and written at once (`queue_message_direct`), taken into the queue
(`queue_message_queued`), written from the queue (`queue_message_dequeued`), resends not counted -- VerneMQ's
`queue_message_in` is direct + queued and `queue_message_out` direct + dequeued (admin.prometheus adds them up,
so a message written at once costs one increment) --, dropped (`queue_message_drop`: queue full, larger than
the client's Maximum Packet Size, QoS 0 of a client gone, not resumable after a handover) and expired
(`queue_message_expired`: discarded from the queue, its message expiry interval passed before it was written).
So every message taken is written, dropped, expired or still queued; only a message in flight that a resumed
connection's smaller Maximum Packet Size no longer allows is counted both out and dropped. `dropped` keeps the
session's own count of drops (`vmq-admin session show`).

Congestion (docs/broker.md, "Overload"): an online session whose queue holds `max_online` QoS 1/2 messages, or
`max_bytes` bytes of them, is `congested`: the publishers routed to it wait for it (`wait_for_drain`) until it
drained to half. QoS 0 never congests it: a QoS 0 message that finds the queue full (by count or bytes) is
dropped. That wait is bounded: once it lasted `queue.max_stall` seconds (vmqpy.broker.core.stalls), the session
`overflow`s: it lets its publishers go and, until it drained to half, drops its QoS 0 messages at once and keeps
QoS 1/2 ones up to its `overflow_limit` (then drops them, counted), so that it is this subscriber that loses,
no other.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet

from vmqpy.broker.core.empty_deque import EMPTY
from vmqpy.broker.core.session_ports import Journal as Journal
from vmqpy.broker.core.session_ports import NullJournal as NullJournal
from vmqpy.broker.core.session_ports import Sink as Sink
from vmqpy.mqtt.codec import encode
from vmqpy.mqtt.packets import Pubrel
from vmqpy.sessions.message import Message
from vmqpy.sessions.owners import UNKNOWN_USER
from vmqpy.sessions.parts import Delivery, Outgoing, OutState, SubEntry

# Enum members read on every delivery, as module constants: reading one through its class is a descriptor call in
# Python 3.11 (about as costly as a function call).
_SENT, _QUEUED, _DROPPED = Delivery.SENT, Delivery.QUEUED, Delivery.DROPPED
_PUBLISHED = OutState.PUBLISHED


def message_size(message: Message) -> int:
    """The bytes a queued message is counted with against max_queued_bytes: its payload and topic."""
    return len(message.payload) + len(message.topic)


NO_IDS: frozenset[int] = frozenset()  # the awaiting_release of every session that has none (Session)
NULL_JOURNAL = NullJournal()  # stateless: the one journal of every clean session


FORWARD_MEMORY = 10.0  # seconds a forwarded message's id is remembered by a session that watches for duplicates
FORWARD_MEMORY_IDS = 65536  # and at most this many ids


class Session:
    """The broker-side state of one client id."""

    # A node holds one per client id: no attribute dictionary, and the queues of a client that never needed one
    # are the one shared empty deque (vmqpy.broker.core.empty_deque) until `_enqueue` or `attach` swaps in their own.
    __slots__ = (
        "_acked_bytes", "_drain_waiters", "_held", "_next_packet_id", "_next_seq", "_queued_qos0", "attached_at",
        "awaiting_release", "client_id", "created_at", "disconnected_at", "dropped", "expiry_interval", "inflight",
        "journal", "max_bytes", "max_inflight", "max_offline", "max_online", "max_packet_size", "metrics", "moving_to",
        "overflow_limit", "owner_recorded", "protocol_level", "queue", "queued_bytes", "recent_forwards", "sent_at",
        "sink", "stalled_since", "subscriptions", "user", "watch_until", "window",
    )

    def __init__(
        self,
        client_id: str,
        *,
        protocol_level: int,
        expiry_interval: float | None,
        max_inflight: int,
        max_online: int,
        max_offline: int,
        journal: Journal | None = None,
        metrics: Counter[str] | None = None,
        max_bytes: int = 0,
    ) -> None:
        self.client_id = client_id
        self.metrics: Counter[str] = Counter() if metrics is None else metrics  # the node's (see the module doc)
        self.protocol_level = protocol_level
        self.expiry_interval = expiry_interval  # seconds after disconnect; None = never expires; 0 = clean
        self.subscriptions: dict[str, SubEntry] = {}
        self.inflight: dict[int, Outgoing] = {}
        self.queue: deque[Outgoing] = EMPTY  # messages waiting for the window or the connection, oldest first
        # incoming QoS 2 packet ids whose PUBREL has not come (PUBREC sent): the one shared empty frozenset until
        # the session gets one (`await_release`): most sessions never do, and an empty set is 216 bytes
        self.awaiting_release: AbstractSet[int] = NO_IDS
        self.sink: Sink | None = None
        self.window = max_inflight
        self.max_inflight = max_inflight
        self.max_online = max_online
        self.max_offline = max_offline
        self.max_bytes = max_bytes  # max_queued_bytes: bytes (payload and topic) the queue holds at most; 0: no bound
        self.queued_bytes = 0  # bytes of the queued messages (`message_size`)
        self._acked_bytes = 0  # of them, the QoS 1/2 messages' (QoS 0 never congests)
        self._queued_qos0 = 0  # QoS 0 messages in the queue
        # when publishers started waiting for this session (vmqpy.broker.core.stalls), None while nobody waits
        self.stalled_since: float | None = None
        # after queue.max_stall: the QoS 1/2 messages the queue keeps (then they are dropped); None: not overflowing
        self.overflow_limit: int | None = None
        self.max_packet_size = 0  # the client's Maximum Packet Size; 0 = no limit
        self.journal: Journal = journal or NULL_JOURNAL
        # whether an owner record may name this session in the metadata store: False only for a clean session that
        # a node without cluster links opened without writing one (Broker.open_session), whose end looks none up
        self.owner_recorded = True
        # the user name that owns the session (vmqpy.sessions.owners; None: anonymous), UNKNOWN_USER until known
        self.user: str | None = UNKNOWN_USER
        self._held: deque[int] = EMPTY  # in-flight packet ids to resend once the window has room (attach)
        self.disconnected_at: float | None = None
        self.attached_at: float | None = None  # when its connection took it (`vmq-admin session show`)
        self.created_at: float | None = None  # when this node made or restored it: its first attach, or the load
        self.dropped = 0
        # forward id -> when it was delivered, while the session watches for duplicate forwards (None: it does not)
        self.recent_forwards: dict[int, float] | None = None
        self.watch_until = 0.0
        self.moving_to: str | None = None  # the node this session is being handed over to
        self._next_packet_id = 1
        self._next_seq = 1
        self._drain_waiters: list[Callable[[], None]] | None = None  # publishers waiting for room; a list when one does
        # packet id -> when its PUBLISH (or PUBREL) last went out on the live connection: what `resend_overdue`
        # resends (`retry_interval`); emptied when the connection goes
        self.sent_at: dict[int, float] = {}

    # ------------------------------------------------------------------------------------------ properties

    def await_release(self, packet_ids: Iterable[int]) -> None:
        """Incoming QoS 2 packet ids received and answered with PUBREC: their PUBREL is awaited."""
        ids = self.awaiting_release
        if not isinstance(ids, set):
            ids = self.awaiting_release = set(ids)
        ids.update(packet_ids)

    def release(self, packet_id: int) -> bool:
        """The PUBREL of `packet_id` came: True when it was awaited (and is no longer)."""
        ids = self.awaiting_release
        if packet_id not in ids:
            return False
        assert isinstance(ids, set)  # only `await_release` puts ids in, into a set of the session's own
        ids.discard(packet_id)
        return True


    @property
    def persistent(self) -> bool:
        return self.expiry_interval is None or self.expiry_interval > 0

    @property
    def online(self) -> bool:
        return self.sink is not None

    @property
    def congested(self) -> bool:
        """An online client that does not keep up: publishers to it should be slowed down (until it overflowed:
        then it holds nobody back). Only its QoS 1/2 messages count."""
        return (self.sink is not None and self.overflow_limit is None
                and (len(self.queue) - self._queued_qos0 >= self.max_online
                     or (self.max_bytes > 0 and self._acked_bytes >= self.max_bytes)))

    @property
    def holding(self) -> bool:
        """Whether publishers (here or on other nodes) wait for this session to drain."""
        return bool(self._drain_waiters)

    def _drained(self) -> bool:
        """Drained to half (by count and bytes of its QoS 1/2 messages): the publishers waiting for it may go on."""
        return (len(self.queue) - self._queued_qos0 < max(1, self.max_online // 2)
                and (not self.max_bytes or self._acked_bytes < self.max_bytes // 2))

    def _bytes_full(self, size: int) -> bool:
        return self.max_bytes > 0 and self.queued_bytes + size > self.max_bytes

    def overflow(self, limit: int) -> None:
        """It held its publishers back for queue.max_stall seconds: from now until it drained to half, it keeps
        at most `limit` QoS 1/2 messages queued and no new QoS 0 one; its publishers go on."""
        self.overflow_limit = limit
        self.stalled_since = None
        self.release_waiters()

    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def restore_seq(self, seq: int) -> None:
        self._next_seq = max(self._next_seq, seq + 1)

    # ------------------------------------------------------------------------------------------ delivery

    def deliver(self, message: Message, qos: int, retain: bool, subscription_ids: list[int], now: float) -> Delivery:
        """Hand a routed message to this session: send it now, queue it, or drop it by policy (counted); a
        forward it already got while it watches for duplicates is not delivered again."""
        if self.recent_forwards is not None and message.forward_id is not None:
            return self._deliver_watched(message, qos, retain, subscription_ids, now)
        seq = self._next_seq  # next_seq, inline: this runs for every message delivered
        self._next_seq = seq + 1
        sink = self.sink
        metrics = self.metrics
        if qos == 0 and sink is not None and not self.queue and not self.max_packet_size and sink.can_write():
            # the hot path of QoS 0, written at once: no Outgoing to make (the branch below, without its checks)
            metrics["queue_message_direct"] += 1
            sink.write_publish(message, 0, retain, None, subscription_ids, now)
            return _SENT
        out = Outgoing(seq, message, qos, retain, subscription_ids)
        if sink is None:
            if qos == 0 or len(self.queue) >= self.max_offline or (self.max_bytes and self._bytes_full(message_size(
                    message))):
                self._drop(1)
                return _DROPPED
            self._enqueue(out)
            metrics["queue_message_queued"] += 1
            self.journal.save_message(self, out)
            return _QUEUED
        if not self.queue and sink.can_write():
            if qos == 0:
                if self.max_packet_size and self._too_large(out, now):
                    self._drop(1)
                    return _DROPPED
                metrics["queue_message_direct"] += 1
                sink.write_publish(message, 0, retain, None, subscription_ids, now)
                return _SENT
            if len(self.inflight) < self.window:
                if self._send(out, sink, now):
                    metrics["queue_message_direct"] += 1
                    return _SENT
                return _DROPPED
        if qos == 0:
            if self.overflow_limit is not None or len(self.queue) >= self.max_online or (
                    self.max_bytes and self._bytes_full(message_size(message))):
                if self.overflow_limit is not None:
                    metrics["queue_overflow_dropped"] += 1
                self._drop(1)
                return _DROPPED
        elif self.overflow_limit is not None:
            acked = len(self.queue) - self._queued_qos0
            if acked >= self.overflow_limit or (self.max_bytes and self._bytes_full(message_size(message))):
                metrics["queue_overflow_dropped"] += 1
                self._drop(1)
                return _DROPPED
            if acked >= self.max_online:
                metrics["queue_overflow_kept"] += 1
        self._enqueue(out)
        metrics["queue_message_queued"] += 1
        if qos > 0:
            self.journal.save_message(self, out)
        return _QUEUED

    def _enqueue(self, out: Outgoing) -> None:
        """Append `out` to the queue (a deque of the session's own from the first message on)."""
        queue = self.queue
        if queue is EMPTY:
            queue = self.queue = deque()
        queue.append(out)
        message = out.message
        size = len(message.payload) + len(message.topic)  # message_size, inline: every queued message
        self.queued_bytes += size
        if out.qos:
            self._acked_bytes += size
        else:
            self._queued_qos0 += 1

    def _recount(self) -> None:
        """Count the queue's bytes and QoS 0 messages again (after it was rebuilt)."""
        self.queued_bytes = self._acked_bytes = self._queued_qos0 = 0
        for out in self.queue:
            size = message_size(out.message)
            self.queued_bytes += size
            if out.qos:
                self._acked_bytes += size
            else:
                self._queued_qos0 += 1

    def watch_forwards(self, until: float) -> None:
        """Until `until` (wall clock), deliver a forwarded message at most once, however many nodes forward it
        here: the session's subscriptions just moved to this node, and the node they left passes on the
        forwards still routed to it, some of which the publishing node also sends here directly (docs/netsplit.md,
        "Duplicates after a move")."""
        self.watch_until = max(self.watch_until, until)
        if self.recent_forwards is None:
            self.recent_forwards = {}

    def _deliver_watched(
        self, message: Message, qos: int, retain: bool, subscription_ids: list[int], now: float
    ) -> Delivery:
        """`deliver` while the session watches for duplicate forwards: a forward it got already is not delivered
        again; one it takes (sent or queued, not dropped) is remembered FORWARD_MEMORY seconds."""
        recent = self.recent_forwards
        forward_id = message.forward_id
        assert recent is not None and forward_id is not None
        if now > self.watch_until:
            self.recent_forwards = None
            return self.deliver(message, qos, retain, subscription_ids, now)
        if forward_id in recent:
            return Delivery.DUPLICATE
        self.recent_forwards = None  # the plain delivery below
        try:
            outcome = self.deliver(message, qos, retain, subscription_ids, now)
        finally:
            self.recent_forwards = recent
        if outcome is not Delivery.DROPPED:
            horizon = now - FORWARD_MEMORY
            while recent:
                oldest = next(iter(recent))
                if recent[oldest] > horizon and len(recent) < FORWARD_MEMORY_IDS:
                    break
                del recent[oldest]
            recent[forward_id] = now
        return outcome

    def _drop(self, count: int) -> None:
        """Count `count` messages dropped: the session's own figure and the node's counter."""
        self.dropped += count
        self.metrics["queue_message_drop"] += count

    def _send(self, out: Outgoing, sink: Sink, now: float) -> bool:
        """Send `out` now; False when it is larger than the client's Maximum Packet Size (dropped, counted)."""
        if self.max_packet_size and self._too_large(out, now):
            self._drop(1)
            if out.qos:
                self.journal.delete_message(self, out)
            return False
        if out.qos == 0:
            sink.write_publish(out.message, 0, out.retain, None, out.subscription_ids, now)
            return True
        packet_id = self._next_packet_id  # the next identifier is nearly always free: no call for it then
        if packet_id in self.inflight:
            packet_id = self._allocate_packet_id()
        else:
            self._next_packet_id = packet_id % 65535 + 1
        out.packet_id = packet_id
        out.state = _PUBLISHED
        self.inflight[packet_id] = out
        if self.journal is not NULL_JOURNAL:  # a clean session's saves nothing: no call for it (every delivery)
            self.journal.save_message(self, out)
        self.sent_at[packet_id] = now  # before the write: the sink may look at it (its resend timer)
        sink.write_publish(out.message, out.qos, out.retain, packet_id, out.subscription_ids, now)
        return True

    def _too_large(self, out: Outgoing, now: float) -> bool:
        """Whether the PUBLISH of `out` exceeds the client's Maximum Packet Size (MQTT 5.0 3.1.2.11.4: the server
        must not send it), measured exactly as it would be encoded (without a topic alias)."""
        publish = out.message.to_publish(out.qos, out.retain, 1 if out.qos else None, now, out.subscription_ids)
        return len(encode(publish, self.protocol_level)) > self.max_packet_size

    def _allocate_packet_id(self) -> int:
        for _ in range(65535):
            candidate = self._next_packet_id
            self._next_packet_id = candidate % 65535 + 1
            if candidate not in self.inflight:
                return candidate
        raise RuntimeError("no free packet identifier")  # unreachable: the window is at most 65535

    def pump(self, now: float) -> None:
        """Send what the window and the connection allow, oldest first; expired messages are discarded."""
        sink = self.sink
        if sink is None:
            return
        held, inflight = self._held, self.inflight
        while held and sink.can_write() and len(inflight) - len(held) < self.window:  # resends first, in order
            packet_id = held.popleft()
            out = inflight.get(packet_id)
            if out is not None and out.state == _PUBLISHED:
                self.sent_at[packet_id] = now
                sink.write_publish(out.message, out.qos, out.retain, packet_id, out.subscription_ids, now, dup=True)
        queue = self.queue
        while queue and sink.can_write():
            head = queue[0]
            if head.qos > 0 and len(self.inflight) >= self.window:
                break
            queue.popleft()
            message = head.message
            size = len(message.payload) + len(message.topic)  # `_dequeued`, inline: every queued message
            self.queued_bytes -= size
            if head.qos:
                self._acked_bytes -= size
            else:
                self._queued_qos0 -= 1
            expires_at = message.expires_at  # Message.expired, inline: this runs for every queued message
            if expires_at is not None and now >= expires_at:
                self.metrics["queue_message_expired"] += 1
                self.journal.delete_message(self, head)
                continue
            if self._send(head, sink, now):
                self.metrics["queue_message_dequeued"] += 1
        if (self._drain_waiters or self.overflow_limit is not None or self.stalled_since is not None) \
                and self._drained():
            self.overflow_limit = None
            self.stalled_since = None
            self.release_waiters()

    def wait_for_drain(self, callback: Callable[[], None]) -> None:
        if self._drain_waiters is None:
            self._drain_waiters = []
        self._drain_waiters.append(callback)

    def release_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, None
        for callback in waiters or ():
            callback()

    # ------------------------------------------------------------------------------------------ acknowledgements

    def on_puback(self, packet_id: int, now: float) -> bool:
        out = self.inflight.get(packet_id)
        if out is None or out.qos != 1:
            return False
        del self.inflight[packet_id]
        self.sent_at.pop(packet_id, None)
        if self.journal is not NULL_JOURNAL:
            self.journal.delete_message(self, out)
        if self.queue or self._held or self._drain_waiters:  # else `pump` has nothing to do (every PUBACK)
            self.pump(now)
        return True

    def on_pubrec(self, packet_id: int, reason_code: int, now: float) -> Pubrel | None:
        """PUBREC from the client: answer PUBREL (or, for an error reason code, end the flow)."""
        out = self.inflight.get(packet_id)
        if out is None or out.qos != 2:
            return Pubrel(packet_id, 0x92) if self.protocol_level == 5 else Pubrel(packet_id)
        if reason_code >= 0x80:
            del self.inflight[packet_id]
            self.sent_at.pop(packet_id, None)
            self.journal.delete_message(self, out)
            self.pump(now)
            return None
        out.state = OutState.RELEASED
        self.journal.save_message(self, out)
        self.sent_at[packet_id] = now  # the PUBREL the caller sends now
        return Pubrel(packet_id)

    def on_pubcomp(self, packet_id: int, now: float) -> bool:
        out = self.inflight.get(packet_id)
        if out is None or out.state != OutState.RELEASED:
            return False
        del self.inflight[packet_id]
        self.sent_at.pop(packet_id, None)
        self.journal.delete_message(self, out)
        self.pump(now)
        return True

    def resend_overdue(self, now: float, interval: float) -> int:
        """Resend what the client has not acknowledged for `interval` seconds: a PUBLISH with DUP, or the PUBREL
        (MQTT 3.1.1 allows it on the same connection; the connection's rules say when). How many were resent;
        none while the connection cannot take more."""
        sink = self.sink
        if sink is None:
            return 0
        due = [packet_id for packet_id, sent in self.sent_at.items() if now - sent >= interval]
        resent = 0
        for packet_id in due:
            out = self.inflight.get(packet_id)
            if out is None:
                del self.sent_at[packet_id]
                continue
            if not sink.can_write():
                break
            self.sent_at[packet_id] = now
            if out.state == OutState.RELEASED:
                sink.write_packet(Pubrel(packet_id))
            else:
                sink.write_publish(out.message, out.qos, out.retain, packet_id, out.subscription_ids, now, dup=True)
            resent += 1
        return resent

    def next_resend(self, interval: float) -> float | None:
        """When the oldest unacknowledged PUBLISH or PUBREL is due for a resend after `interval`; None: nothing."""
        return min(self.sent_at.values()) + interval if self.sent_at else None

    # ------------------------------------------------------------------------------------------ connections

    def attach(self, sink: Sink, window: int, max_packet_size: int, now: float) -> None:
        """A connection takes this session: resend what is in flight with its original ids, then the queue.
        At most `window` PUBLISHes are resent at once (the new connection's Receive Maximum may be smaller than
        the old one's): the rest wait, in order, for acknowledgements to make room (`pump`); one larger than the
        new connection's Maximum Packet Size is dropped and counted."""
        self.sink = sink
        self.attached_at = now
        if self.created_at is None:
            self.created_at = now
        self.window = max(1, min(window, self.max_inflight))
        self.max_packet_size = max_packet_size
        self.disconnected_at = None
        self._held = EMPTY
        self.overflow_limit = None
        self.stalled_since = None
        self.sent_at.clear()
        resent = 0
        for packet_id, out in list(self.inflight.items()):
            if out.state == OutState.RELEASED:
                self.sent_at[packet_id] = now
                sink.write_packet(Pubrel(packet_id))
                continue
            if (out.message.expired(now) and out.qos == 1) or (max_packet_size and self._too_large(out, now)):
                del self.inflight[packet_id]
                self.journal.delete_message(self, out)
                if not out.message.expired(now):  # (an expired one was written already: counted out, not expired)
                    self._drop(1)
                continue
            if resent < self.window:
                self.sent_at[packet_id] = now
                sink.write_publish(out.message, out.qos, out.retain, packet_id, out.subscription_ids, now, dup=True)
                resent += 1
            else:
                if self._held is EMPTY:
                    self._held = deque()
                self._held.append(packet_id)
        self.pump(now)

    def detach(self, now: float) -> None:
        """The connection is gone. QoS 0 messages waiting for it are dropped; QoS 1/2 stay queued."""
        self.sink = None
        self.disconnected_at = now
        self.sent_at.clear()
        if self.queue:
            kept = deque(out for out in self.queue if out.qos > 0)
            if len(kept) != len(self.queue):
                self._drop(len(self.queue) - len(kept))
            self.queue = kept or EMPTY  # an offline session with nothing queued holds no deque of its own
            self._recount()
        self.overflow_limit = None
        self.stalled_since = None
        self.release_waiters()

    def restore(self, out: Outgoing) -> None:
        """Put back a message loaded from storage (in seq order)."""
        self.restore_seq(out.seq)
        if out.packet_id is not None and out.state != OutState.QUEUED:
            self.inflight[out.packet_id] = out
            self._next_packet_id = out.packet_id % 65535 + 1
        else:
            self._enqueue(out)

    def adopt(self, out: Outgoing) -> bool:
        """Take a message handed over by the session's previous owner node. Before a connection attached, an
        in-flight message keeps its packet id (the client may already hold it); otherwise it is queued anew.
        A message waiting only for PUBCOMP whose packet id is taken here cannot be resumed: False (dropped)."""
        in_flight = out.packet_id is not None and out.state != OutState.QUEUED
        if in_flight and self.sink is None and out.packet_id not in self.inflight:
            assert out.packet_id is not None
            out.seq = self.next_seq()
            self.inflight[out.packet_id] = out
            self._next_packet_id = out.packet_id % 65535 + 1
        elif out.state == OutState.RELEASED:
            self._drop(1)
            return False
        else:
            out = Outgoing(self.next_seq(), out.message, out.qos, out.retain, out.subscription_ids)
            self._enqueue(out)
        self.journal.save_message(self, out)
        return True

    def pending(self, after_seq: int) -> list[Outgoing]:
        """The messages of this session (in flight and queued) with a sequence number above `after_seq`."""
        outs = [o for o in self.inflight.values() if o.seq > after_seq]
        outs.extend(o for o in self.queue if o.seq > after_seq)
        outs.sort(key=lambda o: o.seq)
        return outs

    def forget_upto(self, seq: int) -> int:
        """Remove the messages up to `seq` (handed over and acknowledged by the new owner); how many."""
        gone = [pid for pid, o in self.inflight.items() if o.seq <= seq]
        for pid in gone:
            self.journal.delete_message(self, self.inflight.pop(pid))
            self.sent_at.pop(pid, None)
        kept: deque[Outgoing] = deque()
        removed = len(gone)
        for out in self.queue:
            if out.seq <= seq:
                self.journal.delete_message(self, out)
                removed += 1
            else:
                kept.append(out)
        self.queue = kept or EMPTY
        self._recount()
        return removed

    def describe(self) -> dict[str, object]:
        return {
            "client_id": self.client_id,
            "online": self.online,
            "protocol": self.protocol_level,
            "subscriptions": len(self.subscriptions),
            "inflight": len(self.inflight),
            "queued": len(self.queue),
            "queued_bytes": self.queued_bytes,
            "dropped": self.dropped,
            "moving_to": self.moving_to,
        }
