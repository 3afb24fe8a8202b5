"""The fixed-rate (open-loop) mode's arithmetic (pure): when each publisher's messages are due, and which
deliveries count in the latency figures.

A run at a total rate R msgs/s over n publishers has one global schedule: message j (j = 0, 1, ...) is due at
t0 + floor(j * 1e12 / R_milli) ns, R_milli = round(R * 1000), and belongs to publisher j % n; publisher i's k-th
message is global message k * n + i. The publishers are thus spread evenly over each period instead of all
sending at the same instant. Every time is computed from t0 in integers, never from the previous send, so a
publisher that fell behind catches up (sends what is due at once) instead of drifting.

Latency is measured from the DUE time, which the publisher stamps into the payload in place of the time it wrote
the message: a message that waited (for the publisher's turn, a full QoS 1 window, a socket that would not take
more) carries that wait in its latency, so coordinated omission does not hide the queueing. A delivery's latency
counts in the figures when its due time is in the measured window, whenever it arrives (also during the drain);
the achieved rate is, as in the closed loop, what the subscribers received during the window / its length.
"""

from __future__ import annotations

from dataclasses import dataclass

NS_PER_S_MILLI = 10**12  # ns per second x 1000 (rates are kept in thousandths of a message per second)
MAX_RATE = 100_000_000.0  # msgs/s in total; above this a publisher's period would round to nothing


def rate_milli(rate: float) -> int:
    """A total rate in msgs/s as an integer number of thousandths; ValueError unless 0.001 <= rate <= MAX_RATE."""
    if isinstance(rate, bool) or not (isinstance(rate, int | float) and 0.001 <= rate <= MAX_RATE):
        raise ValueError(f"rate must be a number of msgs/s in 0.001..{MAX_RATE:g}, not {rate!r}")
    return round(rate * 1000)


@dataclass(frozen=True)
class Schedule:
    """Publisher `index`'s share (of `publishers`) of a total rate of `milli` / 1000 msgs/s starting at `t0` (ns)."""

    t0: int
    milli: int
    publishers: int
    index: int

    def __post_init__(self) -> None:
        if self.milli < 1 or self.publishers < 1 or not 0 <= self.index < self.publishers:
            raise ValueError(f"bad schedule: rate {self.milli}/1000 msgs/s, publisher {self.index} of "
                             f"{self.publishers}")

    @classmethod
    def of(cls, t0: int, rate: float, publishers: int, index: int) -> Schedule:
        return cls(t0, rate_milli(rate), publishers, index)

    def time_of(self, k: int) -> int:
        """When this publisher's k-th message (k >= 0) is due, in ns."""
        return self.t0 + (k * self.publishers + self.index) * NS_PER_S_MILLI // self.milli

    def due(self, now: int) -> int:
        """How many of this publisher's messages are due at `now` (due time <= now): time_of(k) <= now iff
        k < due(now)."""
        d = now - self.t0
        if d < 0:
            return 0
        # global messages j with j * 1e12 // milli <= d: j < (d + 1) * milli / 1e12, i.e. j < ceil(...)
        j_end = -(-(d + 1) * self.milli // NS_PER_S_MILLI)
        return max(0, -(-(j_end - self.index) // self.publishers))

    def due_before(self, t_end: int) -> int:
        """How many of this publisher's messages are due strictly before `t_end`."""
        return self.due(t_end - 1)


def in_window(due_ns: int, w0: int, w1: int) -> bool:
    """A delivery counts in the measured figures when its message was due in [w0, w1)."""
    return w0 <= due_ns < w1

