"""MQTT 3.1.1 load generator on raw asyncio sockets (uvloop), for `bench.compare`.

Shapes (see `Scenario`): N publisher/subscriber pairs, each pair on its own topic, or M publishers on distinct
topics and one subscriber on a `+` wildcard. Every PUBLISH carries a 64-byte payload whose first 20 bytes are
`>IQQ`: publisher id, sequence number, send time (`time.monotonic_ns()`, CLOCK_MONOTONIC, comparable between
processes of one machine); the other 44 bytes are padding.

Publishers: QoS 0 floods (writes batches while the socket is writable, yields to the loop between batches);
QoS 1 keeps a window of outstanding PUBLISHes and sends one more per PUBACK. Subscribers acknowledge QoS 1.

Timeline of a run, driven by `run()` in the calling process over pipes to worker processes:
  connect and subscribe (subscribers first), all workers report ready
  t0 = now + 0.3 s       publishers start
  w0 = t0 + warmup       measurement window opens (deliveries and latencies count from here)
  w1 = w0 + duration     window closes, publishers stop sending; QoS 1 publishers wait for their PUBACKs
  drain                  subscribers wait until every sent message arrived, or the drain time is up
                         (QoS 0: also stop after 1 s without any delivery)
Acknowledged-but-lost = messages the broker PUBACKed to the publisher that the subscriber never received by the
end of the drain. Lost = sent messages never received (for QoS 0 the broker may drop them).

The hot paths use a minimal frame splitter of their own (PUBLISH and PUBACK only); CONNECT/SUBSCRIBE are
encoded and CONNACK/SUBACK decoded with vmqpy's codec. Every loop is bounded in count or time.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import math
import multiprocessing
import multiprocessing.connection
import os
import struct
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from vmqpy.mqtt.codec import NEED_DATA, Decoder, encode
from vmqpy.mqtt.packets import Connack, Connect, Suback, SubOptions, Subscribe, Subscription

PAYLOAD_SIZE = 64
HEADER = struct.Struct(">IQQ")  # publisher id, sequence number, send time in ns (time.monotonic_ns)
_PID_HEADER = struct.Struct(">HIQQ")  # packet identifier + HEADER, for QoS 1
PAD = bytes(range(PAYLOAD_SIZE - HEADER.size))
WRITE_HIGH_WATER = 64 * 1024
CONNECT_TIMEOUT = 10.0
READY_TIMEOUT = 60.0
QOS0_IDLE_DRAIN = 1.0  # a QoS 0 drain ends after this long without any delivery
MAX_LATENCIES = 4_000_000  # per subscriber process; beyond this, latencies are not recorded (counted still)
START_DELAY_NS = 300_000_000
STALL_NS = 1_000_000_000  # QoS 0 window: no delivery for this long -> the messages on their way are written off
CREDIT_POLL = 0.0005  # QoS 0 window: how often a blocked publisher looks at the subscriber's counter
_PUBACK = 0x40
_DISCONNECT = b"\xe0\x00"


def monotonic_ns() -> int:
    return time.monotonic_ns()


def machine_busy_seconds() -> float:
    """CPU seconds all processors of the machine spent busy since boot (/proc/stat: all but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0.0
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------ wire helpers


def vbi(n: int) -> bytes:
    """MQTT Variable Byte Integer."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"remaining length {n} out of range")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def publish_prefix(topic: str, qos: int) -> bytes:
    """Fixed header + topic of a PUBLISH with a PAYLOAD_SIZE payload (QoS 1: the packet id follows)."""
    t = topic.encode()
    if not t or len(t) > 0xFFFF or "+" in topic or "#" in topic:
        raise ValueError(f"bad topic {topic!r}")
    if qos not in (0, 1):
        raise ValueError("the load generator publishes QoS 0 or 1")
    rl = 2 + len(t) + (2 if qos else 0) + PAYLOAD_SIZE
    return bytes((0x30 | (qos << 1),)) + vbi(rl) + len(t).to_bytes(2, "big") + t


def build_qos0(prefix: bytes, pub_id: int, first_seq: int, count: int, ts: int) -> bytes:
    """`count` QoS 0 PUBLISH frames with sequence numbers first_seq.. and send time ts."""
    pack = HEADER.pack
    return b"".join([prefix + pack(pub_id, seq, ts) + PAD for seq in range(first_seq, first_seq + count)])


def payload(pub_id: int, seq: int, ts: int) -> bytes:
    return HEADER.pack(pub_id, seq, ts) + PAD


# ------------------------------------------------------------------------------------------------ accounting


def mark(arr: bytearray, seq: int) -> bool:
    """Set arr[seq] = 1, growing arr; True if it was not set before."""
    if seq >= len(arr):
        arr.extend(bytes(max(seq + 1 - len(arr), len(arr), 1024)))
    if arr[seq]:
        return False
    arr[seq] = 1
    return True


def count_set(arr: bytes | bytearray) -> int:
    return arr.count(1)


def acked_not_delivered(acked: bytes | bytearray, delivered: bytes | bytearray) -> int:
    """How many sequence numbers are set in `acked` (0/1 bytes) and not in `delivered`."""
    n = len(acked)
    d = bytes(delivered[:n]).ljust(n, b"\x00")
    a = int.from_bytes(acked, "little")
    b = int.from_bytes(d, "little")
    return (a & ~b).bit_count()


def percentile(sorted_values: list[int] | array.array[int], p: float) -> int | None:
    """Nearest-rank percentile (p in 0..100) of an ascending sequence; None if empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    k = min(n, max(1, math.ceil(p * n / 100)))
    return int(sorted_values[k - 1])


@dataclass
class PubResult:
    pub_id: int
    qos: int
    sent: int = 0
    acked: int = 0
    acked_map: bytes = b""  # 0/1 per sequence number (QoS 1)
    unexpected_acks: int = 0
    unacked: int = 0
    stalls: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class SubResult:
    sub_id: int
    sources: list[int]
    delivered: int = 0  # every PUBLISH received, duplicates included
    in_window: int = 0  # received during the measurement window
    dups: int = 0
    malformed: int = 0
    seen: dict[int, bytes] = field(default_factory=dict)  # publisher id -> 0/1 per sequence number
    latencies: bytes = b""  # array('q') of ns, deliveries in the window
    latencies_dropped: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class RunResult:
    scenario: str
    qos: int
    window_s: float
    sent: int
    sent_in_window: int
    delivered_in_window: int
    delivered_total: int
    unique_delivered: int
    expected: int  # deliveries the subscribers should see if nothing were lost
    acked: int
    acked_lost: int
    lost: int  # expected deliveries of sent messages that never arrived (acked or not)
    unacked: int
    dups: int
    stalls: int  # QoS 0 window: times a publisher gave up waiting (nothing arrived for STALL_NS)
    p50_ms: float | None
    p99_ms: float | None
    latency_samples: int
    loadgen_cpu: list[float]  # % of one core per worker process, during the window
    broker_cpu: float | None  # % of one core, during the window (if a probe was given)
    machine_cpu: float | None  # % of one core used by all processes of the machine during the window
    errors: list[str]

    @property
    def rate(self) -> float:
        return self.delivered_in_window / self.window_s if self.window_s else 0.0

    @property
    def sent_rate(self) -> float:
        return self.sent_in_window / self.window_s if self.window_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rate"] = self.rate
        d["sent_rate"] = self.sent_rate
        return d


def summarize(scenario: str, qos: int, window_s: float, pubs: list[PubResult], subs: list[SubResult],
              sent_in_window: int = 0, loadgen_cpu: Iterable[float] = (), broker_cpu: float | None = None,
              machine_cpu: float | None = None, errors: Iterable[str] = ()) -> RunResult:
    """Combine the publishers' and subscribers' accounting of one run (pure; unit-tested)."""
    by_id = {p.pub_id: p for p in pubs}
    expected = acked_lost = lost = unique = 0
    for s in subs:
        for src in s.sources:
            p = by_id.get(src)
            if p is None:
                continue
            seen = s.seen.get(src, b"")
            expected += p.sent
            got = count_set(seen[: p.sent])
            unique += got
            lost += p.sent - got
            if p.qos:
                acked_lost += acked_not_delivered(p.acked_map, seen)
    lats: array.array[int] = array.array("q")
    for s in subs:
        lats.frombytes(s.latencies)
    ordered = sorted(lats)
    p50 = percentile(ordered, 50)
    p99 = percentile(ordered, 99)
    errs = list(errors)
    for p in pubs:
        errs += [f"pub {p.pub_id}: {e}" for e in p.errors]
        if p.unexpected_acks:
            errs.append(f"pub {p.pub_id}: {p.unexpected_acks} PUBACKs for packet ids not in flight")
    for s in subs:
        errs += [f"sub {s.sub_id}: {e}" for e in s.errors]
        if s.malformed:
            errs.append(f"sub {s.sub_id}: {s.malformed} PUBLISH payloads not from the load generator")
        if s.latencies_dropped:
            errs.append(f"sub {s.sub_id}: {s.latencies_dropped} latencies not recorded (cap)")
    return RunResult(
        scenario=scenario, qos=qos, window_s=window_s,
        sent=sum(p.sent for p in pubs), sent_in_window=sent_in_window,
        delivered_in_window=sum(s.in_window for s in subs),
        delivered_total=sum(s.delivered for s in subs), unique_delivered=unique, expected=expected,
        acked=sum(p.acked for p in pubs), acked_lost=acked_lost, lost=lost,
        unacked=sum(p.unacked for p in pubs), dups=sum(s.dups for s in subs), stalls=sum(p.stalls for p in pubs),
        p50_ms=None if p50 is None else p50 / 1e6, p99_ms=None if p99 is None else p99 / 1e6,
        latency_samples=len(ordered), loadgen_cpu=list(loadgen_cpu), broker_cpu=broker_cpu,
        machine_cpu=machine_cpu, errors=errs,
    )


# ------------------------------------------------------------------------------------------------ clients


class ClientError(Exception):
    pass


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

    def _split(self, data: bytes) -> None:
        """Slow path frame splitter (handshake only)."""
        buf = self._buf + data if self._buf else data
        i = 0
        n = len(buf)
        while n - i >= 2:
            h, rl = _header(buf, i, n)
            if h < 0 or h + rl > n:
                break
            self._control(buf[i], buf[h : h + rl])
            i = h + rl
        self._buf = buf[i:] if i < n else b""

    def data_received(self, data: bytes) -> None:
        self._split(data)

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
                t.write(_DISCONNECT)
            t.close()


def _header(buf: bytes, i: int, n: int) -> tuple[int, int]:
    """(start of the body, remaining length) of the frame at buf[i], or (-1, 0) if its header is incomplete."""
    rl = 0
    shift = 0
    j = i + 1
    for _ in range(4):
        if j >= n:
            return -1, 0
        byte = buf[j]
        j += 1
        rl |= (byte & 0x7F) << shift
        if byte < 0x80:
            return j, rl
        shift += 7
    raise ClientError("malformed remaining length from the broker")


class Publisher(_Client):
    def __init__(self, pub_id: int, topic: str, qos: int, window: int = 20, batch: int = 32,
                 feedback: Any = None) -> None:
        """`window`: QoS 1, PUBLISHes awaiting PUBACK; QoS 0, messages sent after the last one the subscriber
        received (`feedback[pub_id]`, shared with the subscriber: highest sequence number received + 1), 0 = no
        limit. Messages the broker dropped are skipped over as soon as a later one arrives."""
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
        stall_since = 0
        last_received = -1
        for _ in range(1 << 40):  # bounded by t_end below
            now = monotonic_ns()
            if now >= t_end:
                break
            if self._paused and not await self.wait_writable(t_end):
                break
            if window:
                received = fb[pub_id]
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
        pack = _PID_HEADER.pack
        prefix = self.prefix
        parts = []
        for _ in range(k):
            for _ in range(65535):  # skip identifiers still in flight (at most `window` of them)
                if pid_seq[pid] < 0:
                    break
                pid = pid % 65535 + 1
            pid_seq[pid] = seq
            parts.append(prefix + pack(pid, self.pub_id, seq, ts) + PAD)
            seq += 1
            pid = pid % 65535 + 1
        self._next_pid = pid
        self.outstanding += k
        if ts >= self.w0:
            self.sent_in_window += k
        self.sent = seq
        t.write(b"".join(parts))

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        n = len(buf)
        i = 0
        freed = 0
        pid_seq = self._pid_seq
        acked_map = self.acked_map
        while n - i >= 2:
            first = buf[i]
            rl = buf[i + 1]
            if rl < 0x80:
                h = i + 2
            else:
                h, rl = _header(buf, i, n)
                if h < 0:
                    break
            end = h + rl
            if end > n:
                break
            if first == _PUBACK and rl >= 2:
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
            i = end
        self._buf = buf[i:] if i < n else b""
        if freed:
            self.acked += freed
            self.outstanding -= freed
            if self.running:
                self._send_q1(freed)
            elif self.outstanding == 0 and not self.idle.done():
                self.idle.set_result(None)


class Subscriber(_Client):
    def __init__(self, sub_id: int, topic_filter: str, qos: int, sources: list[int], feedback: Any = None) -> None:
        """`feedback`: shared counters indexed by publisher id; after every read the subscriber stores there,
        per source, the highest sequence number received + 1."""
        super().__init__()
        self.sub_id = sub_id
        self.topic_filter = topic_filter
        self.qos = qos
        self.sources = sources
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
        buf = self._buf + data if self._buf else data
        n = len(buf)
        i = 0
        seen = self.seen
        unpack = HEADER.unpack_from
        record = self.w0 <= now <= self.w1
        lat: list[int] = []
        pids: list[bytes] = []
        count = 0
        next_seq = self.next_seq
        n_src = len(next_seq)
        while n - i >= 2:
            first = buf[i]
            rl = buf[i + 1]
            if rl < 0x80:
                h = i + 2
            else:
                h, rl = _header(buf, i, n)
                if h < 0:
                    break
            end = h + rl
            if end > n:
                break
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
                    if record:
                        lat.append(now - ts)
            else:
                self._control(first, buf[h:end])
            i = end
        self._buf = buf[i:] if i < n else b""
        if pids and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"\x40\x02" + b"\x40\x02".join(pids))
        if count:
            self.delivered += count
            self.last_delivery = now
            fb = self.feedback
            if fb is not None:
                for src in self.sources:
                    fb[src] = next_seq[src]
            if record:
                self.in_window += count
                if len(self.latencies) < MAX_LATENCIES:
                    self.latencies.extend(lat)
                else:
                    self.latencies_dropped += len(lat)


