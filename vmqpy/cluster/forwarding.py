"""Acknowledged forwarding of QoS 1/2 publishes between nodes: nothing acknowledged is lost with a link.

A node link is TCP: what was written to a socket that breaks before the peer read it is gone, and a partition
is only detected after `cluster.detect_timeout`. So a QoS 1/2 publish forwarded to another node is acknowledged
to its publisher only once that node has it (delivered to its sessions, and on its disk when a persistent
session took it). The sender numbers each such forward per peer, keeps it until the peer's cumulative
acknowledgement covers it, and sends everything not yet acknowledged again when the link comes back. The
receiver recognises what it already delivered by its number and delivers it once; each frame also carries the
lowest number the sender still waits for, so the receiver (even one that restarted and forgot everything)
knows that everything below it is settled.

Pure: numbers, payloads and callbacks in; what to send, what to deliver and whom to call out.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

Callback = Callable[[], None]
Failure = Callable[[str], None]


@dataclass(slots=True)
class _Pending:
    record: Any
    size: int
    on_ack: Callback
    on_fail: Failure


@dataclass(slots=True)
class _Outgoing:
    next_seq: int = 1
    pending: dict[int, _Pending] = field(default_factory=dict)  # in seq order (insertion order)


class ForwardSender:
    """What this node forwarded to each peer and waits to hear acknowledged."""

    def __init__(self) -> None:
        self._peers: dict[str, _Outgoing] = {}

    def add(self, peer: str, record: Any, on_ack: Callback, on_fail: Failure, size: int = 0) -> tuple[int, int]:
        """Number a forward to `peer` (`record`, `size` bytes encoded at most): (its sequence number, the lowest
        number still unacknowledged)."""
        out = self._peers.get(peer)
        if out is None:
            out = self._peers[peer] = _Outgoing()
        seq = out.next_seq
        out.next_seq += 1
        out.pending[seq] = _Pending(record, size, on_ack, on_fail)
        return seq, next(iter(out.pending))

    def low(self, peer: str) -> int:
        """The lowest number still unacknowledged by `peer` (the next one when none is)."""
        out = self._peers.get(peer)
        if out is None:
            return 1
        return next(iter(out.pending), out.next_seq)

    def forget(self, peer: str, seq: int) -> Failure | None:
        """A forward that could not even be sent: its `on_fail` (None if it was not pending)."""
        out = self._peers.get(peer)
        pending = None if out is None else out.pending.pop(seq, None)
        return None if pending is None else pending.on_fail

    def acked(self, peer: str, upto: int) -> list[Callback]:
        """`peer` holds every forward up to `upto`: the callbacks of those that were pending."""
        out = self._peers.get(peer)
        if out is None:
            return []
        pending = out.pending
        covered = []
        for seq in pending:  # in number order: stop at the first one not covered
            if seq > upto:
                break
            covered.append(seq)
        return [pending.pop(seq).on_ack for seq in covered]

    def unacknowledged(self, peer: str) -> list[tuple[int, Any, int]]:
        """(seq, record, size) of what to send again to `peer`, in order."""
        out = self._peers.get(peer)
        if out is None:
            return []
        return [(seq, p.record, p.size) for seq, p in out.pending.items()]

    def drop_peer(self, peer: str, why: str) -> list[Callable[[], None]]:
        """`peer` left the cluster: its pending forwards will never be acknowledged (calls of their on_fail).

        Its numbering goes on: if it joins again, its receiver may still know this run's numbers (epoch), and
        a number given twice would be taken for a copy, acknowledged and never delivered."""
        out = self._peers.get(peer)
        if out is None:
            return []
        pending, out.pending = out.pending, {}
        return [functools.partial(p.on_fail, why) for p in pending.values()]

    def pending_count(self) -> int:
        return sum(len(o.pending) for o in self._peers.values())


@dataclass(slots=True)
class _Incoming:
    settled: int = 0  # every number up to here was delivered (or settled by the sender)
    seen: set[int] = field(default_factory=set)  # delivered numbers above `settled`
    held: set[int] = field(default_factory=set)  # delivered, but not to be acknowledged yet (passed on)


class ForwardReceiver:
    """Which numbered forwards of each sender (a peer in one of its runs: its epoch) were delivered here."""

    def __init__(self) -> None:
        self._senders: dict[str, _Incoming] = {}
        self._epochs: dict[str, int] = {}

    def accept(self, sender: str, seq: int, low: int, epoch: int = 0) -> bool:
        """True: deliver this forward (first time); False: a copy of one already delivered. A new epoch of a
        sender (it restarted) starts afresh."""
        if self._epochs.get(sender) != epoch:
            self._epochs[sender] = epoch
            self._senders.pop(sender, None)
        state = self._senders.get(sender)
        if state is None:
            state = self._senders[sender] = _Incoming()
        if seq == state.settled + 1 and not state.seen and low <= seq:  # the common case: the next one, in order
            state.settled = seq
            return True
        if low - 1 > state.settled:
            state.settled = low - 1
            state.seen = {s for s in state.seen if s > state.settled}
        if seq <= state.settled or seq in state.seen:
            return False
        state.seen.add(seq)
        while state.settled + 1 in state.seen:
            state.settled += 1
            state.seen.discard(state.settled)
        return True

    def hold(self, sender: str, seq: int) -> None:
        """Do not acknowledge `seq` (nor anything after it: acknowledgements are cumulative) until `release`: it
        was passed on to another node, which has not acknowledged it yet."""
        state = self._senders.get(sender)
        if state is not None:
            state.held.add(seq)

    def release(self, sender: str, seq: int, epoch: int) -> None:
        """`seq` of that run of the sender may be acknowledged now (a new run of the sender dropped it anyway)."""
        state = self._senders.get(sender)
        if state is not None and self._epochs.get(sender) == epoch:
            state.held.discard(seq)

    def acknowledgeable(self, sender: str) -> tuple[int, int]:
        """(epoch, cumulative acknowledgement) to send: every forward of that run of the sender up to it was
        delivered here (and none of them is held)."""
        state = self._senders.get(sender)
        if state is None:
            return self._epochs.get(sender, 0), 0
        upto = min(state.settled, min(state.held) - 1) if state.held else state.settled
        return self._epochs.get(sender, 0), upto


# Forwards travel in batches: every forward to one peer in one turn of the event loop goes in one FORWARD
# frame, whose body is BATCH then msgpack [epoch, lowest pending number, [number, record, number, record,
# ...]]; a record is the publish as the broker encodes it (records.forward_record), one msgpack value. Number 0
# marks a QoS 0 forward (not numbered, not acknowledged). The epoch is drawn at random when
# the sender starts: a restarted node numbers from 1 again, and the receiver must not take its new forwards
# for copies of the old ones.
BATCH = b"B"
ENTRY_OVERHEAD = 16  # msgpack bytes of one entry besides its record, at most (its number)
BATCH_OVERHEAD = 40  # the frame's and the batch's own headers, at most


def new_epoch() -> int:
    return secrets.randbits(63)


def pack_batch(epoch: int, low: int, entries: list[Any]) -> bytes:
    """`entries`: number, record, number, record, ... (number 0: a QoS 0 forward)."""
    packed: bytes = msgpack.packb([epoch, low, entries], use_bin_type=True)
    return BATCH + packed


def unpack_batch(body: bytes) -> tuple[int, int, list[tuple[int, Any]]]:
    """(epoch, lowest pending number, [(number, record), ...]) of a batch. ValueError if malformed (a record
    is checked by whoever delivers it)."""
    if not body.startswith(BATCH):
        raise ValueError("not a batch of forwards")
    try:
        epoch, low, flat = msgpack.unpackb(memoryview(body)[1:], raw=False, use_list=True, strict_map_key=False)
    except Exception as exc:  # msgpack raises ValueError, TypeError, StackError, ... for bad input
        raise ValueError(f"undecodable batch of forwards: {type(exc).__name__}") from None
    if type(epoch) is not int or type(low) is not int or type(flat) is not list or len(flat) % 2:
        raise ValueError("a batch of forwards is [epoch, low, [number, publish, ...]]")
    entries = list(zip(flat[::2], flat[1::2], strict=True))
    for seq, _record in entries:
        if type(seq) is not int or seq < 0:
            raise ValueError("a forward's number is an integer, 0 or more")
    return epoch, low, entries


__all__ = [
    "BATCH_OVERHEAD", "ENTRY_OVERHEAD", "ForwardReceiver", "ForwardSender", "new_epoch", "pack_batch", "unpack_batch",
]
