"""Joining at start-up from the configuration (`cluster.discovery`): which listed peer to try next, whether to
try at all, how long to wait between rounds and which failures earn a warning. Pure: the node's situation and
the clock go in, decisions come out; `discovery.py` is the asyncio driver.

The rule that makes nodes which list each other end as one cluster, whatever order they start in: the **anchor**
is the lowest name among this node and its listed peers (peers removed from the cluster left out, below).

- A node that is not the anchor is settled once the anchor is a member of its cluster; until then it tries, in
  name order, every listed peer that is not a member yet (the anchor first). A join merges the two clusters'
  memberships (an add-wins set in the replicated store), so joining any listed peer brings it closer.
- The anchor itself is settled as soon as it is not alone; alone, it tries the others (its data directory may
  have been lost while the others still hold it as a member of an older incarnation).

When every node is settled, every node's cluster holds the anchor, and the anchor's cluster is one: a single
cluster (tests/unit/cluster/test_discovery_plan.py simulates it). "Settled once any listed peer is a member"
would not do: four nodes could settle as {n1, n2} and {n3, n4}.

Never tried: the node itself, a member already, a node removed from this cluster (a `departed` record and not a
member again: an operator took it out), and nothing at all while this node has left its cluster (`cluster
leave`: only an operator's `cluster join` brings it back) or while a join or a leave runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from vmqpy.cluster.backoff import dial_delay
from vmqpy.cluster.membership import DEFAULT_CLUSTER_PORT, parse_node

__all__ = ["DiscoveryPlan", "Peer", "Situation", "Warned", "anchor", "parse_peers", "peers_of", "plan", "retry_delay",
           "warn_now"]

# Why a node tries nothing (a line of the log when it becomes so).
LEFT: Final = "this node left its cluster: only `vmq-admin cluster join` brings it back"
BUSY: Final = "a join or a leave is under way"
NO_PEERS: Final = "no peer listed but this node"
SETTLED: Final = "in a cluster with {anchor}"
ANCHOR: Final = "this node is the anchor (lowest name) and in a cluster"


@dataclass(frozen=True, slots=True, order=True)
class Peer:
    """A listed peer: its node name `NAME@HOST`, and where its cluster listener is."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        """The peer as `vmq-admin cluster join discovery-node=` takes it."""
        return f"{self.name}:{self.port}"


def parse_peers(text: str) -> tuple[str, ...]:
    """The value of `cluster.discovery`: `NAME@HOST[:PORT]` separated by commas (spaces allowed; the port of the
    peer's cluster listener, 44053 when omitted) -> the peers as `NAME@HOST:PORT`, in the given order, each once.
    Empty: no discovery. ValueError names the bad entry."""
    out: dict[str, str] = {}
    for number, entry in enumerate(text.split(","), 1):
        entry = entry.strip()
        if not entry:
            if text.strip():
                raise ValueError(f"entry {number} of {text.strip()!r} is empty (peers are separated by commas)")
            continue
        try:
            name, _host, port = parse_node(entry)
        except ValueError as exc:
            raise ValueError(f"entry {number}: {exc}") from None
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"entry {number}: port {port} out of range")
        address = f"{name}:{port or DEFAULT_CLUSTER_PORT}"
        if out.setdefault(name, address) != address:
            raise ValueError(f"{name} is listed twice with different ports ({out[name]} and {address})")
    return tuple(out.values())


def peers_of(entries: Iterable[str]) -> tuple[Peer, ...]:
    """`parse_peers`' output as Peers."""
    peers = []
    for entry in entries:
        name, host, port = parse_node(entry)
        peers.append(Peer(name, host, port or DEFAULT_CLUSTER_PORT))
    return tuple(peers)


@dataclass(frozen=True, slots=True)
class Situation:
    """What the node knows of itself when it decides: its name, the members of its cluster (itself included),
    the nodes removed from its cluster that are not members again, whether it left its cluster, and whether a
    join or a leave runs now."""

    me: str
    members: frozenset[str]
    departed: frozenset[str] = frozenset()
    left: bool = False
    busy: bool = False


@dataclass(frozen=True, slots=True)
class DiscoveryPlan:
    """The peers to try now, in order; when there are none, `idle` says why."""

    targets: tuple[Peer, ...]
    idle: str = ""


def _eligible(situation: Situation, peers: Iterable[Peer]) -> list[Peer]:
    return [p for p in peers if p.name != situation.me and p.name not in situation.departed]


def anchor(situation: Situation, peers: Iterable[Peer]) -> str:
    """The lowest name of this node and its eligible listed peers (the module doc)."""
    return min([situation.me, *(p.name for p in _eligible(situation, peers))])


def plan(situation: Situation, peers: tuple[Peer, ...]) -> DiscoveryPlan:
    """Whom to try now (the module doc)."""
    if situation.left:
        return DiscoveryPlan((), LEFT)
    if situation.busy:
        return DiscoveryPlan((), BUSY)
    eligible = _eligible(situation, peers)
    if not eligible:
        return DiscoveryPlan((), NO_PEERS)
    lowest = anchor(situation, peers)
    if lowest == situation.me:
        if len(situation.members | {situation.me}) > 1:
            return DiscoveryPlan((), ANCHOR)
    elif lowest in situation.members:
        return DiscoveryPlan((), SETTLED.format(anchor=lowest))
    return DiscoveryPlan(tuple(sorted(p for p in eligible if p.name not in situation.members)))


def retry_delay(rounds: int, shortest: float, longest: float, random: Callable[[], float]) -> float:
    """Seconds before the next round after `rounds` failed rounds in a row: `shortest` doubling up to `longest`,
    jittered to 50-100 % (so that nodes started together do not try in step)."""
    return dial_delay(max(1, rounds), shortest, longest, random)


@dataclass(frozen=True, slots=True)
class Warned:
    """The last warning logged about one peer: its reason and when (monotonic seconds)."""

    reason: str
    at: float


def warn_now(last: Warned | None, reason: str, now: float, every: float) -> bool:
    """Whether a failure to join a peer is a warning (else a debug line): its first failure, a new reason, or
    `every` seconds since the last warning about it."""
    return last is None or last.reason != reason or now - last.at >= every