# ------------------------------------------------------------------------------------------------ scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    shape: str  # "pairs" or "fanin"
    clients: int  # pairs, or fan-in publishers
    qos: int
    window: int = 20  # QoS 1: PUBLISHes awaiting PUBACK per publisher
    qos0_window: int = 200  # QoS 0: messages on their way per publisher (0 = flood, no limit)
    batch: int = 32  # QoS 0 messages per write

    def __post_init__(self) -> None:
        if self.shape not in ("pairs", "fanin"):
            raise ValueError(f"unknown shape {self.shape!r}")
        if self.clients < 1 or self.qos not in (0, 1):
            raise ValueError("need at least one client and QoS 0 or 1")

    def plan(self, tag: str, procs: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
        """Clients per worker process: [(publisher specs, subscriber specs)], topics under `tag`.

        Pairs: pair k (its publisher and its subscriber) runs in process k % procs. Fan-in: the subscriber runs
        in process 0 and the publishers round-robin in the others (in process 0 too if procs == 1).
        """
        procs = max(1, procs)
        out: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = [([], []) for _ in range(procs)]
        short = tag.rsplit("/", 1)[-1]
        window = self.window if self.qos else self.qos0_window

        def pub(i: int, topic: str) -> dict[str, Any]:
            return {"pub_id": i, "topic": topic, "qos": self.qos, "window": window, "batch": self.batch,
                    "client_id": f"b{short}p{i}"}

        if self.shape == "pairs":
            for i in range(self.clients):
                topic = f"{tag}/pair/{i}"
                out[i % procs][0].append(pub(i, topic))
                out[i % procs][1].append({"sub_id": i, "filter": topic, "qos": self.qos, "sources": [i],
                                          "client_id": f"b{short}s{i}"})
        else:
            out[0][1].append({"sub_id": 0, "filter": f"{tag}/fanin/+", "qos": self.qos,
                              "sources": list(range(self.clients)), "client_id": f"b{short}s0"})
            for i in range(self.clients):
                out[1 + i % (procs - 1) if procs > 1 else 0][0].append(pub(i, f"{tag}/fanin/{i}"))
        return [w for w in out if w[0] or w[1]]


def default_scenarios(pairs: int = 10, fanin: int = 10, qos0_window: int = 200) -> list[Scenario]:
    return [
        Scenario(f"qos0-pairs{pairs}", "pairs", pairs, 0, qos0_window=qos0_window),
        Scenario(f"qos1-pairs{pairs}", "pairs", pairs, 1),
        Scenario(f"qos1-fanin{fanin}", "fanin", fanin, 1),
    ]


# ------------------------------------------------------------------------------------------------ worker


async def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - monotonic_ns()) / 1e9
    if delay > 0:
        await asyncio.sleep(delay)


