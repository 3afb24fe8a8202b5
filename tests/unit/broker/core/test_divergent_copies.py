"""Divergent copies through the broker's port (vmqpy.broker.core.migration): a session recovered here from an old
owner's replica copies, then that old owner's own handover of the same queue. One real Broker (node b) over
an in-memory metadata store and a real storage file."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

from tests.unit.broker.fakes import MemoryMetadata, RecordingSink
from tests.unit.replicas.tables import MemoryTable
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.config import Config
from vmqpy.replicas.copies import ReplicaCopies
from vmqpy.replicas.failover import Failover
from vmqpy.replicas.ops import Op
from vmqpy.sessions.handover import SessionImage, pack_messages, unpack_messages
from vmqpy.sessions.message import Message
from vmqpy.sessions.parts import Outgoing, OutState
from vmqpy.storage import Storage


def old_owner_queue(n: int) -> list[Outgoing]:
    """Messages 1..n as the old owner numbered them (its replica copies and its handover carry these)."""
    return [Outgoing(seq, Message(f"t/{seq}", f"m{seq}".encode(), 2, forward_id=1000 + seq), 2, False, [])
            for seq in range(1, n + 1)]


def queued(broker: Broker, client_id: str) -> list[str]:
    session = broker.sessions[client_id]
    return sorted([o.message.topic for o in session.queue] + [o.message.topic for o in session.inflight.values()])


def test_the_old_owners_handover_adds_only_what_the_recovery_did_not_bring(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    assert broker.migration.adopt_messages("c1", old_owner_queue(3), 100.0, origin="a")  # recovered from A's copies
    # the subscriber took message 1 and acknowledged it: it is gone from the queue
    session = broker.sessions["c1"]
    session.forget_upto(session.queue[0].seq)
    assert queued(broker, "c1") == ["t/2", "t/3"]
    # A comes back with its old disk and hands over all it had, and one message its replicas never got
    assert broker.migration.adopt_messages("c1", old_owner_queue(4), 101.0)
    assert queued(broker, "c1") == ["t/2", "t/3", "t/4"]
    assert broker.metrics["handover_already_recovered"] == 3
    # the same batch again (resent after a broken link): nothing twice
    assert broker.migration.adopt_messages("c1", old_owner_queue(4), 102.0)
    assert queued(broker, "c1") == ["t/2", "t/3", "t/4"]


def test_copies_fetched_again_are_not_taken_twice(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    broker.migration.adopt_messages("c1", old_owner_queue(2), 100.0, origin="a")
    broker.migration.adopt_messages("c1", old_owner_queue(3), 101.0, origin="a")
    assert queued(broker, "c1") == ["t/1", "t/2", "t/3"]
    assert broker.metrics["recovered_already_adopted"] == 2


def test_a_plain_handover_takes_everything(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """No recovery happened for the session: a handover is a handover (numbers may repeat across owners)."""
    broker, _metadata = node_b
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    broker.migration.adopt_messages("c1", old_owner_queue(2), 100.0)
    broker.migration.adopt_messages("c1", old_owner_queue(2), 101.0)
    assert queued(broker, "c1") == ["t/1", "t/1", "t/2", "t/2"]
    assert broker.metrics["handover_already_recovered"] == 0


def test_an_in_flight_copy_is_named_before_it_is_renumbered(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    [out] = old_owner_queue(1)
    out.packet_id, out.state = 7, OutState.PUBLISHED
    broker.migration.adopt_messages("c1", [out], 100.0, origin="a")
    assert list(broker.sessions["c1"].inflight) == [7]
    broker.migration.adopt_messages("c1", old_owner_queue(1), 101.0)  # A hands over the same message, queued
    assert queued(broker, "c1") == ["t/1"]


def test_the_lineage_survives_a_restart_and_goes_with_the_session(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "c.db")
    storage.open()
    try:
        broker = Broker(Config(nodename="c"), SessionStore(storage), MemoryMetadata())
        broker.nodes = lambda: ["a", "b", "c"]
        broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
        broker.migration.adopt_messages("c1", old_owner_queue(2), 100.0, origin="a")
        storage.barrier().result(5)
        restarted = Broker(Config(nodename="c"), SessionStore(storage), MemoryMetadata())
        restarted.nodes = lambda: ["a", "b", "c"]
        restarted.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 101.0)
        restarted.migration.adopt_messages("c1", old_owner_queue(2), 101.0)
        assert queued(restarted, "c1") == []  # its own queue was not loaded here; the handover is skipped
        assert restarted.metrics["handover_already_recovered"] == 2
    finally:
        storage.close()


def test_the_old_owners_image_does_not_bring_back_completed_qos2_state(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    """Recovered with packet id 7 awaiting PUBREL; the PUBREL came on this node; then the old owner's image
    (still listing 7) arrives: 7 stays completed, so the publisher's next QoS 2 PUBLISH with id 7 is new."""
    broker, _metadata = node_b
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7]), 100.0)  # the recovery
    broker.migration.adopt_messages("c1", old_owner_queue(1), 100.0, origin="a")
    session = broker.sessions["c1"]
    assert session.awaiting_release == {7}
    assert session.release(7)  # PUBREL received here
    broker.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7, 9]), 101.0)  # A's handover
    assert session.awaiting_release == set()
    assert broker.metrics["handover_image_ignored"] == 1
    # a session never recovered here merges a handed-over image as before
    broker.migration.adopt_offline(SessionImage("c2", True, 5, 3600.0), 100.0)
    broker.migration.adopt_offline(SessionImage("c2", True, 5, 3600.0, awaiting_release=[3]), 101.0)
    assert broker.sessions["c2"].awaiting_release == {3}


