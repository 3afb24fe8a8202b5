"""Draining a node (`vmq-admin node drain`): which clients to disconnect next, and when.

A drain empties a node before it stops, so that a load balancer can send its clients elsewhere without a
reconnect storm: the node stops accepting connections, its health check fails, and its clients are told to go
at most `rate` per second, until none is left or the `timeout` passes. This module is the pacing only; it is
sans-I/O (time is an argument, the clients are opaque values) and `vmqpy.node` drives it:

    drain = Drain(rate=100, timeout=60, started=now)
    while True:
        step = drain.step(now, waiting=[clients not yet told], leaving=number told and not yet gone)
        tell step.disconnect to go
        if step.outcome is not Outcome.DRAINING: break
        sleep until step.wake_at

The pace is a token bucket that starts with one token and gains `rate` tokens a second, without a cap: a
drain that found nobody to disconnect for a while may then disconnect that many at once (a client that was
connecting while the listeners closed). Clients are told in the order they are given; the node gives them in
a stable order (by client id).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: how often a drain that has told every client looks again whether they are gone (seconds)
RECHECK_INTERVAL = 0.05


class Outcome(enum.Enum):
    DRAINING = "draining"  # clients are left and the timeout has not passed
    EMPTY = "empty"  # no client is left: the node may stop
    TIMED_OUT = "timed out"  # the timeout passed with clients left


@dataclass(frozen=True, slots=True)
class Step(Generic[T]):
    """What to do now: disconnect these, then call `step` again at `wake_at` (None once the drain is over)."""

    disconnect: list[T]
    outcome: Outcome
    wake_at: float | None


@dataclass(slots=True)
class Drain:
    """One drain: `rate` clients per second (> 0), over at most `timeout` seconds (>= 0) from `started`."""

    rate: float
    timeout: float
    started: float
    disconnected: int = 0  # clients told to go so far
    outcome: Outcome = field(default=Outcome.DRAINING)

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"the drain rate must be a positive number of clients per second, not {self.rate}")
        if not (self.timeout >= 0 and math.isfinite(self.timeout)):
            raise ValueError(f"the drain timeout must be a number of seconds of at least 0, not {self.timeout}")

    @property
    def deadline(self) -> float:
        return self.started + self.timeout

    def allowance(self, now: float) -> int:
        """How many more clients may be told to go at `now`."""
        # The epsilon: at `next_token_at()` exactly, rounding must not leave the token unearned (a busy loop).
        earned = 1 + math.floor(max(0.0, now - self.started) * self.rate + 1e-9)
        return max(0, earned - self.disconnected)

    def next_token_at(self) -> float:
        """When the allowance next grows by one."""
        return self.started + self.disconnected / self.rate

    def step(self, now: float, waiting: Sequence[T], leaving: int) -> Step[T]:
        """`waiting`: the clients not told yet, in the order to tell them; `leaving`: how many were told and are
        not gone yet. An over drain stays over (EMPTY or TIMED_OUT, nothing more to disconnect)."""
        if self.outcome is not Outcome.DRAINING:
            return Step([], self.outcome, None)
        if not waiting and leaving <= 0:
            self.outcome = Outcome.EMPTY
            return Step([], Outcome.EMPTY, None)
        if now >= self.deadline:
            self.outcome = Outcome.TIMED_OUT
            return Step([], Outcome.TIMED_OUT, None)
        chosen = list(waiting[: self.allowance(now)])
        self.disconnected += len(chosen)
        if len(chosen) < len(waiting):
            wake = self.next_token_at()
        else:
            wake = now + RECHECK_INTERVAL  # every client is told: look again soon whether they are gone
        return Step(chosen, Outcome.DRAINING, min(max(wake, now), self.deadline))


__all__ = ["RECHECK_INTERVAL", "Drain", "Outcome", "Step"]
