"""What a run measured: each publisher's and subscriber's accounting, and `summarize`, which combines them into
one `RunResult` with rates, losses and latency percentiles (pure).

Acknowledged-but-lost = messages the broker PUBACKed to the publisher that the subscriber never received by the
end of the drain. Lost = sent messages never received (for QoS 0 the broker may drop them).

Fixed-rate runs (`schedule`) add: the target rate, behind (messages due before the end of the window that their
publisher never sent: the rate was not reached), the publishers' timer lag (how late the load generator itself
woke up for a due message: a floor under every latency it reports), and p99.9 and max latency.
"""

from __future__ import annotations

import array
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


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
    behind: int = 0  # fixed rate: messages due before the end of the window and never sent
    send_lags: bytes = b""  # fixed rate: array('q') of ns, how late the publisher woke up for a due message


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
    target_rate: float | None = None  # fixed rate: msgs/s asked for (None: closed loop, as fast as the windows allow)
    p999_ms: float | None = None
    max_ms: float | None = None
    behind: int = 0  # fixed rate: messages due in the run that their publisher never sent
    lag_p99_ms: float | None = None  # fixed rate: p99 of the publishers' timer lag
    lag_max_ms: float | None = None

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


def latency_ms(sorted_ns: list[int] | array.array[int]) -> dict[str, float | None]:
    """p50, p99, p99.9 and max (nearest rank) in ms of ascending latencies in ns; None where there are none."""
    out: dict[str, float | None] = {}
    for name, p in (("p50_ms", 50.0), ("p99_ms", 99.0), ("p999_ms", 99.9), ("max_ms", 100.0)):
        v = percentile(sorted_ns, p)
        out[name] = None if v is None else v / 1e6
    return out


def summarize(scenario: str, qos: int, window_s: float, pubs: list[PubResult], subs: list[SubResult],
              sent_in_window: int = 0, loadgen_cpu: Iterable[float] = (), broker_cpu: float | None = None,
              machine_cpu: float | None = None, errors: Iterable[str] = (),
              target_rate: float | None = None) -> RunResult:
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
    lat = latency_ms(ordered)
    lags: array.array[int] = array.array("q")
    for p in pubs:
        lags.frombytes(p.send_lags)
    lag = latency_ms(sorted(lags))
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
        p50_ms=lat["p50_ms"], p99_ms=lat["p99_ms"],
        latency_samples=len(ordered), loadgen_cpu=list(loadgen_cpu), broker_cpu=broker_cpu,
        machine_cpu=machine_cpu, errors=errs, target_rate=target_rate, p999_ms=lat["p999_ms"],
        max_ms=lat["max_ms"], behind=sum(p.behind for p in pubs), lag_p99_ms=lag["p99_ms"],
        lag_max_ms=lag["max_ms"],
    )
