"""The load generator's MQTT clients: asyncio protocols on raw sockets, a publisher and a subscriber, sharing the
handshake (CONNECT, SUBSCRIBE with vmqpy's codec) and write flow control.

Publishers: QoS 0 floods (writes batches while the socket is writable, yields to the loop between batches, and
with a window keeps at most that many messages on their way); QoS 1 keeps a window of outstanding PUBLISHes and
sends one more per PUBACK. Subscribers acknowledge QoS 1 and account every delivery: duplicates, payloads not from
the load generator, and the latency from the send time in the payload. Both read the broker's stream with
`wire.split_frames`, once per read.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import time
from typing import Any

from bench.loadgen.results import PubResult, SubResult, count_set
from bench.loadgen.wire import (
    DISCONNECT,
    HEADER,
    PAD,
    PAYLOAD_SIZE,
    PID_HEADER,
    PUBACK,
    ClientError,
    build_qos0,
    publish_prefix,
    split_frames,
    vbi,
)
from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connack, Connect, Suback, SubOptions, Subscribe, Subscription

WRITE_HIGH_WATER = 64 * 1024
CONNECT_TIMEOUT = 10.0
MAX_LATENCIES = 4_000_000  # per subscriber process; beyond this, latencies are not recorded (counted still)
STALL_NS = 1_000_000_000  # QoS 0 window: no delivery for this long -> the messages on their way are written off
CREDIT_POLL = 0.0005  # QoS 0 window: how often a blocked publisher looks at the subscriber's counter


def monotonic_ns() -> int:
    return time.monotonic_ns()


class _Client(asyncio.Protocol):
    """Common part: connection, handshake packets (CONNACK, SUBACK), write flow control."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._buf = b""
        self._waiting: tuple[int, asyncio.Future[bytes]] | None = None
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[Exception | None] = self.loop.create_future()
        self.errors: list[str] = []
        self.other_packets = 0

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        if self._waiting is not None and not self._waiting[1].done():
            self._waiting[1].set_exception(ClientError(f"connection lost: {exc}"))
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def _wake(self) -> None:
        fut = self._resumed
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _control(self, first: int, body: bytes) -> None:
        """A packet the hot path does not handle."""
        w = self._waiting
        if w is not None and first >> 4 == w[0] and not w[1].done():
            w[1].set_result(bytes((first,)) + vbi(len(body)) + body)
        else:
            self.other_packets += 1

    def _take_frames(self, data: bytes) -> tuple[bytes, list[int]]:
        """The bytes not yet consumed with `data` appended, and their complete frames (`split_frames`); keeps the
        incomplete tail for the next read."""
        buf = self._buf + data if self._buf else data
        frames, used = split_frames(buf)
        self._buf = buf[used:] if used < len(buf) else b""
        return buf, frames

    def data_received(self, data: bytes) -> None:
        buf, frames = self._take_frames(data)
        it = iter(frames)
        for first, h, end in zip(it, it, it, strict=True):
            self._control(first, buf[h:end])

    # handshake
    async def request(self, packet_bytes: bytes, answer_type: int, timeout: float) -> Any:
        if self.transport is None or self.transport.is_closing():
            raise ClientError("not connected")
        fut: asyncio.Future[bytes] = self.loop.create_future()
        self._waiting = (answer_type, fut)
        self.transport.write(packet_bytes)
        try:
            raw = await asyncio.wait_for(fut, timeout)
        finally:
            self._waiting = None
        dec = Decoder(server=False, protocol_level=4)
        dec.receive_data(raw)
        packet = dec.next_packet()
        if packet is NEED_DATA:
            raise ClientError("truncated answer")
        return packet

    async def connect(self, client_id: str, timeout: float = CONNECT_TIMEOUT) -> None:
        connack = await self.request(encode(Connect(client_id, protocol_level=4, clean_start=True, keep_alive=0), 4),
                                     2, timeout)
        if not isinstance(connack, Connack) or connack.reason_code != 0:
            raise ClientError(f"CONNECT refused: {connack!r}")

    async def subscribe(self, topic_filter: str, qos: int, timeout: float = CONNECT_TIMEOUT) -> None:
        sub = Subscribe(1, [Subscription(topic_filter, SubOptions(qos=qos))])
        suback = await self.request(encode(sub, 4), 9, timeout)
        if not isinstance(suback, Suback) or suback.reason_codes[0] != qos:
            raise ClientError(f"SUBSCRIBE {topic_filter!r} QoS {qos} answered {suback!r}")

    async def wait_writable(self, deadline_ns: int) -> bool:
        """Wait until the transport is writable; False at the deadline or if the connection is gone."""
        while self._paused and not self.closed.done():
            remaining = (deadline_ns - monotonic_ns()) / 1e9
            if remaining <= 0:
                return False
            self._resumed = self.loop.create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resumed, remaining)
            self._resumed = None
        return not self.closed.done()

    def disconnect(self) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            with contextlib.suppress(Exception):
                t.write(DISCONNECT)
            t.close()



