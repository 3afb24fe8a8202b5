"""A seeded deterministic simulation of the queue replication protocol: one owner, one replica node, the real
pure parts (forwarding.py's numbering and duplicate detection, ledger.py, copies.py) over an in-memory link that
drops, reorders and breaks, with replica crashes (its disk kept, its memory lost). The seed is printed.

Checked: whenever the barrier has passed a message's write, the replica's disk holds the message (unless a later
operation of the owner changed it); after the link heals and everything is delivered, the replica's copy equals
the owner's state (what a failover would adopt)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.unit.replicas.simulation import Owner, seeded_runs
from tests.unit.replicas.tables import MemoryTable
from vmqpy.cluster.forwarding import ForwardReceiver
from vmqpy.replicas.copies import ReplicaCopies
from vmqpy.replicas.ops import Op, decode_op, encode_op

OWNER, REPLICA, CLIENT = "owner", "replica", "c"


@dataclass
class World(Owner):
    disk: MemoryTable = field(default_factory=MemoryTable)
    receiver: ForwardReceiver = field(default_factory=ForwardReceiver)
    copies: ReplicaCopies | None = None
    to_replica: list[tuple[int, int, Any]] = field(default_factory=list)  # (seq, low, record) on the link
    to_owner: list[int] = field(default_factory=list)  # cumulative acks on the link
    owner_messages: dict[int, bytes] = field(default_factory=dict)
    last_write_of: dict[int, int] = field(default_factory=dict)  # message seq -> the last write touching it
    next_seq: int = 1

    def __post_init__(self) -> None:
        self.copies = ReplicaCopies(self.disk)

    # the owner
    def write(self, op: Op) -> None:
        write = self.ledger.issue([REPLICA], 2)
        self.last_write_of[op.seq] = write
        record = encode_op(op)
        seq, low = self.sender.add(REPLICA, record, lambda: self.ledger.acked(write, REPLICA), lambda _w: None)
        self.to_replica.append((seq, low, record))

    def put(self) -> None:
        seq = self.next_seq
        self.next_seq += 1
        self.owner_messages[seq] = f"m{seq}".encode()
        self.write(Op("put", CLIENT, seq=seq, value=self.owner_messages[seq]))

    def delete(self) -> None:
        if self.owner_messages:
            seq = self.rng.choice(sorted(self.owner_messages))
            del self.owner_messages[seq]
            self.write(Op("del", CLIENT, seq=seq))

    def resend(self) -> None:
        self.to_replica += self.unacknowledged(REPLICA)

    # the replica
    def deliver(self, index: int) -> None:
        seq, low, record = self.to_replica.pop(index)
        assert self.copies is not None
        if self.receiver.accept(OWNER, seq, low, self.epoch):
            self.copies.apply(OWNER, decode_op(record), seq)
        self.to_owner.append(self.receiver.acknowledgeable(OWNER)[1])  # on disk at once (its barrier)

    def crash_replica(self) -> None:
        self.receiver = ForwardReceiver()
        self.copies = ReplicaCopies(self.disk)
        self.copies.load()
        self.to_replica.clear()
        self.to_owner.clear()
        self.resend()

    def ack(self, index: int) -> None:
        for callback in self.sender.acked(REPLICA, self.to_owner.pop(index)):
            callback()

    # checks
    def replica_messages(self) -> dict[int, bytes]:
        assert self.copies is not None
        copy = self.copies.copies_of(CLIENT).get(OWNER)
        return {} if copy is None else dict(copy.messages)

    def check_passed_writes_are_on_the_replica(self) -> None:
        passed = self.ledger.advance(lambda n: True, True)
        held = {s for (t, k) in self.disk.rows for s in [int.from_bytes(k[-8:], "big")] if t == "replica"}
        for seq in self.owner_messages:
            if self.last_write_of[seq] <= passed:
                assert seq in held, f"message {seq} passed the barrier but the replica's disk lacks it"


def run(seed: int, steps: int = 120) -> None:
    rng = random.Random(seed)
    world = World(rng)
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.30:
            world.put()
        elif roll < 0.42:
            world.delete()
        elif roll < 0.70 and world.to_replica:
            world.deliver(rng.randrange(len(world.to_replica)))  # any order
        elif roll < 0.75 and world.to_replica:
            world.to_replica.pop(rng.randrange(len(world.to_replica)))  # dropped
        elif roll < 0.90 and world.to_owner:
            world.ack(rng.randrange(len(world.to_owner)))
        elif roll < 0.95:
            world.to_replica.clear()  # the link breaks: what was on it is lost; the link comes back
            world.to_owner.clear()
            world.resend()
        elif roll < 0.98:
            world.crash_replica()
        else:
            world.copies.prune(OWNER, world.receiver.acknowledgeable(OWNER)[1])  # type: ignore[union-attr]
        world.check_passed_writes_are_on_the_replica()
    world.resend()  # heal: everything unacknowledged goes again, in order, and is delivered
    for _ in range(10_000):
        if not world.to_replica and not world.to_owner:
            break
        if world.to_replica:
            world.deliver(0)
        else:
            world.ack(0)
    assert world.sender.pending_count() == 0
    assert world.replica_messages() == world.owner_messages
    assert world.ledger.advance(lambda n: True, True) == world.ledger.last and world.ledger.pending() == 0


def test_simulated_histories() -> None:
    seeded_runs("queue replica simulation", run)
