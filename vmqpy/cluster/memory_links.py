"""The node links in memory: the surface of `ClusterNetwork` (tcp.py) between nodes living in one process.

For tests and the whole-cluster simulation (tests/sim/cluster): several real nodes on one event loop (usually
one whose clock is simulated), linked through one `MemoryCluster`, which plays the wire and the faults. What a
node's services see is what `ClusterNetwork` promises them (docs/cluster-links.md), with the same callbacks
(`LinkCallbacks`) and the same outgoing buffer (`PeerOutbox`):

* at most one link per pair of nodes, dialed by a node that added the peer (`add_peer`), accepted by the other
  when its admission lets it in (else the dialer hears the refusal through `on_refused`); a dial to a node that
  is down, or across a cut, fails and is tried again with exponential backoff between `reconnect_min` and
  `reconnect_max`;
* frames keep their order per link (as TCP does): each one takes a seeded latency, but never overtakes the
  frame sent before it on the same link, so reordering happens only between links; frames are encoded and
  decoded with the real framing (`encode_frame`, `decode_payload`), so the codec is exercised;
* a frame is lost only when its link breaks: a cut (`partition`) holds the frames of the links across it, and
  each end's failure detector closes its end after `detect_timeout` (plus up to half of it, the heartbeat's
  granularity) of silence, dropping what was in flight; a heal before that delivers them late; a crashed node's
  links are reset (the peers learn it one latency later, or at the heal);
* a closed link (BYE: `remove_peer`, `stop`, a new incarnation) delivers what was written before the close;
* a slow pair (`slow(a, b, seconds)`) adds that much to every frame and dial between the two (a congested path);
* while a peer's link is not up its frames wait in its outgoing buffer (`outgoing_buffer` bytes), written in
  order on the next link.

Every random choice comes from the cluster's `random.Random(seed)`; every time from the running loop's clock. Under
a deterministic event loop, one seed gives one history.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import DATA_TYPES, HEADER_SIZE, FrameType, decode_payload, encode_frame
from vmqpy.cluster.link_callbacks import (
    Admission,
    ConnectCallback,
    LinkCallbacks,
    MessageCallback,
    ReachabilityCallback,
    Receiver,
    RefusedCallback,
)
from vmqpy.cluster.link_counters import LinkCounters
from vmqpy.cluster.outbox import Offer, PeerOutbox

__all__ = ["MemoryCluster", "MemoryLinks"]

log = structlog.get_logger("vmqpy.cluster")

_OPEN: Final = "open"  # the acceptor's answer: the dialer's end is up when it arrives
_CLOSE: Final = "close"  # the other end closed (BYE, or a reset): this end closes when it arrives
_PENDING, _UP, _CLOSED = "pending", "up", "closed"


@dataclass(slots=True)
class _Item:
    """One thing travelling on one direction of a link: a frame, or a control marker (_OPEN, _CLOSE)."""

    arrival: float
    frame: bytes | None
    marker: str | None = None


@dataclass(eq=False, slots=True)
class _Wire:
    """One link between two nodes: its ends' states and, per direction (keyed by the receiver), what travels."""

    dialer: str
    acceptor: str
    state: dict[str, str]
    inbound: dict[str, deque[_Item]]
    timers: dict[str, asyncio.TimerHandle | None]
    detecting: dict[str, asyncio.TimerHandle | None]
    incarnations: dict[str, int]  # what each end proved in the handshake
    listens: dict[str, tuple[str, int]]  # the listener each end advertised

    def other(self, name: str) -> str:
        return self.acceptor if name == self.dialer else self.dialer


@dataclass(slots=True)
class _Peer:
    """What one endpoint keeps of one peer."""

    name: str
    address: tuple[str, int] | None
    outbox: PeerOutbox
    intent: str | None = None
    removed: bool = False
    incarnation: int | None = None
    wire: _Wire | None = None
    dialing: bool = False
    dial_timer: asyncio.TimerHandle | None = None
    failures: int = 0