class Publisher(_Client):
    def __init__(self, pub_id: int, topic: str, qos: int, window: int = 20, batch: int = 32,
                 feedback: Any = None, slots: list[int] | None = None) -> None:
        """`window`: QoS 1, PUBLISHes awaiting PUBACK; QoS 0, messages sent after the last one the slowest of its
        subscribers received (`feedback[slot]` for each of `slots`, default `[pub_id]`, each shared with one
        subscriber: highest sequence number received + 1), 0 = no limit. Messages the broker dropped are skipped
        over as soon as a later one arrives."""
        super().__init__()
        if qos not in (0, 1):
            raise ValueError("qos must be 0 or 1")
        if not (0 if qos == 0 else 1) <= window <= 65535:
            raise ValueError("window must be in 1..65535 (QoS 0: 0..65535, 0 = no limit)")
        if qos == 0 and window and feedback is None:
            raise ValueError("a QoS 0 window needs the feedback counters")
        self.pub_id = pub_id
        self.topic = topic
        self.qos = qos
        self.window = window
        self.batch = max(1, min(batch, window)) if qos == 0 and window else batch
        self.feedback = feedback
        self.slots = list(slots) if slots else [pub_id]
        self.floor = 0  # QoS 0: messages before this one are no longer waited for (set after a stall)
        self.stalls = 0
        self.prefix = publish_prefix(topic, qos)
        self.sent = 0
        self.sent_in_window = 0
        self.acked = 0
        self.acked_map = bytearray(4096)
        self.outstanding = 0
        self.unexpected_acks = 0
        self.running = False
        self.w0 = 0
        self._pid_seq = [-1] * 65536
        self._next_pid = 1
        self.idle: asyncio.Future[None] = self.loop.create_future()

    def result(self) -> PubResult:
        return PubResult(self.pub_id, self.qos, self.sent, self.acked, bytes(self.acked_map[: self.sent]),
                         self.unexpected_acks, self.outstanding, self.stalls, list(self.errors))

    # QoS 0: a task that sends while writable and (with a window) while fewer than `window` messages were sent
    # after the last one received; if nothing arrives for STALL_NS, the ones on their way are given up on.
    async def flood(self, t_end: int) -> None:
        batch = self.batch
        prefix = self.prefix
        pub_id = self.pub_id
        w0 = self.w0
        window = self.window
        fb = self.feedback
        slot = self.slots[0] if len(self.slots) == 1 else -1
        slots = self.slots
        stall_since = 0
        last_received = -1
        for _ in range(1 << 40):  # bounded by t_end below
            now = monotonic_ns()
            if now >= t_end:
                break
            if self._paused and not await self.wait_writable(t_end):
                break
            if window:
                received = fb[slot] if slot >= 0 else min(fb[i] for i in slots)
                if self.sent - max(received, self.floor) + batch > window:
                    if received != last_received:
                        last_received = received
                        stall_since = now
                    elif now - stall_since > STALL_NS:
                        self.floor = self.sent
                        self.stalls += 1
                        stall_since = now
                        continue
                    await asyncio.sleep(CREDIT_POLL)
                    continue
            t = self.transport
            if t is None or t.is_closing():
                self.errors.append("connection closed while publishing")
                break
            t.write(build_qos0(prefix, pub_id, self.sent, batch, now))
            self.sent += batch
            if now >= w0:
                self.sent_in_window += batch
            await asyncio.sleep(0)

    # QoS 1: window of outstanding messages, one more per PUBACK (from data_received)
    def start_window(self) -> None:
        self.running = True
        self._send_q1(self.window)

    def stop(self) -> None:
        self.running = False
        if self.outstanding == 0 and not self.idle.done():
            self.idle.set_result(None)

    def _send_q1(self, k: int) -> None:
        self._write_q1(k, None)

    def _write_q1(self, k: int, stamps: list[int] | None) -> None:
        """Send k QoS 1 PUBLISHes stamped with the time now, or with `stamps` (one per message, fixed rate)."""
        t = self.transport
        if t is None or t.is_closing() or k <= 0:
            return
        ts = monotonic_ns()
        seq = self.sent
        acked_map = self.acked_map
        if seq + k > len(acked_map):
            acked_map.extend(bytes(max(len(acked_map), k)))
        pid_seq = self._pid_seq
        pid = self._next_pid
        pack = PID_HEADER.pack
        prefix = self.prefix
        parts = []
        for i in range(k):
            for _ in range(65535):  # skip identifiers still in flight (at most `window` of them)
                if pid_seq[pid] < 0:
                    break
                pid = pid % 65535 + 1
            pid_seq[pid] = seq
            parts.append(prefix + pack(pid, self.pub_id, seq, ts if stamps is None else stamps[i]) + PAD)
            seq += 1
            pid = pid % 65535 + 1
        self._next_pid = pid
        self.outstanding += k
        if stamps is not None:
            w0 = self.w0
            self.sent_in_window += sum(1 for x in stamps if x >= w0)
        elif ts >= self.w0:
            self.sent_in_window += k
        self.sent = seq
        t.write(b"".join(parts))

    def data_received(self, data: bytes) -> None:
        buf, frames = self._take_frames(data)
        freed = 0
        pid_seq = self._pid_seq
        acked_map = self.acked_map
        it = iter(frames)
        for first, h, end in zip(it, it, it, strict=True):
            if first == PUBACK and end - h >= 2:
                pid = (buf[h] << 8) | buf[h + 1]
                seq = pid_seq[pid]
                if seq < 0:
                    self.unexpected_acks += 1
                else:
                    pid_seq[pid] = -1
                    acked_map[seq] = 1
                    freed += 1
            else:
                self._control(first, buf[h:end])
        if freed:
            self.acked += freed
            self.outstanding -= freed
            if self.running:
                self._send_q1(freed)
            elif self.outstanding == 0 and not self.idle.done():
                self.idle.set_result(None)


