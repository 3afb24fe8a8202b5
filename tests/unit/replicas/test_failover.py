"""Failover's pure parts (vmqpy.replicas.failover): merging copies, the failover timeout, malformed answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from tests.unit.replicas.tables import MemoryTable
from vmqpy.broker.core.lineage import names_record
from vmqpy.broker.core.session import Session
from vmqpy.broker.core.stored_will import StoredWill
from vmqpy.replicas.copies import Copy, ReplicaCopies
from vmqpy.replicas.failover import Failover, merge_copies
from vmqpy.replicas.ops import Op
from vmqpy.sessions.handover import SessionImage, outgoing_record
from vmqpy.sessions.message import Message, encode_record
from vmqpy.sessions.names import Entry
from vmqpy.sessions.parts import Outgoing


class Links:
    def __init__(self, members: list[str], up: set[str]) -> None:
        self.members, self.up = members, up
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def member_names(self) -> list[str]:
        return self.members

    def is_reachable(self, node: str) -> bool:
        return node in self.up

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        self.sent.append((node, body))
        return True


class NoBroker:
    def adopt_offline(self, image: SessionImage, now: float) -> Session:
        raise AssertionError("not expected")

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None:
        raise AssertionError("not expected")

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None) -> bool:
        raise AssertionError("not expected")

    def inherit_lineage(self, client_id: str, entries: list[Entry], sender: str) -> None:
        raise AssertionError("not expected")

    def owner_of(self, client_id: str) -> str | None:
        raise AssertionError("not expected")


def failover(links: Links, timeout: float = 0.0) -> Failover:
    copies = ReplicaCopies(MemoryTable())
    return Failover("me", copies, links, NoBroker(), lambda: Future(), timeout)


def test_copies_of_one_owner_from_two_replicas_merge_into_their_union() -> None:
    merged: dict[str, Copy] = {}
    merge_copies(merged, "a", Copy(b"s", {1: b"x", 2: b"y"}, {5}))
    merge_copies(merged, "a", Copy(None, {2: b"y", 3: b"z"}, {6}))
    merge_copies(merged, "b", Copy(None, {1: b"other"}, set()))
    assert merged["a"].session == b"s" and merged["a"].messages == {1: b"x", 2: b"y", 3: b"z"}
    assert merged["a"].incoming == {5, 6} and merged["b"].messages == {1: b"other"}
    merge_copies(merged, "a", Copy(None, {}, set(), lineage={1: b"n1", 2: b"n2"}))
    merge_copies(merged, "a", Copy(None, {}, set(), lineage={1: b"n2", 2: b"n3"}))  # another replica's numbering
    assert sorted(merged["a"].lineage.values()) == [b"n1", b"n2", b"n3"]


def test_a_fetch_answer_carries_the_lineage_and_the_recovery_hands_it_to_the_broker() -> None:
    names = names_record([("old", 4, b"d" * 8)])
    links = Links(["me", "r"], {"r"})
    replica = failover(links)
    replica.copies.apply("a", Op("session", "c", value=b"s"), 1)
    replica.copies.apply("a", Op("lin", "c", value=names), 2)
    replica.on_control("x", {"op": "rep_fetch", "client_id": "c", "ref": 4})
    assert links.sent[0][1]["lineage"] == [names]
    broker = RecordingBroker()
    node = Failover("me", ReplicaCopies(MemoryTable()), links, broker, lambda: Future(), 0)
    node._adopt("c", replica.copies.copies_of("c"), create=True)
    assert broker.lineages == [("c", "a", [("old", 4, b"d" * 8)])]


def test_an_owner_that_left_is_taken_at_once_a_member_after_the_timeout() -> None:
    links = Links(["me", "a"], set())
    slow = failover(links, timeout=3600)
    assert slow._remaining("gone") == 0.0  # not a member any more
    assert slow._remaining("a") > 3000  # unreachable for less than the timeout
    assert failover(links, timeout=0)._remaining("a") == 0.0
    slow.on_reachability("a", False)
    slow.on_reachability("a", True)
    assert "a" not in slow._down_since


def test_a_fetch_is_answered_with_the_copies_of_other_owners_and_done() -> None:
    links = Links(["me", "r"], {"r"})
    node = failover(links)
    node.copies.apply("a", Op("put", "c", seq=1, value=b"m"), 1)
    node.on_control("r", {"op": "rep_fetch", "client_id": "c", "ref": 4})
    node.on_control("r", {"op": "rep_fetch", "client_id": 5, "ref": "x"})  # malformed: logged, not answered
    assert [body for _n, body in links.sent] == [
        {"op": "rep_copy", "ref": 4, "owner": "a", "session": None, "messages": [[1, b"m"]], "incoming": [],
         "lineage": []},
        {"op": "rep_copy", "ref": 4, "done": True},
    ]
    node.on_control("r", {"op": "rep_count", "owner": "a", "ref": 9})
    assert links.sent[-1][1] == {"op": "rep_counted", "ref": 9, "counts": {"c": 1}}
    node.on_control("r", {"op": "rep_forget", "client_id": "c", "owner": "a"})
    assert node.copies.copies_of("c") == {}
    node.on_control("r", {"op": "rep_copy", "ref": 77, "owner": 1})  # an answer nobody waits for: ignored


class RecordingBroker:
    def __init__(self) -> None:
        self.adopted: list[tuple[str, int]] = []
        self.sessions: set[str] = set()
        self.owners: dict[str, str] = {}
        self.wills: list[tuple[str, StoredWill]] = []
        self.lineages: list[tuple[str, str, list[Entry]]] = []

    def adopt_offline(self, image: SessionImage, now: float) -> Session:
        self.sessions.add(image.client_id)
        return Session(image.client_id, protocol_level=5, expiry_interval=None, max_inflight=10, max_online=10,
                       max_offline=10)

    def adopt_will(self, client_id: str, will: StoredWill, now: float) -> None:
        self.wills.append((client_id, will))

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float, origin: str | None = None) -> bool:
        if outs:
            self.adopted.append((client_id, len(outs)))
        return client_id in self.sessions

    def inherit_lineage(self, client_id: str, entries: list[Entry], sender: str) -> None:
        self.lineages.append((client_id, sender, sorted(entries)))

    def owner_of(self, client_id: str) -> str | None:
        return self.owners.get(client_id)


def test_the_copies_of_a_node_an_operator_removed_are_taken_at_once_before_its_removal_is_known() -> None:
    """`cluster leave node=DEAD`: the owner records naming this node can arrive before the membership change;
    the dead node is still a member here, unreachable for less than the failover timeout. Its copies must be
    adopted at once, not after queue.failover_timeout (by then the client may have moved elsewhere)."""
    ops = [Op("put", "c", seq=seq, value=_record(seq)) for seq in (1, 2)]
    broker = asyncio.run(recover_released(ops, lambda b: bool(b.adopted)))
    assert broker.adopted == [("c", 2)]


async def recover_released(ops: list[Op], done_when: Callable[[RecordingBroker], bool]) -> RecordingBroker:
    """The copies of client id c written by owner "dead" (`ops`, numbered in order), then `cluster leave` of
    that node seen here as `released` while it is still a member here (unreachable for less than the failover
    timeout); what the broker got once `done_when` says so (or after 0.5 s)."""
    links = Links(["me", "dead"], set())
    broker = RecordingBroker()
    done: Future[None] = Future()
    done.set_result(None)
    node = Failover("me", ReplicaCopies(MemoryTable()), links, broker, lambda: done, 3600)
    for version, op in enumerate(ops, 1):
        node.copies.apply("dead", op, version)
    node.on_reachability("dead", False)
    node.recover("c", released="dead")
    for _ in range(50):
        await asyncio.sleep(0.01)
        if done_when(broker):
            break
    return broker


def _record(seq: int) -> bytes:
    message = Message("t", f"m{seq}".encode(), 1)
    return encode_record(outgoing_record(Outgoing(seq, message, 1, False)))


def test_a_recovery_whose_session_moved_while_it_waited_is_passed_to_the_new_node() -> None:
    """A CONNECT here recreated the session of an unreachable owner; its copies wait for the failover timeout;
    meanwhile the client connects on B, which takes the (empty) session over. When the timeout ends, B is asked
    to recover it (`rep_recover`); a node asked so recovers a session it holds, and ignores one it does not."""
    async def scenario() -> tuple[list[tuple[str, dict[str, Any]]], Links]:
        links = Links(["me", "dead", "b"], {"b"})
        broker = RecordingBroker()
        broker.owners["c"] = "b"
        node = Failover("me", ReplicaCopies(MemoryTable()), links, broker, lambda: Future(), 0.05)
        node.copies.apply("dead", Op("put", "c", seq=1, value=_record(1)), 1)
        node.on_reachability("dead", False)
        node.recover("c")
        answered: set[int] = set()
        for _ in range(100):  # b answers each fetch with nothing
            await asyncio.sleep(0.01)
            for _peer, body in links.sent:
                if body.get("op") == "rep_fetch" and body["ref"] not in answered:
                    answered.add(body["ref"])
                    node.on_control("b", {"op": "rep_copy", "ref": body["ref"], "done": True})
            if any(body.get("op") == "rep_recover" for _p, body in links.sent):
                break
        assert broker.adopted == []
        other_links = Links(["b", "me"], {"me"})
        other_broker = RecordingBroker()
        other = Failover("b", ReplicaCopies(MemoryTable()), other_links, other_broker, lambda: Future(), 0)
        other.on_control("me", {"op": "rep_recover", "client_id": "c"})  # b has no session c: ignored
        await asyncio.sleep(0.01)
        assert other_links.sent == []
        other_broker.sessions.add("c")
        other.on_control("me", {"op": "rep_recover", "client_id": "c"})
        await asyncio.sleep(0.01)
        return links.sent, other_links

    sent, other_links = asyncio.run(scenario())
    assert ("b", {"op": "rep_recover", "client_id": "c"}) in sent
    assert [body["op"] for _n, body in other_links.sent] == ["rep_fetch"]


def test_the_will_kept_in_a_lost_owners_session_record_goes_to_the_broker_with_its_messages() -> None:
    """The copy's session record carries the will of a client connected to the owner when it died
    (vmqpy.broker.core.stored_will): the recovery hands it to the broker, which publishes it when due."""
    will = StoredWill(Message("will/c", b"gone", 1, publisher="c"), 0.0, None, "alice")
    ops = [Op("session", "c", value=encode_record([5, 600.0, None, will.pack()])),
           Op("put", "c", seq=1, value=_record(1))]
    broker = asyncio.run(recover_released(ops, lambda b: bool(b.wills)))
    adopted, wills = broker.adopted, broker.wills
    assert adopted == [("c", 1)]
    assert [(cid, w.message.topic, w.message.payload, w.username) for cid, w in wills] == [
        ("c", "will/c", b"gone", "alice")]