async def _worker_async(conn: multiprocessing.connection.Connection, host: str, port: int,
                        pub_specs: list[dict[str, Any]], sub_specs: list[dict[str, Any]], feedback: Any,
                        sub_addr: tuple[str, int] | None = None) -> None:
    loop = asyncio.get_running_loop()
    sub_host, sub_port = sub_addr if sub_addr is not None else (host, port)

    async def recv(timeout: float) -> Any:
        ready = await loop.run_in_executor(None, conn.poll, timeout)
        if not ready:
            raise TimeoutError("no command from the controller")
        return conn.recv()

    subs: list[Subscriber] = []
    pubs: list[Publisher] = []
    try:
        for s in sub_specs:
            _, sub = await asyncio.wait_for(loop.create_connection(
                lambda s=s: Subscriber(s["sub_id"], s["filter"], s["qos"], s["sources"], feedback), sub_host, sub_port),
                CONNECT_TIMEOUT)
            subs.append(sub)
            await sub.connect(s["client_id"])
            await sub.subscribe(s["filter"], s["qos"])
        for p in pub_specs:
            _, pub = await asyncio.wait_for(loop.create_connection(
                lambda p=p: Publisher(p["pub_id"], p["topic"], p["qos"], p["window"], p["batch"], feedback),
                host, port), CONNECT_TIMEOUT)
            pubs.append(pub)
            await pub.connect(p["client_id"])
        conn.send(("ready", os.getpid()))
        cmd, t0, w0, w1, drain_s = await recv(READY_TIMEOUT)
        if cmd != "start":
            raise ClientError(f"unexpected command {cmd!r}")
        for sub in subs:
            sub.w0, sub.w1 = w0, w1
        for pub in pubs:
            pub.w0 = w0
        await _sleep_until(t0)
        floods = [asyncio.ensure_future(pub.flood(w1)) for pub in pubs if pub.qos == 0]
        for pub in pubs:
            if pub.qos == 1:
                pub.start_window()
        await _sleep_until(w0)
        cpu0 = time.process_time()
        await _sleep_until(w1)
        cpu1 = time.process_time()
        cpu = 100.0 * (cpu1 - cpu0) / ((w1 - w0) / 1e9)
        for pub in pubs:
            pub.stop()
        drain_end = w1 + int(drain_s * 1e9)
        if floods:
            await asyncio.wait(floods, timeout=max(0.1, (drain_end - monotonic_ns()) / 1e9))
            for f in floods:
                if f.done() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        waits = [pub.idle for pub in pubs if pub.qos == 1]
        if waits:
            await asyncio.wait(waits, timeout=max(0.1, (drain_end - monotonic_ns()) / 1e9))
        conn.send(("pubs_done", [pub.result() for pub in pubs], sum(pub.sent_in_window for pub in pubs)))
        cmd, expected = await recv(READY_TIMEOUT + drain_s)
        if cmd != "expected":
            raise ClientError(f"unexpected command {cmd!r}")
        sub_deadline = max(drain_end, monotonic_ns() + 500_000_000)
        for _ in range(1 << 30):  # bounded by sub_deadline
            if all(sub.complete(expected) for sub in subs):
                break
            now = monotonic_ns()
            if now >= sub_deadline:
                break
            if subs and all(sub.qos == 0 for sub in subs):
                last = max([sub.last_delivery for sub in subs] + [w1])
                if now - last > QOS0_IDLE_DRAIN * 1e9:
                    break
            await asyncio.sleep(0.02)
        for c in [*pubs, *subs]:
            if c.closed.done():
                c.errors.append(f"connection closed by the broker: {c.closed.result()!r}")
        conn.send(("result", [sub.result() for sub in subs], cpu))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
        raise
    finally:
        for c in [*pubs, *subs]:
            c.disconnect()
        await asyncio.sleep(0.05)


