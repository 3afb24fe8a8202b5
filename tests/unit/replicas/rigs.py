"""The queue replicas' owner side in unit tests: a replica transport that records what it is sent, one that applies
it to each node's copies when delivered, and a node a@h's replicator and sessions over them (test_owner.py,
test_rebalance.py, test_audit.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.unit.replicas.tables import MemoryTable, resolved
from vmqpy.broker.core.session import NullJournal, Session
from vmqpy.cluster.leader import ranking
from vmqpy.replicas.copies import ReplicaCopies
from vmqpy.replicas.ops import decode_op
from vmqpy.replicas.owner import QueueReplicator
from vmqpy.replicas.rebalancer import TICK, snapshot
from vmqpy.sessions.message import Message

MEMBERS = ["a@h", "b@h", "c@h"]


class RecordingReplicaTransport:
    """The replica transport (vmqpy.replicas.owner.ReplicaTransport, a ForwardDriver): records each forward with its
    callbacks; refuses those to a node in `full`. Not an asyncio transport (tests.unit.transports.FakeTransport)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Callable[[], None], Callable[[str], None]]] = []
        self.full: set[str] = set()

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool:
        assert on_ack is not None and on_fail is not None and size > 0
        if node in self.full:
            return False
        self.sent.append((node, record, on_ack, on_fail))
        return True


def make(reachable: set[str], strict: bool = True, replicas: int = 3, quorum: int = 3,
         transport: RecordingReplicaTransport | None = None) -> tuple[QueueReplicator, RecordingReplicaTransport]:
    transport = transport or RecordingReplicaTransport()
    replicator = QueueReplicator("a@h", lambda: MEMBERS, lambda n: n in reachable, transport, resolved,
                                 replicas=replicas, write_quorum=quorum, strict=lambda: strict)
    return replicator, transport


class Links:
    """The replica transport: what each node was sent, applied to that node's copies when delivered."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Callable[[], None], Callable[[str], None]]] = []
        self.copies: dict[str, ReplicaCopies] = {}
        self.numbers: dict[str, int] = {}

    def forward(self, node: str, record: Any, size: int, on_ack: Callable[[], None] | None = None,
                on_fail: Callable[[str], None] | None = None) -> bool:
        assert on_ack is not None and on_fail is not None
        self.sent.append((node, record, on_ack, on_fail))
        return True

    def deliver_all(self) -> list[tuple[str, str]]:
        """Deliver and acknowledge everything sent (and what the acknowledgements send): (node, kind) each."""
        done = []
        while self.sent:
            node, record, on_ack, _on_fail = self.sent.pop(0)
            number = self.numbers[node] = self.numbers.get(node, 0) + 1
            op = decode_op(record)
            self.copies.setdefault(node, ReplicaCopies(MemoryTable())).apply("a@h", op, number)
            done.append((node, op.kind))
            on_ack()
        return done

    def holds(self, node: str, client_id: str) -> tuple[object, ...] | None:
        copy = self.copies.get(node, ReplicaCopies(MemoryTable())).copies_of(client_id).get("a@h")
        return None if copy is None else (copy.session, dict(copy.messages), set(copy.incoming))


def replicating(members: list[str], reachable: Callable[[str], bool] = lambda n: True
                ) -> tuple[Links, QueueReplicator]:
    """Node a@h's replicator (R = 2, write quorum 2) over a fake transport, `members` read at each use."""
    links = Links()
    return links, QueueReplicator("a@h", lambda: members, reachable, links, resolved, replicas=2, write_quorum=2,
                                  strict=lambda: False)


def client_ids() -> tuple[str, str]:
    """A client id whose replica node moves from b to c when c joins a, b; one whose stays b."""
    moving = next(f"m{i}" for i in range(100) if ranking(f"m{i}", ["b@h", "c@h"])[0] == "c@h")
    staying = next(f"s{i}" for i in range(100) if ranking(f"s{i}", ["b@h", "c@h"])[0] == "b@h")
    return moving, staying


def session_with_messages(client_id: str, journal: NullJournal, count: int) -> Session:
    session = Session(client_id, protocol_level=5, expiry_interval=None, max_inflight=10, max_online=100,
                      max_offline=100, journal=journal)
    for n in range(count):
        session.deliver(Message("t", b"p%d" % n, 1), 1, False, [], 0.0)
    session.awaiting_release = {7}
    return session


def state_of(session: Session) -> tuple[object, ...]:
    record, incoming, messages = snapshot(session)
    return record, dict(messages), set(incoming)


async def ticks(n: int = 3) -> None:
    await asyncio.sleep(TICK * n)


def two_persistent_sessions(members: list[str]) -> tuple[Links, QueueReplicator, NullJournal, dict[str, Session],
                                                          str, str]:
    """a@h's replicator over `members` and two persistent sessions with three messages each: one whose replica
    node moves from b to c when c joins, one whose stays b (client_ids). (links, replicator, journal, sessions,
    moving, staying)."""
    links, replicator = replicating(members)
    journal = NullJournal()
    moving, staying = client_ids()
    sessions = {cid: session_with_messages(cid, journal, 3) for cid in (moving, staying)}
    return links, replicator, journal, sessions, moving, staying
