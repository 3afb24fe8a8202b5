"""Divergent copies through the broker's port (vmqpy.broker.migration): a session recovered here from an old
owner's replica copies, then that old owner's own handover of the same queue. One real Broker (node b) over
an in-memory metadata store and a real storage file."""

from __future__ import annotations

from pathlib import Path

from tests.unit.broker.test_migration import MemoryMetadata, node_b
from vmqpy.broker.broker import Broker
from vmqpy.broker.handover import SessionImage
from vmqpy.broker.message import Message
from vmqpy.broker.persistence import SessionStore
from vmqpy.broker.session import Outgoing, OutState
from vmqpy.config import Config
from vmqpy.storage import Storage

__all__ = ["node_b"]  # the fixture, reused


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
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    assert broker.adopt_messages("c1", old_owner_queue(3), 100.0, origin="a")  # recovered from A's copies
    # the subscriber took message 1 and acknowledged it: it is gone from the queue
    session = broker.sessions["c1"]
    session.forget_upto(session.queue[0].seq)
    assert queued(broker, "c1") == ["t/2", "t/3"]
    # A comes back with its old disk and hands over all it had, and one message its replicas never got
    assert broker.adopt_messages("c1", old_owner_queue(4), 101.0)
    assert queued(broker, "c1") == ["t/2", "t/3", "t/4"]
    assert broker.metrics["handover_already_recovered"] == 3
    # the same batch again (resent after a broken link): nothing twice
    assert broker.adopt_messages("c1", old_owner_queue(4), 102.0)
    assert queued(broker, "c1") == ["t/2", "t/3", "t/4"]


def test_copies_fetched_again_are_not_taken_twice(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    broker.adopt_messages("c1", old_owner_queue(2), 100.0, origin="a")
    broker.adopt_messages("c1", old_owner_queue(3), 101.0, origin="a")
    assert queued(broker, "c1") == ["t/1", "t/2", "t/3"]
    assert broker.metrics["recovered_already_adopted"] == 2


def test_a_plain_handover_takes_everything(node_b: tuple[Broker, MemoryMetadata]) -> None:
    """No recovery happened for the session: a handover is a handover (numbers may repeat across owners)."""
    broker, _metadata = node_b
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    broker.adopt_messages("c1", old_owner_queue(2), 100.0)
    broker.adopt_messages("c1", old_owner_queue(2), 101.0)
    assert queued(broker, "c1") == ["t/1", "t/1", "t/2", "t/2"]
    assert broker.metrics["handover_already_recovered"] == 0


def test_an_in_flight_copy_is_named_before_it_is_renumbered(node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
    [out] = old_owner_queue(1)
    out.packet_id, out.state = 7, OutState.PUBLISHED
    broker.adopt_messages("c1", [out], 100.0, origin="a")
    assert list(broker.sessions["c1"].inflight) == [7]
    broker.adopt_messages("c1", old_owner_queue(1), 101.0)  # A hands over the same message, queued
    assert queued(broker, "c1") == ["t/1"]


def test_the_lineage_survives_a_restart_and_goes_with_the_session(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "c.db")
    storage.open()
    try:
        broker = Broker(Config(nodename="c"), SessionStore(storage), MemoryMetadata())
        broker.nodes = lambda: ["a", "b", "c"]
        broker.adopt_offline(SessionImage("c1", True, 5, 3600.0), 100.0)
        broker.adopt_messages("c1", old_owner_queue(2), 100.0, origin="a")
        storage.barrier().result(5)
        restarted = Broker(Config(nodename="c"), SessionStore(storage), MemoryMetadata())
        restarted.nodes = lambda: ["a", "b", "c"]
        restarted.adopt_offline(SessionImage("c1", True, 5, 3600.0), 101.0)
        restarted.adopt_messages("c1", old_owner_queue(2), 101.0)
        assert queued(restarted, "c1") == []  # its own queue was not loaded here; the handover is skipped
        assert restarted.metrics["handover_already_recovered"] == 2
    finally:
        storage.close()


def test_the_old_owners_image_does_not_bring_back_completed_qos2_state(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    """Recovered with packet id 7 awaiting PUBREL; the PUBREL came on this node; then the old owner's image
    (still listing 7) arrives: 7 stays completed, so the publisher's next QoS 2 PUBLISH with id 7 is new."""
    broker, _metadata = node_b
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7]), 100.0)  # the recovery
    broker.adopt_messages("c1", old_owner_queue(1), 100.0, origin="a")
    session = broker.sessions["c1"]
    assert session.awaiting_release == {7}
    assert session.release(7)  # PUBREL received here
    broker.adopt_offline(SessionImage("c1", True, 5, 3600.0, awaiting_release=[7, 9]), 101.0)  # A's handover
    assert session.awaiting_release == set()
    assert broker.metrics["handover_image_ignored"] == 1
    # a session never recovered here merges a handed-over image as before
    broker.adopt_offline(SessionImage("c2", True, 5, 3600.0), 100.0)
    broker.adopt_offline(SessionImage("c2", True, 5, 3600.0, awaiting_release=[3]), 101.0)
    assert broker.sessions["c2"].awaiting_release == {3}