def test_the_lineage_goes_with_the_session_to_a_third_node(tmp_path: Path) -> None:
    """C recovered the session from A's copies; the client moves on to D (a connect there, or C hands it over
    when it leaves); then A comes back with its old disk and hands its old queue over to D: D takes only what
    neither C nor D ever had, and ignores A's image, as C would have."""
    brokers: dict[str, Broker] = {}
    storages = []
    try:
        for node in ("c", "d"):
            storage = Storage(tmp_path / f"{node}.db")
            storage.open()
            storages.append(storage)
            brokers[node] = Broker(Config(nodename=node), SessionStore(storage), MemoryMetadata())
            brokers[node].nodes = lambda: ["a", "b", "c", "d"]
        c, d = brokers["c"], brokers["d"]
        c.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7]), 100.0)  # C's recovery
        c.migration.adopt_messages("c1", old_owner_queue(3), 100.0, origin="a")
        c.sessions["c1"].forget_upto(c.sessions["c1"].queue[0].seq)  # message 1 delivered and acknowledged on C
        assert c.sessions["c1"].release(7)  # and the PUBREL of packet id 7 came on C

        image = c.migration.hand_over("c1", False, "d", 101.0)  # the handover C -> D, through the frame's encoding
        assert image.lineage
        d.migration.adopt_offline(SessionImage.unpack(image.pack(), source="c"), 101.0)
        outs = c.migration.pending_for_handover("c1", 0)
        assert outs is not None
        assert d.migration.adopt_messages("c1", unpack_messages(pack_messages(outs)), 101.0, source="c")
        assert queued(d, "c1") == ["t/2", "t/3"]  # C's messages, under C's numbers, taken whole
        c.migration.handed_over("c1", outs[-1].seq)
        assert c.migration.finish_handover("c1", force=True)

        # A is back with its old disk: its image (packet id 7 still awaiting PUBREL) and its whole old queue
        d.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7], source="a"), 102.0)
        assert d.sessions["c1"].awaiting_release == set() and d.metrics["handover_image_ignored"] == 1
        assert d.migration.adopt_messages("c1", old_owner_queue(4), 102.0, source="a")
        assert queued(d, "c1") == ["t/2", "t/3", "t/4"]  # only the message its replicas never had
        assert d.metrics["handover_already_recovered"] == 3
    finally:
        for storage in storages:
            storage.close()


