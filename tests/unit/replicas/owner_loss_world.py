"""The world of the owner-loss simulation (test_simulation_owner_loss.py, which says what it checks).

The owner node runs the client's real `Session` (vmqpy.broker.core.session). Its journal writes go as replica
operations (ops.py) to two replica nodes over the lossy, reordering, breaking links of the disk-loss simulation
(disk_loss_world.World: forwarding.py's numbering and duplicate detection, ledger.py's barrier with write
quorum 3, copies.py on each replica; replicas crash keeping their disk). `Endpoint` is one node's side of the
client's connection: the session's `Sink`, protocol.py's rules for PUBLISH/PUBACK/PUBREC/PUBREL/PUBCOMP, and the
ordered acknowledgements of ack_order.AckQueue, held until the barrier passed the writes before them. `Client` is
the MQTT client: a QoS 1/2 receiver and a QoS 2 sender of its own messages (the session's incoming QoS 2 ids).

The loss: the owner's memory, disk, links and the client's connection are gone; one replica may be down (its
memory rebuilt from its disk) or cut off from the recovering node. The failover is the real one: the recovering
node's `Failover.recover` fetches the copies (`rep_fetch` answered by the replicas' own `Failover`s over
in-memory control links), merges them (`merge_copies`) and adopts them (`Failover._adopt` ->
`SessionMigration.adopt_messages(origin=owner)` -> `Lineage.admit` -> `Session.adopt`) into a session the client
then attaches to (in-flight messages resent with DUP and their packet ids, PUBREL for the PUBREC-received ones).

`Rules` say which packets the connection holds for the barrier: none, as the real broker (connection.py writes
a session's PUBLISH and PUBREL, and protocol.py's PUBCOMP and repeated PUBREC, at once), or all of them (a model
of the fix); and mutations that the simulation must catch.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from tests.unit.replicas.disk_loss_world import CLIENT, OWNER, REPLICAS
from tests.unit.replicas.disk_loss_world import World as ReplicatedOwner
from tests.unit.replicas.tables import MemoryTable
from vmqpy.broker.core.migration import SessionMigration
from vmqpy.broker.core.persistence import session_record
from vmqpy.broker.core.session import NullJournal, Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.cluster.forwarding import ForwardReceiver
from vmqpy.mqtt.packets import Packet, Pubrel
from vmqpy.replicas.copies import ReplicaCopies
from vmqpy.replicas.failover import Failover
from vmqpy.replicas.ops import Op
from vmqpy.sessions.handover import SessionImage, outgoing_record
from vmqpy.sessions.message import Message, encode_record
from vmqpy.sessions.names import Entry
from vmqpy.sessions.parts import Outgoing, OutState

if TYPE_CHECKING:
    from vmqpy.broker.core.broker import Broker

__all__ = ["AS_THE_BROKER_DOES", "HOLDING_SENDS", "Rules", "World"]

RECOVERER = "recoverer"
WINDOW = 3  # the session's max_inflight
CLIENT_IDS = 3  # packet ids the client uses for its own QoS 2 publishes (reused once free)


@dataclass(frozen=True)
class Rules:
    """Which packets to the client the simulated connection holds until the barrier passed the writes issued
    before them (the broker holds all four since 2026-11-27: `AS_THE_BROKER_DOES`, which
    tests/unit/broker/driver/test_qos2_held.py checks on the real connection; before, it held none: `BEFORE_THE_FIX`),
    and mutations the simulation must catch."""

    hold_publish: bool = False  # a QoS 2 PUBLISH, until its in-flight state (packet id) is on the replicas
    hold_pubrel: bool = False  # a PUBREL, until the PUBREC-received state is
    hold_pubcomp: bool = False  # a PUBCOMP, until the incoming packet id's removal is
    hold_repeated_pubrec: bool = False  # the PUBREC of a resent PUBLISH, until its packet id is
    ack_before_barrier: bool = False  # the publisher is acknowledged before its write passed the barrier
    forget_pubrec_received: bool = False  # a RELEASED message is replicated as PUBLISHED
    forget_incoming: bool = False  # incoming QoS 2 packet ids are not replicated


HOLDING_SENDS = Rules(hold_publish=True, hold_pubrel=True, hold_pubcomp=True, hold_repeated_pubrec=True)
AS_THE_BROKER_DOES = HOLDING_SENDS
BEFORE_THE_FIX = Rules()


@dataclass(frozen=True)
class Pkt:
    """One MQTT packet on the client's connection, `kind` one of: to the client publish, pubrel, pubrec_in,
    pubcomp_in; to the broker puback, pubrec, pubcomp, publish_in, pubrel_in (the `_in` kinds belong to the
    client's own publishes). `mid` names the message, for the trace."""

    kind: str
    pid: int
    mid: str = ""
    qos: int = 0
    dup: bool = False

    def __str__(self) -> str:
        mid, qos = f" {self.mid}" if self.mid else "", f" q{self.qos}" if self.qos else ""
        return f"{self.kind}({self.pid}{mid}{qos}{' DUP' if self.dup else ''})"


@dataclass
class Client:
    """The MQTT client: a QoS 1/2 receiver, and a QoS 2 sender of its own messages."""

    held: dict[int, str] = field(default_factory=dict)  # QoS 2 ids received (and message), PUBREC sent, no PUBREL
    delivered: Counter[str] = field(default_factory=Counter)  # message -> deliveries to the application
    unacked: dict[int, str] = field(default_factory=dict)  # own publishes: id -> message, no PUBREC yet
    released: dict[int, str] = field(default_factory=dict)  # own publishes: PUBREC came, PUBREL sent
    acknowledged: set[str] = field(default_factory=set)  # own messages whose PUBREC came
    sent: int = 0

    def receive(self, pkt: Pkt) -> list[Pkt]:
        """The client's answer to one packet from the broker."""
        if pkt.kind == "publish" and pkt.qos == 1:
            self.delivered[pkt.mid] += 1
            return [Pkt("puback", pkt.pid, pkt.mid)]
        if pkt.kind == "publish":  # MQTT 4.3.3: until the PUBREL, a PUBLISH with this id is not delivered again
            if pkt.pid not in self.held:
                self.delivered[pkt.mid] += 1
                self.held[pkt.pid] = pkt.mid
            return [Pkt("pubrec", pkt.pid, self.held[pkt.pid])]
        if pkt.kind == "pubrel":
            return [Pkt("pubcomp", pkt.pid, self.held.pop(pkt.pid, ""))]
        if pkt.kind == "pubrec_in":
            mid = self.unacked.pop(pkt.pid, None) or self.released.get(pkt.pid)
            if mid is None:
                return []
            self.acknowledged.add(mid)
            self.released[pkt.pid] = mid
            return [Pkt("pubrel_in", pkt.pid, mid)]
        assert pkt.kind == "pubcomp_in", pkt
        self.released.pop(pkt.pid, None)
        return []

    def publish(self) -> Pkt | None:
        """A new QoS 2 message of its own, with the lowest free packet id (ids are reused once complete)."""
        free = [p for p in range(1, CLIENT_IDS + 1) if p not in self.unacked and p not in self.released]
        if not free:
            return None
        self.sent += 1
        mid = self.unacked[free[0]] = f"c{self.sent}"
        return Pkt("publish_in", free[0], mid, 2)

    def resume(self) -> list[Pkt]:
        """What it sends again on a new connection: PUBLISH with DUP before the PUBREC, else PUBREL."""
        return [Pkt("publish_in", p, m, 2, True) for p, m in self.unacked.items()] + [
            Pkt("pubrel_in", p, m) for p, m in self.released.items()]


class Endpoint:
    """One node's side of the client's connection: the session's `Sink`, protocol.py's rules for the packets of
    this model, and two ordered queues of packets waiting for the barrier to pass the last write issued before
    them (`mark`): the acknowledgements (ack_order.AckQueue) and, when `Rules` hold them, the session's sends."""

    def __init__(self, world: World, name: str, session: Session, mark: Callable[[], int]) -> None:
        self.world, self.name, self.session, self.mark = world, name, session, mark
        self.acks: deque[tuple[int, Pkt]] = deque()
        self.sends: deque[tuple[int, Pkt]] = deque()

    def reply(self, pkt: Pkt, durable: bool) -> None:
        self.queue(self.acks, pkt, durable)

    def send(self, pkt: Pkt, held: bool) -> None:
        self.queue(self.sends, pkt, held)

    def queue(self, waiting: deque[tuple[int, Pkt]], pkt: Pkt, durable: bool) -> None:
        mark = self.mark() if durable else 0
        if mark == 0 and not waiting:
            self.emit(pkt)
        else:
            waiting.append((mark, pkt))

    def flush(self, passed: int) -> None:
        for waiting in (self.acks, self.sends):
            while waiting and waiting[0][0] <= passed:
                self.emit(waiting.popleft()[1])

    def emit(self, pkt: Pkt) -> None:
        """`pkt` leaves for the client (a PUBREC that leaves the first owner acknowledges its message)."""
        self.world.log(f"{self.name} -> {pkt}")
        self.world.to_client.append(pkt)
        if pkt.kind == "pubrec_in" and self.name == OWNER:
            self.world.pubrec_left_owner.add(pkt.mid)

    # the Sink
    def write_packet(self, packet: Packet) -> None:
        assert isinstance(packet, Pubrel)
        self.send(Pkt("pubrel", packet.packet_id, self.message_of(packet.packet_id)), self.world.rules.hold_pubrel)

    def message_of(self, packet_id: int) -> str:
        out = self.session.inflight.get(packet_id)
        return "" if out is None else out.message.payload.decode()

    def write_publish(self, message: Message, qos: int, retain: bool, packet_id: int | None,
                      subscription_ids: list[int], now: float, dup: bool = False) -> None:
        pkt = Pkt("publish", packet_id or 0, message.payload.decode(), qos, dup)
        self.send(pkt, self.world.rules.hold_publish and qos == 2)

    def can_write(self) -> bool:
        return True

    def take_over(self, reason_code: int = 0) -> tuple[Message | None, float]:
        return None, 0.0

    # the connection's rules (vmqpy/broker/machine/protocol.py)
    def receive(self, pkt: Pkt) -> None:
        session, now, world = self.session, self.world.now, self.world
        if pkt.kind == "puback":
            session.on_puback(pkt.pid, now)
        elif pkt.kind == "pubrec":
            if session.on_pubrec(pkt.pid, 0, now) is not None:  # a `Send`: written at once
                self.send(Pkt("pubrel", pkt.pid, self.message_of(pkt.pid)), world.rules.hold_pubrel)
        elif pkt.kind == "pubcomp":
            session.on_pubcomp(pkt.pid, now)
        elif pkt.kind == "publish_in":
            if pkt.pid in session.awaiting_release:  # a resend: routed already, not again
                self.reply(Pkt("pubrec_in", pkt.pid, pkt.mid), world.rules.hold_repeated_pubrec)
                return
            world.routed[pkt.mid] += 1
            world.log(f"{self.name} routes {pkt.mid} (client id {pkt.pid})")
            session.await_release((pkt.pid,))
            session.journal.save_incoming(session, pkt.pid, True)
            self.reply(Pkt("pubrec_in", pkt.pid, pkt.mid), durable=True)
        else:
            assert pkt.kind == "pubrel_in", pkt
            if session.release(pkt.pid):
                session.journal.save_incoming(session, pkt.pid, False)
            self.reply(Pkt("pubcomp_in", pkt.pid, pkt.mid), world.rules.hold_pubcomp)


class ReplicatingJournal:
    """The owner's SessionStore as the replicas see it: each journal write is one replica operation to both
    replica nodes (vmqpy.broker.core.persistence -> vmqpy.replicas.owner)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def save_message(self, session: Session, out: Outgoing) -> None:
        if self.world.rules.forget_pubrec_received and out.state == OutState.RELEASED:
            out = dataclasses.replace(out, state=OutState.PUBLISHED)
        self.world.replicate(Op("put", CLIENT, seq=out.seq, value=encode_record(outgoing_record(out))),
                             f"put {out.message.payload.decode()} seq {out.seq} {out.state.name} id {out.packet_id}")

    def delete_message(self, session: Session, out: Outgoing) -> None:
        self.world.replicate(Op("del", CLIENT, seq=out.seq), f"del {out.message.payload.decode()} seq {out.seq}")

    def save_incoming(self, session: Session, packet_id: int, present: bool) -> None:
        if not self.world.rules.forget_incoming:
            self.world.replicate(Op("in", CLIENT, packet_id=packet_id, present=present), f"in {packet_id} {present}")


@dataclass
class World(ReplicatedOwner):
    """The owner, its replicas and links (ReplicatedOwner), the publisher, the client and its connection."""

    rules: Rules = field(default_factory=Rules)
    client: Client = field(default_factory=Client)
    endpoint: Endpoint | None = None  # the node the client connects to
    connected: bool = False
    to_client: list[Pkt] = field(default_factory=list)
    to_broker: list[Pkt] = field(default_factory=list)
    publisher_waiting: deque[tuple[int, str]] = field(default_factory=deque)  # (mark, message)
    acknowledged: set[str] = field(default_factory=set)  # messages acknowledged to the publisher
    qos_of: dict[str, int] = field(default_factory=dict)
    routed: Counter[str] = field(default_factory=Counter)  # the client's own messages: times routed
    now: float = 0.0
    lines: list[str] = field(default_factory=list)
    owner_lost: bool = False
    fault: str = ""  # of a replica at the failover
    pubrec_left_owner: set[str] = field(default_factory=set)  # the client's messages the lost owner acknowledged
    recovered: Counter[str] = field(default_factory=Counter)

    def log(self, line: str) -> None:
        self.lines.append(f"{self.now:5.0f} {line}")

    # the owner
    def replicate(self, op: Op, what: str) -> None:
        if not self.owner_lost:
            self.write(op)
            self.log(f"write {self.ledger.last}: {what}")

    def start(self) -> None:
        session = Session(CLIENT, protocol_level=4, expiry_interval=None, max_inflight=WINDOW, max_online=10_000,
                          max_offline=10_000, journal=ReplicatingJournal(self))
        self.replicate(Op("session", CLIENT, value=encode_record(session_record(session, None))), "session")
        self.endpoint = Endpoint(self, OWNER, session, lambda: self.ledger.last)
        self.connect()

    def publish(self) -> None:
        assert self.endpoint is not None
        mid, qos = f"m{len(self.qos_of) + 1}", self.rng.choice((1, 2))
        self.qos_of[mid] = qos
        self.log(f"publisher sends {mid} q{qos}")
        self.endpoint.session.deliver(Message("t", mid.encode(), qos), qos, False, [], self.now)
        self.publisher_waiting.append((0 if self.rules.ack_before_barrier else self.ledger.last, mid))

    def settle(self) -> None:
        """The barrier passes what it can; acknowledgements waiting for it leave."""
        if self.owner_lost:
            return
        passed = self.ledger.advance(lambda n: True, True)
        while self.publisher_waiting and self.publisher_waiting[0][0] <= passed:
            mid = self.publisher_waiting.popleft()[1]
            self.acknowledged.add(mid)
            self.log(f"publisher acknowledged {mid}")
        assert self.endpoint is not None
        self.endpoint.flush(passed)

    # the client's connection
    def connect(self) -> None:
        assert self.endpoint is not None and not self.connected
        self.connected = True
        self.log(f"client connects to {self.endpoint.name}")
        self.endpoint.session.attach(self.endpoint, WINDOW, 0, self.now)
        self.to_broker += self.client.resume()

    def disconnect(self) -> None:
        assert self.endpoint is not None
        self.log("client connection lost")
        self.connected = False
        self.to_client.clear()
        self.to_broker.clear()
        self.endpoint.acks.clear()
        self.endpoint.sends.clear()
        self.endpoint.session.detach(self.now)

    def to_the_client(self) -> None:
        pkt = self.to_client.pop(0)
        answers = self.client.receive(pkt)
        self.log(f"client <- {pkt} -> {' '.join(map(str, answers))}")
        self.to_broker += answers

    def to_the_broker(self) -> None:
        assert self.endpoint is not None
        pkt = self.to_broker.pop(0)
        self.log(f"{self.endpoint.name} <- {pkt}")
        self.endpoint.receive(pkt)

    def client_publishes(self) -> None:
        pkt = self.client.publish()
        if pkt is not None:
            self.log(f"client sends {pkt}")
            self.to_broker.append(pkt)

    def client_step(self, roll: float) -> None:
        """One event of the client's connection (`roll` in [0, 1))."""
        if not self.connected:
            if roll < 0.3:
                self.connect()
        elif roll < 0.45 and self.to_client:
            self.to_the_client()
        elif roll < 0.88 and self.to_broker:
            self.to_the_broker()
        elif roll < 0.95:
            self.client_publishes()
        else:
            self.disconnect()

    def replica_step(self, roll: float) -> None:
        """One event of the replica links (`roll` in [0, 1))."""
        name = self.rng.choice(REPLICAS)
        replica = self.replicas[name]
        if roll < 0.55 and replica.to_replica:  # in any order, the oldest most often
            self.deliver(name, 0 if self.rng.random() < 0.6 else self.rng.randrange(len(replica.to_replica)))
        elif roll < 0.60 and replica.to_replica:
            replica.to_replica.pop(self.rng.randrange(len(replica.to_replica)))  # dropped
        elif roll < 0.90 and replica.to_owner:
            self.ack(name, self.rng.randrange(len(replica.to_owner)))
        elif roll < 0.95:
            self.break_link(name)
        elif roll < 0.98:
            self.log(f"replica {name} crashes and restarts, its disk kept")
            self.crash(name, lose_disk=False)
        elif replica.copies is not None:
            replica.copies.prune(OWNER, replica.receiver.acknowledgeable(OWNER)[1])

    # the loss and the failover
    def lose_owner(self) -> list[str]:
        """The owner is gone with its disk, and the client's connection; which replicas answer the recovering
        node (one may be down, its disk kept, or cut off from it)."""
        if self.connected:
            self.disconnect()
        self.owner_lost = True
        for replica in self.replicas.values():  # what the owner had sent is lost with it
            replica.to_replica.clear()
            replica.to_owner.clear()
        self.fault, name = self.rng.choice(("none", "crashed", "cut off")), self.rng.choice(REPLICAS)
        if self.fault == "crashed":  # its memory is rebuilt from its disk when it is back
            replica = self.replicas[name]
            replica.receiver, replica.copies = ForwardReceiver(), ReplicaCopies(replica.disk)
            replica.copies.load()
        answering = [n for n in REPLICAS if self.fault == "none" or n != name]
        self.log(f"! owner lost with its disk; replica {name}: {self.fault}; answering: {answering}")
        return answering

    def fail_over(self, answering: list[str]) -> None:
        """The recovering node adopts the copies of the answering replicas; the client will connect there."""
        recovering = RecoveringBroker()
        asyncio.run(run_failover(self, SessionMigration(cast("Broker", recovering)), answering))
        session = recovering.sessions.get(CLIENT)
        if session is None:  # nothing was found: the CONNECT makes the session afresh
            session = recovering.sessions[CLIENT] = recovering.new_session(CLIENT, 4, None)
        inflight = sorted((pid, o.message.payload.decode(), o.state.name) for pid, o in session.inflight.items())
        self.recovered.update(state for _p, _m, state in inflight)
        self.recovered.update(QUEUED=len(session.queue), incoming=len(session.awaiting_release))
        self.log(f"! recovered: in flight {inflight}, queued {[o.message.payload.decode() for o in session.queue]}, "
                 f"incoming ids {sorted(session.awaiting_release)}")
        self.endpoint = Endpoint(self, RECOVERER, session, lambda: 0)


class RecoveringBroker:
    """What SessionMigration uses of vmqpy.broker.core.broker.Broker on the recovering node (its own disk is safe: its
    journal is not simulated)."""

    def __init__(self) -> None:
        self.node = RECOVERER
        self.sessions: dict[str, Session] = {}
        self.metrics: Counter[str] = Counter()
        self.nodes = None
        self.on_recreated = None
        self.storage = MemoryTable()
        self.replicas = None  # its own journal's replication is not simulated
        self.store = self
        self.metadata = self

    def new_session(self, client_id: str, level: int, expiry: float | None) -> Session:
        return Session(client_id, protocol_level=level, expiry_interval=expiry, max_inflight=WINDOW,
                       max_online=10_000, max_offline=10_000, journal=NullJournal(), metrics=self.metrics)

    def save_session(self, session: Session, will: StoredWill | None = None) -> None:
        pass

    def hlc_now(self) -> int:
        return 0

    def put(self, prefix: Any, key: Any, value: Any, confirm: Any = None) -> None:
        pass

    def get(self, prefix: Any, key: Any) -> Any:
        return None  # no owner record: the recovered session's owner user stays unknown (vmqpy.sessions.owners)


class Adopter:
    """Failover's port to the broker, the real SessionMigration behind it."""

    def __init__(self, migration: SessionMigration) -> None:
        self.migration = migration

    def adopt_offline(self, image: SessionImage, now: float) -> Session:
        return self.migration.adopt_offline(image, now)

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None:
        pass

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None) -> bool:
        return self.migration.adopt_messages(client_id, outs, now, origin)

    def inherit_lineage(self, client_id: str, entries: list[Entry], sender: str) -> None:
        self.migration.inherit_lineage(client_id, entries, sender)

    def owner_of(self, client_id: str) -> str | None:
        return RECOVERER


