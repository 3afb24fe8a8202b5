"""A token bucket: at most `rate` events per second on average, bursts of up to `burst` at once. Pure: the time
of every event is an argument.

The connection driver keeps one per client for `max_message_rate` (PUBLISHes per second). A publish that finds
the bucket empty is still handled (it was read already); what it owes is the time the driver stops reading the
client's socket, so that a client over its rate is slowed down by TCP back-pressure and loses nothing.
"""

from __future__ import annotations


class TokenBucket:
    """`rate` tokens per second (more than 0), at most `burst` of them saved (at least 1; default: one second's
    worth). It starts full at time `now`."""

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, now: float, burst: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"a token bucket needs a rate above 0, got {rate}")
        self.rate = rate
        self.burst = max(1.0, rate if burst is None else burst)
        self.tokens = self.burst
        self.updated = now

    def take(self, now: float) -> float:
        """Spend a token for an event at `now`: 0.0 when there was one, else the seconds until the debt is paid
        back (the wait before the next event is within the rate)."""
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0.0 else -self.tokens / self.rate
