"""The fixed-rate (open-loop) publisher: sends its share of a total rate on the schedule of `schedule.Schedule`,
stamping each message with the time it was due.

QoS 0: at every due time it writes what is due (at most MAX_BURST per write, yielding between writes); if the
socket does not take more (the broker stopped reading), it waits, and the wait shows in the latency. QoS 1: what is
due goes out as far as the window of unacknowledged PUBLISHes allows; the rest waits for PUBACKs (each PUBACK sends
the next due message, `Publisher.data_received`), and that wait shows in the latency too. Messages due before the
end of the window and never sent are counted (`behind`): the rate was not reached.

A publisher wakes up at most once per `tick`: at high rates it writes what fell due since in one burst (one
system call for several messages, as a real client batching would) instead of waking up per message. The lag
of every wake-up (how long ago the oldest message that fell due since the previous one was due) is recorded: it
is the load generator's own share of the latencies it reports (timer resolution, tick, a busy loop). A worker
running fixed-rate publishers uses asyncio's select()-based loop (`worker.run_worker`), whose timeouts have
microsecond resolution; uvloop's (and epoll's) are milliseconds, which would add up to 1 ms of lag.
"""

from __future__ import annotations

import array
import asyncio
from typing import Any

from bench.loadgen.clients import Publisher, monotonic_ns
from bench.loadgen.results import PubResult
from bench.loadgen.schedule import Schedule
from bench.loadgen.wire import build_stamped

DEFAULT_TICK = 0.0005  # s: at most 2,000 wake-ups per second per publisher
MAX_BURST = 64  # QoS 0: messages per write when behind
MAX_LAGS = 1_000_000  # timer lags kept per publisher


class PacedPublisher(Publisher):
    def __init__(self, pub_id: int, topic: str, qos: int, rate: float, publishers: int, window: int = 20,
                 feedback: Any = None, tick: float = DEFAULT_TICK, slots: list[int] | None = None) -> None:
        """Publisher `pub_id` (0..publishers-1) of `publishers` sharing a total of `rate` msgs/s; `window`: QoS 1
        PUBLISHes awaiting PUBACK (QoS 0 has none: the schedule alone sets the pace); `tick`: the shortest time
        in seconds between two wake-ups (0 = one wake-up per due message)."""
        super().__init__(pub_id, topic, qos, window if qos else 0, 1, feedback, slots)
        if not 0 <= tick <= 1:
            raise ValueError(f"tick must be 0..1 s, not {tick!r}")
        self.tick = int(tick * 1e9)
        self.schedule = Schedule.of(0, rate, publishers, pub_id)  # validates; its t0 is set by begin()
        self.limit = 0  # messages due before the end of the window: the publisher sends no more
        self.lags: array.array[int] = array.array("q")

    def begin(self, t0: int, t_end: int) -> asyncio.Task[None]:
        """Start the schedule at t0 (ns), sending the messages due before t_end; returns the sending task."""
        s = self.schedule
        self.schedule = Schedule(t0, s.milli, s.publishers, s.index)
        self.limit = self.schedule.due_before(t_end)
        self.running = True
        return asyncio.ensure_future(self._pace())

    def result(self) -> PubResult:
        r = super().result()
        r.behind = max(0, self.limit - self.sent)
        r.send_lags = self.lags.tobytes()
        return r

    def _backlog(self) -> int:
        return min(self.schedule.due(monotonic_ns()), self.limit) - self.sent

    def _send_q1(self, k: int) -> None:
        """QoS 1 (also on PUBACK): at most k of the messages due and not sent, as far as the window allows."""
        k = min(k, self._backlog(), self.window - self.outstanding)
        if k > 0:
            first = self.sent
            self._write_q1(k, [self.schedule.time_of(seq) for seq in range(first, first + k)])

    def _send_q0(self) -> bool:
        """QoS 0: write up to MAX_BURST of the due messages; False if the connection is gone."""
        t = self.transport
        if t is None or t.is_closing():
            self.errors.append("connection closed while publishing")
            return False
        k = min(self._backlog(), MAX_BURST)
        if k > 0:
            first = self.sent
            stamps = [self.schedule.time_of(seq) for seq in range(first, first + k)]
            t.write(build_stamped(self.prefix, self.pub_id, first, stamps))
            self.sent += k
            self.sent_in_window += sum(1 for x in stamps if x >= self.w0)
        return True

    async def _pace(self) -> None:
        sched = self.schedule
        tick = self.tick
        reported = 0  # messages due at the previous wake-up
        for _ in range(1 << 40):  # bounded: every turn sends, waits for a due time, or ends at the limit
            if not self.running or self.closed.done():
                break
            woke = monotonic_ns()
            due = min(sched.due(woke), self.limit)
            if due > reported:
                if len(self.lags) < MAX_LAGS:
                    self.lags.append(woke - sched.time_of(reported))  # the oldest message that fell due since
                reported = due
            if self.qos:
                self._send_q1(self.window)
            else:
                if self._paused and not await self.wait_writable(sched.time_of(self.limit)):
                    break
                if not self._send_q0():
                    break
                if self._backlog() > 0:
                    await asyncio.sleep(0)  # behind: let the loop read, then write the next burst
                    continue
            due = min(sched.due(monotonic_ns()), self.limit)
            if due >= self.limit:
                break  # everything is due; QoS 1 sends the rest as PUBACKs free the window
            delay = max(sched.time_of(due), woke + tick) - monotonic_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