def test_a_connect_on_the_third_node_takes_the_lineage_with_the_image(tmp_path: Path) -> None:
    storage_c, storage_d = Storage(tmp_path / "c.db"), Storage(tmp_path / "d.db")
    storage_c.open()
    storage_d.open()
    try:
        c = Broker(Config(nodename="c"), SessionStore(storage_c), MemoryMetadata())
        d = Broker(Config(nodename="d"), SessionStore(storage_d), MemoryMetadata())
        c.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
        c.migration.adopt_messages("c1", old_owner_queue(2), 100.0, origin="a")
        image = SessionImage.unpack(c.migration.hand_over("c1", False, "d", 101.0).pack(), source="c")
        sink = RecordingSink()
        d.open_session("c1", 5, False, 3600.0, sink, 101.0, image=image)
        assert d.migration.adopt_messages("c1", old_owner_queue(3), 102.0, source="a")  # A's handover after its return
        assert queued(d, "c1") == ["t/3"]
    finally:
        storage_c.close()
        storage_d.close()


class ReplicaOn:
    """A queue replica node for one owner: the owner's journal writes, applied in order to real copies."""

    def __init__(self, owner: str) -> None:
        self.owner, self.copies, self.number = owner, ReplicaCopies(MemoryTable()), 0

    def _apply(self, op: Op) -> None:
        self.number += 1
        self.copies.apply(self.owner, op, self.number)

    def message(self, client_id: str, seq: int, record: bytes) -> None:
        self._apply(Op("put", client_id, seq=seq, value=record))

    def message_gone(self, client_id: str, seq: int) -> None:
        self._apply(Op("del", client_id, seq=seq))

    def incoming(self, client_id: str, packet_id: int, present: bool) -> None:
        self._apply(Op("in", client_id, packet_id=packet_id, present=present))

    def session(self, client_id: str, record: bytes) -> None:
        self._apply(Op("session", client_id, value=record))

    def lineage(self, client_id: str, names: bytes) -> None:
        self._apply(Op("lin", client_id, value=names))

    def drop(self, client_id: str) -> None:
        self._apply(Op("drop", client_id))


def test_the_lineage_goes_with_the_queue_replicas_to_a_node_that_recovers_from_them(tmp_path: Path) -> None:
    """C recovered the session from A's copies and is lost too, with its disk; D recovers it from C's copies on
    B, which hold C's lineage as well; then A comes back with its old disk and hands over to D: D takes only
    what neither C nor D ever had."""
    b = ReplicaOn("c")
    storage_c, storage_d = Storage(tmp_path / "c.db"), Storage(tmp_path / "d.db")
    storage_c.open()
    storage_d.open()
    try:
        c = Broker(Config(nodename="c"), SessionStore(storage_c, b), MemoryMetadata())
        d = Broker(Config(nodename="d"), SessionStore(storage_d), MemoryMetadata())
        c.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)  # C's recovery of A's copies
        c.migration.adopt_messages("c1", old_owner_queue(3), 100.0, origin="a")
        c.sessions["c1"].forget_upto(c.sessions["c1"].queue[0].seq)  # message 1 delivered on C
        # C is lost; D recovers the session from C's copies on B (what Failover._adopt does)
        failover = Failover("d", ReplicaCopies(MemoryTable()), NoLinks(), d.migration, lambda: Future())
        assert failover._adopt("c1", b.copies.copies_of("c1"), create=True) == 2
        assert queued(d, "c1") == ["t/2", "t/3"] and d.metrics["lineage_inherited"] == 3
        # A is back with its old disk: its image and its whole old queue
        d.migration.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7], source="a"), 102.0)
        assert d.metrics["handover_image_ignored"] == 1
        assert d.migration.adopt_messages("c1", old_owner_queue(4), 102.0, source="a")
        assert queued(d, "c1") == ["t/2", "t/3", "t/4"]
    finally:
        storage_c.close()
        storage_d.close()


class NoLinks:
    def member_names(self) -> list[str]:
        return []

    def is_reachable(self, node: str) -> bool:
        return False

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        return False