def _worker(conn: multiprocessing.connection.Connection, host: str, port: int, pub_specs: list[dict[str, Any]],
            sub_specs: list[dict[str, Any]], feedback: Any, sub_addr: tuple[str, int] | None = None) -> None:
    import uvloop

    try:
        uvloop.run(_worker_async(conn, host, port, pub_specs, sub_specs, feedback, sub_addr))
    except BaseException:
        os._exit(1)
    os._exit(0)


# ------------------------------------------------------------------------------------------------ controller

_tags = iter(range(1, 1 << 30))


def _recv_all(conns: list[multiprocessing.connection.Connection], expect: str, deadline: float) -> list[Any]:
    """One message of kind `expect` from every connection, by the monotonic `deadline`."""
    got: dict[int, Any] = {}
    for _ in range(100_000):  # bounded by the deadline
        if len(got) == len(conns):
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"workers did not report {expect!r} in time ({len(got)}/{len(conns)})")
        for c in multiprocessing.connection.wait([c for i, c in enumerate(conns) if i not in got], remaining):
            i = conns.index(c)  # type: ignore[arg-type]
            try:
                msg = c.recv()  # type: ignore[union-attr]
            except EOFError as e:
                raise RuntimeError(f"load generator worker {i} exited without reporting {expect!r}") from e
            if msg[0] == "error":
                raise RuntimeError(f"load generator worker {i} failed:\n{msg[1]}")
            if msg[0] != expect:
                raise RuntimeError(f"worker {i} sent {msg[0]!r}, expected {expect!r}")
            got[i] = msg
    return [got[i] for i in range(len(conns))]