class Subscriber(_Client):
    def __init__(self, sub_id: int, topic_filter: str, qos: int, sources: list[int], feedback: Any = None,
                 slot: int | None = None) -> None:
        """`feedback`: shared counters, indexed by publisher id or, with `slot` (a subscriber of a publisher that
        has several), at `slot` for its one source; after every read the subscriber stores there, per source, the
        highest sequence number received + 1."""
        super().__init__()
        self.sub_id = sub_id
        self.topic_filter = topic_filter
        self.qos = qos
        self.sources = sources
        if slot is not None and len(sources) != 1:
            raise ValueError("a feedback slot is for a subscriber of one source")
        self.slots = [(src, src if slot is None else slot) for src in sources]
        self.w0 = 1 << 62  # window: set by the run
        self.w1 = 1 << 62
        self.delivered = 0
        self.in_window = 0
        self.dups = 0
        self.malformed = 0
        self.last_delivery = 0
        self.seen: dict[int, bytearray] = {}
        self.latencies: array.array[int] = array.array("q")
        self.latencies_dropped = 0
        self.feedback = feedback
        self.by_due_time = False  # fixed rate: latencies of the messages due in the window (`schedule.in_window`)
        self.next_seq = [0] * (max(sources) + 1 if sources else 0)  # per source: highest seq received + 1

    def result(self) -> SubResult:
        return SubResult(self.sub_id, list(self.sources), self.delivered, self.in_window, self.dups, self.malformed,
                         {k: bytes(v) for k, v in self.seen.items()}, self.latencies.tobytes(),
                         self.latencies_dropped, list(self.errors))

    def complete(self, expected: dict[int, int]) -> bool:
        """Every message the sources sent (per `expected`: publisher id -> sent count) has arrived."""
        for src in self.sources:
            want = expected.get(src, 0)
            if want and count_set(self.seen.get(src, b"")[:want]) < want:
                return False
        return True

    def data_received(self, data: bytes) -> None:
        now = monotonic_ns()
        buf, frames = self._take_frames(data)
        seen = self.seen
        unpack = HEADER.unpack_from
        w0 = self.w0
        w1 = self.w1
        by_due = self.by_due_time
        received_in_window = w0 <= now <= w1
        record = by_due or received_in_window
        lat: list[int] = []
        pids: list[bytes] = []
        count = 0
        next_seq = self.next_seq
        n_src = len(next_seq)
        it = iter(frames)
        for first, h, end in zip(it, it, it, strict=True):
            if first & 0xF0 == 0x30:
                p = h + 2 + ((buf[h] << 8) | buf[h + 1])
                if first & 0x06:
                    pids.append(buf[p : p + 2])
                    p += 2
                count += 1
                if end - p != PAYLOAD_SIZE:
                    self.malformed += 1
                else:
                    pub_id, seq, ts = unpack(buf, p)
                    if pub_id < n_src and seq >= next_seq[pub_id]:
                        next_seq[pub_id] = seq + 1
                    arr = seen.get(pub_id)
                    if arr is None:
                        arr = seen[pub_id] = bytearray(4096)
                    if seq >= len(arr):
                        arr.extend(bytes(max(seq + 1 - len(arr), len(arr))))
                    if arr[seq]:
                        self.dups += 1
                    else:
                        arr[seq] = 1
                    if by_due:
                        if w0 <= ts < w1:  # schedule.in_window, inlined on the hot path
                            lat.append(now - ts)
                    elif record:
                        lat.append(now - ts)
            else:
                self._control(first, buf[h:end])
        if pids and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"\x40\x02" + b"\x40\x02".join(pids))
        if count:
            self.delivered += count
            self.last_delivery = now
            fb = self.feedback
            if fb is not None:
                for src, i in self.slots:
                    fb[i] = next_seq[src]
            if received_in_window:
                self.in_window += count
            if record:
                if len(self.latencies) < MAX_LATENCIES:
                    self.latencies.extend(lat)
                else:
                    self.latencies_dropped += len(lat)


