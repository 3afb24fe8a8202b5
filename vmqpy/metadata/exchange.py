"""Anti-entropy exchanges: the requester's state machine and the responder's batch planner.

An exchange is a *pull*: the requester sends its node clock, the responder answers with the objects
for exactly the dots the requester misses, at most ``limit`` objects per reply, and the requester asks
again with its updated clock until the responder says ``done``::

    requester (A)                                   responder (B), stateless
    -------------                                   ------------------------
    IDLE --start--> WAITING   SyncRequest(xid, A's clock, A's watermark, limit) -->
                    (deadline)                      missing = B.clock - A.clock
                                                    objects = B.index[missing dots] (<= limit keys)
             <-- SyncReply(xid, objects, gaps, B's base, missing, done, [B's watermark if done])
    mark the gaps as seen --> APPLYING (deadline): apply the objects a slice per call (their extra dots seen
                              with them); the replica's timer is due at once until the last slice
    done? --no--> WAITING (new deadline, SyncRequest with the updated clock) ...
          --yes-> DONE: watermark learns B's base and B's watermark --> teardown("ok")
    deadline passed / SyncReject / peer gone / peer removed --> teardown(reason)

A reply of ``limit`` objects is not applied in one call: one call of the replica applies at most a slice of it
(``Replica.APPLY_SLICE``), so that no turn of the driver's event loop lasts for a whole reply (500 objects took
0.3-0.9 s on a loaded node, and its peers declared it silent).  The next request leaves only once the reply is
applied in full: it carries the clock that says so.  While APPLYING, a reply or reject for the exchange is stale.

Every step has a deadline; every ending (success or failure) goes through :meth:`Exchange.teardown`,
which the replica calls exactly once and after which it drops the exchange object: a failed exchange
leaves no state behind (the objects it already applied are ordinary, idempotent merges, and the
dots they carried are safely marked as seen; nothing else changed).  That holds in the middle of a reply
too: the part not applied yet goes with the exchange, and its dots were never marked as seen, so a later
exchange asks for them again.

The responder keeps no state between requests: each :func:`plan_reply` recomputes the missing dots
from the clock in the request, so replies may be lost, duplicated or reordered without harm.  What
crosses the wire is proportional to the missing dots (their objects, plus clocks and gaps as runs),
never to the number of keys held.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from dvv.dots import Counters, Dot
from dvv.node_clock import NodeClock

if TYPE_CHECKING:  # annotations only: messages imports the row codecs, which import this package's outputs
    from vmqpy.metadata.messages import SyncReply

__all__ = ["Exchange", "ExchangePlan", "ExchangeState", "plan_reply"]

K = TypeVar("K", bound=Hashable)


class ExchangeState(enum.Enum):
    """States of a requester-side exchange."""

    WAITING = "waiting"  # a SyncRequest is out; a SyncReply (or SyncReject) is due before the deadline
    APPLYING = "applying"  # a SyncReply is being applied, a slice per call of the replica
    DONE = "done"  # torn down (successfully or not): the replica drops the object


@dataclass
class Exchange:
    """One requester-side exchange with ``peer`` (identified by ``xid``)."""

    peer: str
    xid: int
    started: float
    timeout: float
    state: ExchangeState = ExchangeState.WAITING
    deadline: float = 0.0
    rounds: int = 0
    dots_asked: int = 0
    objects_received: int = 0
    repaired: int = 0
    gaps: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    result: str = ""
    abort: str | None = None  # set when the exchange must end at the next timer (peer unreachable)
    reply: SyncReply | None = None  # while APPLYING: the reply being applied
    applied: int = 0  # while APPLYING: how many of its objects were applied
    reply_repaired: int = 0  # while APPLYING: how many of those changed a key

    def sent(self, size: int, now: float) -> None:
        """A SyncRequest of ``size`` bytes went out at ``now``: wait for its reply until the deadline."""
        if self.state is not ExchangeState.WAITING:
            raise RuntimeError(f"exchange {self.xid} is {self.state.value}")
        self.rounds += 1
        self.bytes_sent += size
        self.deadline = now + self.timeout

    def matches(self, sender: str, xid: int) -> bool:
        """True when a reply from ``sender`` with ``xid`` belongs to this (live) exchange and is awaited."""
        return self.state is ExchangeState.WAITING and sender == self.peer and xid == self.xid

    def applying(self, reply: SyncReply, now: float) -> None:
        """``reply`` (awaited) arrived at ``now``: it is applied a slice at a time (:meth:`progress`)."""
        if self.state is not ExchangeState.WAITING:
            raise RuntimeError(f"exchange {self.xid} is {self.state.value}")
        self.state = ExchangeState.APPLYING
        self.reply, self.applied, self.reply_repaired = reply, 0, 0
        self.deadline = now + self.timeout

    def progress(self, applied: int, repaired: int, now: float) -> None:
        """A slice of the reply was applied at ``now``: ``applied`` objects of it so far, ``repaired`` more changed a
        key.  Each slice restarts the step's deadline (a driver that stops calling lets the exchange time out)."""
        if self.state is not ExchangeState.APPLYING:
            raise RuntimeError(f"exchange {self.xid} is {self.state.value}")
        self.applied = applied
        self.reply_repaired += repaired
        self.deadline = now + self.timeout

    def received(self, *, size: int, missing: int, objects: int, repaired: int, gaps: int) -> None:
        """Account for one SyncReply, applied in full (the exchange waits for the next reply again, or ends)."""
        if self.state is ExchangeState.APPLYING:
            self.state = ExchangeState.WAITING
            self.reply = None
        if self.rounds == 1:
            self.dots_asked = missing  # what the requester missed when the exchange began
        self.bytes_received += size
        self.objects_received += objects
        self.repaired += repaired
        self.gaps += gaps

    def expired(self, now: float) -> bool:
        """The current step's deadline has passed."""
        return self.state is not ExchangeState.DONE and now >= self.deadline

    def teardown(self, result: str, now: float) -> dict[str, object]:
        """End the exchange (the only way out); returns the ``md_exchange`` log fields."""
        if self.state is ExchangeState.DONE:
            raise RuntimeError(f"exchange {self.xid} torn down twice")
        self.state = ExchangeState.DONE
        self.result = result
        self.reply = None  # the part of a reply not applied yet goes with the exchange
        return {
            "peer": self.peer,
            "result": result,
            "rounds": self.rounds,
            "dots_asked": self.dots_asked,
            "objects_received": self.objects_received,
            "repaired": self.repaired,
            "gaps": self.gaps,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "duration": max(0.0, now - self.started),
            "hit_ratio": self.repaired / self.objects_received if self.objects_received else 0.0,
        }


