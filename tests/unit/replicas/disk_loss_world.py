"""The world of the disk-loss simulation (test_simulation_disk_loss.py, which says what it checks; the owner-loss
simulation builds on it): one owner writing each operation to two replica nodes over in-memory links that drop,
reorder and break, and replicas that crash keeping their disk or losing it (then refilled by the owner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tests.unit.replicas.simulation import Owner
from tests.unit.replicas.tables import MemoryTable
from vmqpy.cluster.forwarding import ForwardReceiver
from vmqpy.replicas.copies import ReplicaCopies
from vmqpy.replicas.ops import Op, decode_op, encode_op

OWNER, CLIENT = "owner", "c"
REPLICAS = ("r1", "r2")
SESSION_RECORD = b"session"


@dataclass
class Replica:
    """One replica node: its disk, what its memory rebuilds from it, and its link with the owner."""

    disk: MemoryTable = field(default_factory=MemoryTable)
    receiver: ForwardReceiver = field(default_factory=ForwardReceiver)
    copies: ReplicaCopies | None = None
    to_replica: list[tuple[int, int, Any]] = field(default_factory=list)  # (seq, low, record) on the link
    to_owner: list[int] = field(default_factory=list)  # cumulative acks on the link
    disks_lost: int = 0

    def __post_init__(self) -> None:
        self.copies = ReplicaCopies(self.disk)

    def messages(self) -> dict[int, bytes]:
        assert self.copies is not None
        copy = self.copies.copies_of(CLIENT).get(OWNER)
        return {} if copy is None else dict(copy.messages)


@dataclass
class World(Owner):
    replicas: dict[str, Replica] = field(default_factory=lambda: {name: Replica() for name in REPLICAS})
    owner_messages: dict[int, bytes] = field(default_factory=dict)
    last_write_of: dict[int, int] = field(default_factory=dict)  # message seq -> the last write touching it
    next_seq: int = 1

    # the owner
    def write(self, op: Op, targets: tuple[str, ...] = REPLICAS) -> int:
        write = self.ledger.issue(list(targets), 1 + len(REPLICAS))
        record = encode_op(op)
        for name in targets:
            seq, low = self.sender.add(name, record, partial(self.ledger.acked, write, name), lambda _w: None)
            self.replicas[name].to_replica.append((seq, low, record))
        return write

    def put(self) -> None:
        seq = self.next_seq
        self.next_seq += 1
        self.owner_messages[seq] = f"m{seq}".encode()
        self.last_write_of[seq] = self.write(Op("put", CLIENT, seq=seq, value=self.owner_messages[seq]))

    def delete(self) -> None:
        if self.owner_messages:
            seq = self.rng.choice(sorted(self.owner_messages))
            del self.owner_messages[seq]
            self.write(Op("del", CLIENT, seq=seq))

    def resend(self, name: str) -> None:
        self.replicas[name].to_replica += self.unacknowledged(name)

    def refill(self, name: str) -> None:
        """The rebalancer's answer to a replica that came back empty: the session's whole state, then each
        message; the messages' latest writes are now these (the other replica has them from before)."""
        self.write(Op("sync", CLIENT, value=SESSION_RECORD, incoming=()), (name,))
        for seq, payload in sorted(self.owner_messages.items()):
            self.write(Op("put", CLIENT, seq=seq, value=payload), (name,))

    # a replica
    def deliver(self, name: str, index: int) -> None:
        replica = self.replicas[name]
        seq, low, record = replica.to_replica.pop(index)
        assert replica.copies is not None
        if replica.receiver.accept(OWNER, seq, low, self.epoch):
            replica.copies.apply(OWNER, decode_op(record), seq)
        replica.to_owner.append(replica.receiver.acknowledgeable(OWNER)[1])  # on disk at once (its barrier)

    def ack(self, name: str, index: int) -> None:
        for callback in self.sender.acked(name, self.replicas[name].to_owner.pop(index)):
            callback()

    def break_link(self, name: str) -> None:
        replica = self.replicas[name]
        replica.to_replica.clear()
        replica.to_owner.clear()
        self.resend(name)

    def crash(self, name: str, lose_disk: bool) -> None:
        replica = self.replicas[name]
        if lose_disk:
            replica.disk = MemoryTable()
            replica.disks_lost += 1
        replica.receiver = ForwardReceiver()
        replica.copies = ReplicaCopies(replica.disk)
        replica.copies.load()
        self.break_link(name)
        if lose_disk:
            self.refill(name)

    # checks
    def holds_everything(self, name: str) -> bool:
        return self.replicas[name].messages() == self.owner_messages

    def check_passed_writes_are_on_a_replica(self) -> None:
        passed = self.ledger.advance(lambda n: True, True)
        on_disk = {name: held_on_disk(replica.disk) for name, replica in self.replicas.items()}
        for seq in self.owner_messages:
            if self.last_write_of[seq] <= passed:
                assert any(seq in held for held in on_disk.values()), \
                    f"message {seq} passed the barrier but no replica's disk holds it ({on_disk})"


def held_on_disk(disk: MemoryTable) -> set[int]:
    """The message seqs in a replica's table: keys owner NUL client NUL 'm' + 8-byte seq (copies.py)."""
    held = set()
    for table, key in disk.rows:
        if table == "replica":
            kind = key.split(b"\0", 2)[2]
            if kind[:1] == b"m":
                held.add(int.from_bytes(kind[1:9], "big"))
    return held