class Links:
    """One node's cluster links during the failover: control frames between the nodes that reach each other,
    in order, each delivered on a later turn of the event loop."""

    def __init__(self, name: str, nodes: dict[str, Failover], reach: set[frozenset[str]]) -> None:
        self.name, self.nodes, self.reach = name, nodes, reach

    def member_names(self) -> list[str]:
        return [RECOVERER, *REPLICAS]  # the lost owner left the cluster

    def is_reachable(self, node: str) -> bool:
        return frozenset((self.name, node)) in self.reach

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        if not self.is_reachable(node):
            return False
        asyncio.get_running_loop().call_soon(self.nodes[node].on_control, self.name, body)
        return True


async def run_failover(world: World, migration: SessionMigration, answering: list[str]) -> None:
    """The recovering node's `Failover.recover` against the answering replicas' real `Failover`s."""
    nodes: dict[str, Failover] = {}
    reach = {frozenset((RECOVERER, name)) for name in answering}
    durable: Future[None] = Future()
    durable.set_result(None)
    for name in REPLICAS:
        copies = world.replicas[name].copies
        assert copies is not None
        nodes[name] = Failover(name, copies, Links(name, nodes, reach), Adopter(migration), lambda: durable)
    recoverer = nodes[RECOVERER] = Failover(RECOVERER, ReplicaCopies(MemoryTable()), Links(RECOVERER, nodes, reach),
                                            Adopter(migration), lambda: durable)
    recoverer.recover(CLIENT)
    await asyncio.gather(*recoverer._tasks)  # to its end (the old copies forgotten); its errors raised here