def run(host: str, port: int, scenario: Scenario, duration: float = 5.0, warmup: float = 1.0, drain: float = 5.0,
        procs: int = 2, probe: Callable[[], float] | None = None,
        sub_addr: tuple[str, int] | None = None) -> RunResult:
    """One run of `scenario` against the broker at host:port, with its clients in `procs` worker processes.

    `probe`, if given, returns the broker's CPU seconds; it is read at the start and at the end of the window.
    `sub_addr`, if given, is where the subscribers connect (another node of a cluster); publishers use host:port.
    Worker processes are started with the "spawn" method: a script calling this needs the
    `if __name__ == "__main__":` guard.
    """
    if duration <= 0 or warmup < 0 or drain < 0:
        raise ValueError("duration must be > 0, warmup and drain >= 0")
    tag = f"bench/{os.getpid()}x{next(_tags)}"
    plan = scenario.plan(tag, procs)
    ctx = multiprocessing.get_context("spawn")
    feedback = ctx.RawArray("q", scenario.clients)  # per publisher: messages its subscriber received
    workers = []
    conns: list[multiprocessing.connection.Connection] = []
    try:
        for pubs, subs in plan:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, host, port, pubs, subs, feedback, sub_addr), daemon=True)
            proc.start()
            child.close()
            workers.append(proc)
            conns.append(parent)
        _recv_all(conns, "ready", time.monotonic() + READY_TIMEOUT)
        t0 = monotonic_ns() + START_DELAY_NS
        w0 = t0 + int(warmup * 1e9)
        w1 = w0 + int(duration * 1e9)
        for c in conns:
            c.send(("start", t0, w0, w1, drain))
        time.sleep(max(0.0, (w0 - monotonic_ns()) / 1e9))
        b0 = probe() if probe is not None else 0.0
        m0 = machine_busy_seconds()
        time.sleep(max(0.0, (w1 - monotonic_ns()) / 1e9))
        b1 = probe() if probe is not None else 0.0
        m1 = machine_busy_seconds()
        broker_cpu = 100.0 * (b1 - b0) / duration if probe is not None else None
        machine_cpu = 100.0 * (m1 - m0) / duration
        done = _recv_all(conns, "pubs_done", time.monotonic() + warmup + duration + drain + 30)
        pub_results: list[PubResult] = [r for msg in done for r in msg[1]]
        sent_in_window = sum(msg[2] for msg in done)
        expected = {r.pub_id: r.sent for r in pub_results}
        for c in conns:
            c.send(("expected", expected))
        final = _recv_all(conns, "result", time.monotonic() + drain + 30)
        sub_results: list[SubResult] = [r for msg in final for r in msg[1]]
        cpus = [msg[2] for msg in final]
        return summarize(scenario.name, scenario.qos, duration, pub_results, sub_results, sent_in_window, cpus,
                         broker_cpu, machine_cpu)
    finally:
        for c in conns:
            c.close()
        for proc in workers:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()  # SIGTERM to this worker's PID
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.loadgen --port P [...]`: one run against a broker that is already running; JSON out."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="one load generator run against a running MQTT broker")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--shape", choices=["pairs", "fanin"], default="pairs")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--qos", type=int, choices=[0, 1], default=0)
    ap.add_argument("--window", type=int, default=20, help="QoS 1 PUBLISHes awaiting PUBACK per publisher")
    ap.add_argument("--qos0-window", type=int, default=200, help="QoS 0 messages on their way (0 = flood)")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--drain", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args(argv)
    sc = Scenario(f"qos{args.qos}-{args.shape}{args.clients}", args.shape, args.clients, args.qos, args.window,
                  args.qos0_window)
    res = run(args.host, args.port, sc, args.duration, args.warmup, args.drain, args.procs)
    out = res.to_dict()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