@dataclass
class ExchangePlan(Generic[K]):
    """What a responder sends for one SyncRequest (before the objects are read from the store)."""

    keys: dict[K, list[Dot]] = field(default_factory=dict)  # key -> the requested dots found for it
    gaps: dict[str, Counters] = field(default_factory=dict)  # requested dots held but not indexed
    missing: int = 0  # every dot the requester misses (this batch and later ones)
    done: bool = True


def _hits(run: range, index: Mapping[int, K]) -> Iterator[int]:
    """The counters of ``run`` present in ``index``, ascending (cost: min(len(run), len(index)·log))."""
    if len(run) <= 8 * len(index):
        return (c for c in run if c in index)
    return iter(sorted(c for c in index if c in run))


def plan_reply(
    clock: NodeClock,
    index: Mapping[str, Mapping[int, K]],
    requester: NodeClock,
    limit: int,
    weigh: Callable[[K], int] | None = None,
    max_bytes: int | None = None,
) -> ExchangePlan[K]:
    """Which keys (at most ``limit``, and with ``weigh``, at most ``max_bytes`` of them by weight unless one
    key alone weighs more) and gaps answer a requester whose node clock is ``requester``.

    Missing dots are visited node by node (sorted), counters ascending.  A dot found in ``index``
    names its key; a dot not found is a *gap* (collected by GC, or a counter its node skipped).
    Visiting stops before the dot that would add a ``limit + 1``-th key: the gaps then cover only
    the visited part, and ``done`` is false.  The requester's next clock covers everything visited
    (the objects' dots, the extra dots and the gaps), so the next request continues after it.
    """
    plan: ExchangePlan[K] = ExchangePlan()
    missing = clock.missing_dots(requester)
    plan.missing = sum(len(c) for c in missing.values())
    keys = plan.keys
    used = 0
    for node in sorted(missing):
        sub: Mapping[int, K] = index.get(node, {})
        gap_runs: list[range] = []
        stop_at: int | None = None
        for run in missing[node].runs:
            cursor = run.start  # first counter of the run not yet accounted for
            for counter in _hits(run, sub):
                key = sub[counter]
                if key not in keys:
                    if len(keys) >= limit:
                        stop_at = counter
                        break
                    if weigh is not None and max_bytes is not None:
                        weight = weigh(key)
                        if keys and used + weight > max_bytes:
                            stop_at = counter
                            break
                        used += weight
                if counter > cursor:
                    gap_runs.append(range(cursor, counter))
                keys.setdefault(key, []).append((node, counter))
                cursor = counter + 1
            if stop_at is not None:
                if stop_at > cursor:
                    gap_runs.append(range(cursor, stop_at))
                break
            if cursor < run.stop:
                gap_runs.append(range(cursor, run.stop))
        if gap_runs:
            plan.gaps[node] = Counters.from_runs(gap_runs)
        if stop_at is not None:
            plan.done = False
            break
    return plan