class MemoryCluster:
    """The wire and the faults between the `MemoryLinks` of the nodes of one process.

    `latency`: (shortest, longest) seconds a frame takes on a link (uniform, seeded). The vocabulary of faults is
    memberlist's and raft's: `partition(side, other)`, `cut(a, b)`, `heal(a, b)`, `heal_all()`, `crash(name)`.
    """

    def __init__(self, seed: int, *, latency: tuple[float, float] = (0.0005, 0.005)) -> None:
        self.rng = random.Random(seed)
        self.latency = latency
        self.endpoints: dict[str, MemoryLinks] = {}  # the live (started, not stopped, not crashed) endpoints
        self._cuts: set[frozenset[str]] = set()
        self._slow: dict[frozenset[str], float] = {}  # seconds added to every frame and dial between a pair
        self._wires: dict[frozenset[str], _Wire] = {}
        self.delivered = 0  # frames delivered, all links together

    # ------------------------------------------------------------------------------------------ faults

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cuts

    def cut(self, a: str, b: str) -> None:
        """Nothing passes between `a` and `b` (both ways) until `heal(a, b)`; their link's ends notice the silence
        after their detect timeouts."""
        pair = frozenset((a, b))
        if a == b or pair in self._cuts:
            return
        self._cuts.add(pair)
        wire = self._wires.get(pair)
        if wire is not None:
            for name in (a, b):
                self._detect(wire, name)

    def partition(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Cut every node of `side` from every node of `other`."""
        others = list(other)
        for a in side:
            for b in others:
                self.cut(a, b)

    def heal(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self._cuts:
            return
        self._cuts.discard(pair)
        wire = self._wires.get(pair)
        if wire is not None:
            for name in (a, b):
                timer = wire.detecting.get(name)
                if timer is not None:
                    timer.cancel()
                    wire.detecting[name] = None
                self._pump(wire, name)

    def heal_all(self) -> None:
        for pair in list(self._cuts):
            a, b = sorted(pair)
            self.heal(a, b)

    def slow(self, a: str, b: str, seconds: float) -> None:
        """Every frame and dial between `a` and `b` takes `seconds` more from now on (0: back to normal); a link's
        frames keep their order."""
        pair = frozenset((a, b))
        if seconds > 0:
            self._slow[pair] = seconds
        else:
            self._slow.pop(pair, None)

    def cuts(self) -> list[tuple[str, str]]:
        return sorted(tuple(sorted(pair)) for pair in self._cuts)  # type: ignore[misc]

    def crash(self, name: str) -> None:
        """`name` dies at once (kill -9): its endpoint hears and sends nothing more; its links are reset, which
        its peers learn one latency later (or at the heal of a cut)."""
        endpoint = self.endpoints.pop(name, None)
        if endpoint is not None:
            endpoint.dead = True
        for pair, wire in list(self._wires.items()):
            if name in pair:
                self._reset(wire, name)

    # ------------------------------------------------------------------------------------------ the wire

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _delay(self, a: str = "", b: str = "") -> float:
        low, high = self.latency
        return self.rng.uniform(low, high) + self._slow.get(frozenset((a, b)), 0.0)

    def wire(self, a: str, b: str) -> _Wire | None:
        return self._wires.get(frozenset((a, b)))

    def _put(self, wire: _Wire, to: str, frame: bytes | None, marker: str | None = None) -> None:
        """Send one item to `to` on `wire`, after what travels there already."""
        queue = wire.inbound[to]
        arrival = self._now() + self._delay(wire.dialer, wire.acceptor)
        if queue:
            arrival = max(arrival, queue[-1].arrival)
        queue.append(_Item(arrival, frame, marker))
        self._pump(wire, to)

    def _pump(self, wire: _Wire, to: str) -> None:
        """Deliver to `to` what is due on `wire`; arm one timer for the next item."""
        queue = wire.inbound[to]
        if wire.timers[to] is not None or not queue or self.is_cut(wire.dialer, wire.acceptor):
            return
        loop = asyncio.get_running_loop()
        wire.timers[to] = loop.call_at(queue[0].arrival, self._arrive, wire, to)

    def _arrive(self, wire: _Wire, to: str) -> None:
        wire.timers[to] = None
        queue = wire.inbound[to]
        now = self._now()
        while queue and queue[0].arrival <= now and not self.is_cut(wire.dialer, wire.acceptor):
            item = queue.popleft()
            if wire.state[to] == _CLOSED:
                continue
            endpoint = self.endpoints.get(to)
            if endpoint is None:
                continue
            sender = wire.other(to)
            if item.marker == _OPEN:
                endpoint._opened(wire, sender)
            elif item.marker == _CLOSE:
                endpoint._closed(wire, sender, lost=False)
                self._forget(wire)
            elif item.frame is not None and wire.state[to] == _UP:
                self.delivered += 1
                endpoint._receive(sender, item.frame)
        self._pump(wire, to)

    def _detect(self, wire: _Wire, name: str) -> None:
        """`name`'s failure detector: its end closes after detect_timeout (and up to half more) of silence."""
        endpoint = self.endpoints.get(name)
        if endpoint is None or wire.state[name] == _CLOSED or wire.detecting.get(name) is not None:
            return
        delay = endpoint.detect_timeout * (1.0 + 0.5 * self.rng.random())

        def silent() -> None:
            wire.detecting[name] = None
            if self.is_cut(wire.dialer, wire.acceptor) and wire.state[name] != _CLOSED:
                self._reset(wire, name, silent=True)

        wire.detecting[name] = asyncio.get_running_loop().call_later(delay, silent)

    def _reset(self, wire: _Wire, name: str, *, silent: bool = False) -> None:
        """`name`'s end of `wire` is gone without a BYE (a crash, a silent peer): what travels either way is lost,
        the other end hears a reset after a latency (or at the heal, or by its own detector)."""
        other = wire.other(name)
        for to in (name, other):
            wire.inbound[to].clear()
            timer = wire.timers[to]
            if timer is not None:
                timer.cancel()
                wire.timers[to] = None
        if wire.state[name] != _CLOSED:
            endpoint = self.endpoints.get(name)
            if endpoint is not None:
                if silent:
                    endpoint.counters.silent_peers += 1
                endpoint._closed(wire, other, lost=True)
            wire.state[name] = _CLOSED
        if wire.state[other] != _CLOSED:
            self._put(wire, other, None, _CLOSE)
        self._forget(wire)

    def _close(self, wire: _Wire, name: str) -> None:
        """`name` closes its end with a BYE: what it wrote before still arrives, then the close."""
        if wire.state[name] == _CLOSED:
            return
        wire.state[name] = _CLOSED
        other = wire.other(name)
        if wire.state[other] != _CLOSED:
            self._put(wire, other, None, _CLOSE)
        self._forget(wire)

    def _forget(self, wire: _Wire) -> None:
        if all(state == _CLOSED for state in wire.state.values()):
            for timer in (*wire.timers.values(), *wire.detecting.values()):
                if timer is not None:
                    timer.cancel()
            pair = frozenset((wire.dialer, wire.acceptor))
            if self._wires.get(pair) is wire:
                del self._wires[pair]

    def _dial(self, dialer: MemoryLinks, peer: _Peer) -> None:
        """One dial of `dialer` to `peer`: a link, a refusal, or a failure (then the dialer tries again)."""
        name = peer.name
        loop = asyncio.get_running_loop()
        dialer.counters.dial_attempts += 1
        target = self.endpoints.get(name)
        if self.is_cut(dialer.own_name, name):  # the SYN is dropped: the connect times out
            loop.call_later(dialer.connect_timeout, dialer._dial_failed, peer)
            return
        if target is None or not target.running:  # connection refused, one round trip later
            loop.call_later(2 * self._delay(dialer.own_name, name), dialer._dial_failed, peer)
            return
        loop.call_later(self._delay(dialer.own_name, name), self._accept, dialer, target, peer)

    def _accept(self, dialer: MemoryLinks, target: MemoryLinks, peer: _Peer) -> None:
        if dialer.dead or not dialer.running or target.dead or not target.running:
            if not dialer.dead:
                dialer._dial_failed(peer)
            return
        if self.is_cut(dialer.own_name, target.own_name):
            asyncio.get_running_loop().call_later(dialer.connect_timeout, dialer._dial_failed, peer)
            return
        pair = frozenset((dialer.own_name, target.own_name))
        old = self._wires.get(pair)
        if old is not None and old.state[dialer.own_name] != _CLOSED:
            dialer.counters.duplicate_links += 1  # a link is up or opening already: one per pair
            dialer._dial_done(peer)
            return
        reason = target._admit(dialer.own_name, dialer.incarnation, peer.intent)
        if reason is not None:
            target.counters.handshakes_refused += 1
            asyncio.get_running_loop().call_later(self._delay(dialer.own_name, target.own_name), dialer._refused, peer,
                                                  target.own_name, reason)
            return
        if old is not None:  # half open: the dialer lost it, the acceptor did not notice yet; the new one replaces it
            for queue in old.inbound.values():
                queue.clear()
            if old.state[target.own_name] != _CLOSED:
                target._closed(old, dialer.own_name, lost=True)
            self._forget(old)
        ends = (dialer.own_name, target.own_name)
        wire = _Wire(dialer.own_name, target.own_name, {dialer.own_name: _PENDING, target.own_name: _UP},
                     {end: deque() for end in ends}, dict.fromkeys(ends), dict.fromkeys(ends),
                     {dialer.own_name: dialer.incarnation, target.own_name: target.incarnation},
                     {dialer.own_name: dialer.listen, target.own_name: target.listen})
        self._wires[pair] = wire
        peer.wire = wire  # the dialer's end: pending until the acceptor's answer arrives
        target._opened(wire, dialer.own_name)
        self._put(wire, dialer.own_name, None, _OPEN)


class MemoryLinks:
    """One node's links on a `MemoryCluster`: what `ClusterNetwork` offers the node's services (see tcp.py)."""

    def __init__(
        self,
        cluster: MemoryCluster,
        own_name: str,
        incarnation: int,
        cookie: str,
        listen: tuple[str, int],
        *,
        detect_timeout: float = 1.0,
        incoming_buffer: int = 1 << 20,
        outgoing_buffer: int = 10 << 20,
        reconnect_min: float = 0.05,
        reconnect_max: float = 2.0,
    ) -> None:
        if not own_name or not cookie:
            raise ClusterUsageError("own_name and cookie must not be empty")
        if not detect_timeout > 0:
            raise ClusterUsageError("detect_timeout must be positive")
        self.cluster = cluster
        self.own_name = own_name
        self.incarnation = incarnation
        self.listen = listen
        self.detect_timeout = detect_timeout
        self.incoming_buffer = incoming_buffer
        self.outgoing_buffer = outgoing_buffer
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.connect_timeout = max(2 * detect_timeout, 1.0)
        self.running = False
        self.dead = False  # crashed: hears and sends nothing more
        self._stopped = False
        self._callbacks = LinkCallbacks(own_name)
        self.counters = LinkCounters()
        self._peers: dict[str, _Peer] = {}

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self.running or self._stopped:
            raise ClusterUsageError("a MemoryLinks starts once")
        if self.own_name in self.cluster.endpoints:
            raise ClusterUsageError(f"{self.own_name} is running already on this memory cluster")
        self.running = True
        self.cluster.endpoints[self.own_name] = self
        for peer in self._peers.values():
            self._schedule_dial(peer, 0.0)

    async def stop(self) -> None:
        """Every link closed with BYE (reachability False for those that were up), dials cancelled, buffers dropped."""
        if self._stopped:
            return
        self._stopped = True
        if self.dead:
            self.running = False
            return
        for peer in list(self._peers.values()):
            self._cancel_dial(peer)
            self._drop_link(peer)
            self.counters.bytes_dropped += peer.outbox.size
            peer.outbox.clear()
        self.running = False
        if self.cluster.endpoints.get(self.own_name) is self:
            del self.cluster.endpoints[self.own_name]

    def bound_address(self) -> tuple[str, int]:
        return self.listen

    # ------------------------------------------------------------------------------------------ peers

    def add_peer(self, name: str, host: str, port: int, intent: str | None = None) -> None:
        if name == self.own_name:
            raise ClusterUsageError("a node does not link to itself")
        peer = self._peers.get(name)
        if peer is None:
            peer = self._peers[name] = _Peer(name, (host, port), PeerOutbox(self.outgoing_buffer))
        else:
            peer.address = (host, port)
        peer.removed = False
        peer.intent = intent
        if self.running:
            self._schedule_dial(peer, 0.0)

    def remove_peer(self, name: str) -> None:
        peer = self._peers.pop(name, None)
        if peer is None:
            return
        peer.removed = True
        peer.address = None
        self._cancel_dial(peer)
        self._drop_link(peer)
        self.counters.bytes_dropped += peer.outbox.size
        peer.outbox.clear()

    def set_intent(self, intent: str | None) -> None:
        for peer in self._peers.values():
            peer.intent = intent

    def set_incarnation(self, incarnation: int) -> None:
        self.incarnation = incarnation
        for name in list(self._peers):
            self.remove_peer(name)

    def set_admission(self, admission: Admission | None) -> None:
        self._callbacks.admission = admission

    def on_refused(self, callback: RefusedCallback) -> None:
        self._callbacks.refusals.append(callback)

    def peers(self) -> dict[str, tuple[str, int] | None]:
        return {name: peer.address for name, peer in self._peers.items()}

    def reachable(self) -> set[str]:
        return {name for name, peer in self._peers.items() if self._up(peer)}

    def room(self, peer: str) -> int:
        entry = self._peers.get(peer)
        if entry is None or not self.running or self.dead:
            return 0
        return entry.outbox.room(self._up(entry))

    @property
    def max_frame(self) -> int:
        return self.incoming_buffer

    def incarnation_of(self, name: str) -> int | None:
        peer = self._peers.get(name)
        return peer.incarnation if peer is not None else None

    # ------------------------------------------------------------------------------------------ callbacks

    def on_message(self, callback: MessageCallback) -> None:
        """The one callback of every FORWARD, REPLICA, CONTROL and REACHABILITY frame (a later call replaces it)."""
        self._callbacks.frames = callback

    def on_reachability(self, callback: ReachabilityCallback) -> None:
        self._callbacks.reachability.append(callback)

    def on_connect(self, callback: ConnectCallback) -> None:
        self._callbacks.connects.append(callback)

    def set_receiver(self, receiver: Receiver) -> None:
        self._callbacks.receiver = receiver

    # ------------------------------------------------------------------------------------------ sending

    def send(self, peer: str, data: bytes) -> None:
        self.send_frame(peer, FrameType.METADATA, data)

    def send_frame(self, peer: str, frame_type: FrameType, body: Any, *, flush: bool = False) -> bool:
        if frame_type not in DATA_TYPES:
            raise ClusterUsageError(f"{frame_type!r} is not a data frame type")
        entry = self._peers.get(peer)
        if entry is None or not self.running or self.dead:
            self.counters.unknown_peer += 1
            return False
        frame = encode_frame(frame_type, body)
        if len(frame) - HEADER_SIZE > self.incoming_buffer:
            self.counters.oversized += 1
            self.counters.bytes_dropped += len(frame)
            return False
        up = self._up(entry)
        offer = entry.outbox.offer(frame, up)
        if offer is Offer.REFUSED:
            self.counters.overflows += 1
            self.counters.bytes_dropped += len(frame)
            entry.outbox.refusal(asyncio.get_running_loop().time())
            return False
        if offer is Offer.WRITE:
            assert entry.wire is not None
            self._write(entry.wire, peer, frame)
        return True

    # ------------------------------------------------------------------------------------------ the cluster's calls

    def _up(self, peer: _Peer) -> bool:
        wire = peer.wire
        return wire is not None and wire.state[self.own_name] == _UP

    def _write(self, wire: _Wire, to: str, frame: bytes) -> None:
        self.counters.frames_out += 1
        self.counters.bytes_out += len(frame)
        self.cluster._put(wire, to, frame)

    def _admit(self, dialer: str, incarnation: int, intent: str | None) -> str | None:
        return self._callbacks.admit(dialer, incarnation, intent)

    def _opened(self, wire: _Wire, name: str) -> None:
        """Our end of `wire` to `name` is up (we accepted it, or the acceptor's answer arrived)."""
        peer = self._peers.get(name)
        if peer is None:  # accepted from a node we did not add
            peer = self._peers[name] = _Peer(name, None, PeerOutbox(self.outgoing_buffer))
        listen = wire.listens.get(name)
        wire.state[self.own_name] = _UP
        peer.wire = wire
        peer.incarnation = wire.incarnations[name]
        peer.failures = 0
        self._dial_done(peer)
        self.counters.links_up += 1
        self._callbacks.reachable(name, True)
        if listen is not None:
            self._callbacks.connected(name, listen[0], listen[1], lambda: peer.wire is wire and self._up(peer))
        if self._up(peer) and peer.wire is wire:
            while len(peer.outbox) and self._up(peer):
                for frame in peer.outbox.take(1 << 16):
                    self._write(wire, name, frame)
        if self.cluster.is_cut(self.own_name, name):
            self.cluster._detect(wire, self.own_name)

    def _closed(self, wire: _Wire, name: str, *, lost: bool) -> None:
        """Our end of `wire` to `name` is closed (a BYE or a reset arrived, our detector fired, or we crashed)."""
        was_up = wire.state[self.own_name] == _UP
        wire.state[self.own_name] = _CLOSED
        peer = self._peers.get(name)
        if peer is not None and peer.wire is wire:
            peer.wire = None
            if not peer.removed and peer.address is not None and self.running and not self.dead:
                self.counters.reconnects += 1
                self._schedule_dial(peer, self._backoff(peer))
        if was_up and not self.dead:
            self.counters.links_down += 1
            self._callbacks.reachable(name, False)

    def _receive(self, sender: str, frame: bytes) -> None:
        if self.dead:
            return
        self.counters.frames_in += 1
        self.counters.bytes_in += len(frame)
        decoded = decode_payload(memoryview(frame)[HEADER_SIZE:])
        if decoded.type is FrameType.METADATA:
            if not self._callbacks.metadata(sender, decoded.body):
                self.counters.metadata_dropped += 1
        else:
            self._callbacks.message(sender, decoded.type, decoded.body)

    def _refused(self, peer: _Peer, name: str, reason: str) -> None:
        if self.dead or not self.running:
            return
        self.counters.handshakes_refused += 1
        self._dial_failed(peer)
        self._callbacks.refused(name, reason)

    # ------------------------------------------------------------------------------------------ dialing

    def _drop_link(self, peer: _Peer) -> None:
        wire = peer.wire
        if wire is None:
            return
        was_up = self._up(peer)
        peer.wire = None
        self.cluster._close(wire, self.own_name)
        if was_up:
            self.counters.links_down += 1
            self._callbacks.reachable(peer.name, False)

    def _backoff(self, peer: _Peer) -> float:
        longest = min(self.reconnect_max, self.reconnect_min * (2 ** min(peer.failures, 16)))
        return self.cluster.rng.uniform(self.reconnect_min, max(self.reconnect_min, longest))

    def _schedule_dial(self, peer: _Peer, delay: float) -> None:
        if peer.dialing or peer.dial_timer is not None or peer.removed or peer.address is None or self._up(peer):
            return
        if peer.wire is not None and peer.wire.state[self.own_name] != _CLOSED:
            return
        peer.dial_timer = asyncio.get_running_loop().call_later(delay, self._dial, peer)

    def _dial(self, peer: _Peer) -> None:
        peer.dial_timer = None
        if self.dead or not self.running or peer.removed or self._peers.get(peer.name) is not peer or self._up(peer):
            return
        peer.dialing = True
        self.cluster._dial(self, peer)

    def _dial_failed(self, peer: _Peer) -> None:
        peer.dialing = False
        if self.dead or not self.running:
            return
        self.counters.dial_failures += 1
        peer.failures += 1
        if self._peers.get(peer.name) is peer:
            self._schedule_dial(peer, self._backoff(peer))

    def _dial_done(self, peer: _Peer) -> None:
        peer.dialing = False

    def _cancel_dial(self, peer: _Peer) -> None:
        if peer.dial_timer is not None:
            peer.dial_timer.cancel()
            peer.dial_timer = None

    # ------------------------------------------------------------------------------------------ stats

    def stats(self) -> dict[str, int]:
        return {
            **self.counters.as_dict(),
            "connections": sum(1 for peer in self._peers.values() if peer.wire is not None),
            "pending_links": 0,
            "reachable": len(self.reachable()),
            "buffered_frames": sum(len(peer.outbox) for peer in self._peers.values()),
            "buffered_bytes": sum(peer.outbox.size for peer in self._peers.values()),
        }

    def peer_stats(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "reachable": self._up(peer),
                "address": f"{peer.address[0]}:{peer.address[1]}" if peer.address is not None else None,
                "incarnation": peer.incarnation,
                "buffered_frames": len(peer.outbox),
                "buffered_bytes": peer.outbox.size,
            }
            for name, peer in self._peers.items()
        }

