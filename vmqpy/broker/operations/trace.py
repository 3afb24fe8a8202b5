"""`vmq-admin trace client client-id=ID`: the packets of one client, as lines a person reads, bounded in rate
and in time. Sans-I/O: the connection driver reports packets (`Trace.packet`), the admin API takes the lines
(`Trace.take`) and streams them to the terminal.

A trace follows every connection of its client id on this node, those connected when it starts and those
that connect while it runs (the CONNECT that starts them is the first line). It ends when its time is up,
when it is stopped (the operator's terminal goes away), or when the client sends or receives more than
`rate_max` packets within `rate_interval` seconds: a trace must never become a load of its own (VerneMQ's
tracer stops the same way). Passwords are never shown; payloads are cut to `payload_limit` bytes.

Lines wait in a bounded buffer until the API takes them; when the reader is slower than the client, the
lines beyond `BUFFER_LINES` are counted and the count is written once the reader catches up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from vmqpy.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)

BUFFER_LINES = 1000  # lines held for a reader that is behind
RECEIVED = "in"  # from the client
SENT = "out"  # to the client


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """What an operator asks of a trace (VerneMQ's option names: rate-max, rate-interval, trunc-payload,
    stop-after)."""

    client_id: str
    rate_max: int = 10  # packets ...
    rate_interval: float = 0.1  # ... per this many seconds, at most; more stops the trace
    payload_limit: int = 200  # bytes of a payload shown
    stop_after: float = 60.0  # seconds the trace runs at most


def payload_text(payload: bytes, limit: int) -> str:
    """A payload as a person reads it: text when it is UTF-8 without control characters, else hex; at most
    `limit` bytes, with how many more there were."""
    shown = payload[:limit]
    more = f" (+{len(payload) - limit} bytes)" if len(payload) > limit else ""
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + shown.hex() + more
    if any(ord(ch) < 32 and ch not in "\t" for ch in text):
        return "0x" + shown.hex() + more
    return repr(text) + more


def describe(packet: Packet | object, payload_limit: int) -> str:
    """One packet, without anything secret: its type and the fields an operator looks at."""
    if isinstance(packet, Publish):
        flags = f"d{int(packet.dup)} q{packet.qos} r{int(packet.retain)}"
        pid = f" id={packet.packet_id}" if packet.packet_id is not None else ""
        return f"PUBLISH({flags}{pid}) topic={packet.topic!r} payload={payload_text(packet.payload, payload_limit)}"
    if isinstance(packet, Connect):
        will = ""
        if packet.will is not None:
            will = f" will=(topic={packet.will.topic!r} q{packet.will.qos} r{int(packet.will.retain)})"
        user = f" user={packet.username!r}" if packet.username is not None else ""
        password = " password=(hidden)" if packet.password is not None else ""
        expiry = packet.properties.session_expiry_interval
        session = f" session_expiry={expiry}" if expiry is not None else ""
        return (f"CONNECT(v{packet.protocol_level}) client_id={packet.client_id!r} "
                f"clean_start={int(packet.clean_start)} keep_alive={packet.keep_alive}{session}{user}{password}{will}")
    if isinstance(packet, Connack):
        return f"CONNACK session_present={int(packet.session_present)} rc=0x{packet.reason_code:02x}"
    if isinstance(packet, Puback | Pubrec | Pubrel | Pubcomp):
        return f"{type(packet).__name__.upper()} id={packet.packet_id} rc=0x{packet.reason_code:02x}"
    if isinstance(packet, Subscribe):
        filters = ", ".join(f"{s.topic_filter!r} q{s.options.qos}" for s in packet.subscriptions)
        return f"SUBSCRIBE id={packet.packet_id} [{filters}]"
    if isinstance(packet, Suback | Unsuback):
        codes = ", ".join(f"0x{code:02x}" for code in packet.reason_codes)
        return f"{type(packet).__name__.upper()} id={packet.packet_id} [{codes}]"
    if isinstance(packet, Unsubscribe):
        return f"UNSUBSCRIBE id={packet.packet_id} {packet.topic_filters!r}"
    if isinstance(packet, Disconnect | Auth):
        return f"{type(packet).__name__.upper()} rc=0x{packet.reason_code:02x}"
    return type(packet).__name__.upper()


def stamp(now: float) -> str:
    """Wall-clock time of a line, UTC, to the millisecond."""
    seconds = int(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((now - seconds) * 1000):03d}Z"


class Trace:
    """One running trace. `packet` and `note` add lines; `take` hands them out; `done` says whether the trace
    is over (then `take` still hands out what is left, the last line saying why it ended)."""

    def __init__(self, options: TraceOptions, started: float) -> None:
        """`started`: monotonic time (the deadline is on monotonic time; the lines' stamps are wall-clock)."""
        self.options = options
        self.deadline = started + options.stop_after
        self.ended: str | None = None  # why it ended
        self._lines: deque[str] = deque()
        self._skipped = 0  # lines lost to a slow reader since the last take
        self._window: deque[float] = deque()  # times of the packets within the last rate_interval

    @property
    def client_id(self) -> str:
        return self.options.client_id

    def packet(self, direction: str, peer: str, packet: Packet | object, now: float) -> None:
        """A packet of the client went `direction` (RECEIVED or SENT) on its connection from `peer`."""
        if self.ended is not None:
            return
        if self._over_rate(now):
            self.end(f"more than {self.options.rate_max} packets in {self.options.rate_interval:g} s: "
                     "trace stopped (raise --rate-max or --rate-interval)", now)
            return
        arrow = "<-" if direction == RECEIVED else "->"
        self._add(f"{stamp(now)} {peer} {arrow} {describe(packet, self.options.payload_limit)}")

    def note(self, text: str, now: float) -> None:
        """A line about the trace itself (a connection found, gone, taken over)."""
        if self.ended is None:
            self._add(f"{stamp(now)} {text}")

    def end(self, why: str, now: float) -> None:
        if self.ended is None:
            self.ended = why
            self._add(f"{stamp(now)} {why}", force=True)

    def tick(self, monotonic: float, wall: float) -> None:
        """Ends the trace when its time is up (`monotonic` against the deadline, `wall` for the line's stamp)."""
        if self.ended is None and monotonic >= self.deadline:
            self.end(f"trace of {self.client_id!r} ended after {self.options.stop_after:g} s", wall)

    @property
    def done(self) -> bool:
        return self.ended is not None

    def take(self) -> list[str]:
        """The lines since the last take (with a line counting those a slow reader lost)."""
        lines = list(self._lines)
        self._lines.clear()
        if self._skipped:
            lines.insert(0, f"... {self._skipped} lines not shown: the terminal did not keep up")
            self._skipped = 0
        return lines

    def _over_rate(self, now: float) -> bool:
        window = self._window
        window.append(now)
        horizon = now - self.options.rate_interval
        while window and (window[0] <= horizon or window[0] > now):  # `> now`: the wall clock was set back
            window.popleft()
        return len(window) > self.options.rate_max

    def _add(self, line: str, force: bool = False) -> None:
        if len(self._lines) >= BUFFER_LINES and not force:
            self._skipped += 1
            return
        self._lines.append(line)


class Tracers:
    """The traces running on a node, by client id. The connection driver asks `of(client_id)` once per
    connection (at its CONNECT) and again when a trace starts (`started` names the client ids to look for)."""

    def __init__(self) -> None:
        self._by_client: dict[str, list[Trace]] = {}

    def start(self, options: TraceOptions, monotonic: float) -> Trace:
        trace = Trace(options, monotonic)
        self._by_client.setdefault(options.client_id, []).append(trace)
        return trace

    def stop(self, trace: Trace, now: float, why: str = "trace stopped") -> None:
        trace.end(why, now)
        traces = self._by_client.get(trace.client_id)
        if traces is not None and trace in traces:
            traces.remove(trace)
            if not traces:
                del self._by_client[trace.client_id]

    def of(self, client_id: str) -> tuple[Trace, ...]:
        """The running traces of `client_id` (usually none: one dictionary lookup)."""
        traces = self._by_client.get(client_id)
        return tuple(t for t in traces if not t.done) if traces else ()

    def running(self) -> Iterable[Trace]:
        return [t for traces in self._by_client.values() for t in traces]

    def __bool__(self) -> bool:
        return bool(self._by_client)
