"""Failover's pure parts (vmqpy.replicas.failover): merging copies, the failover timeout, malformed answers."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from tests.unit.replicas.test_copies import MemoryTable
from vmqpy.broker.handover import SessionImage
from vmqpy.broker.session import Outgoing, Session
from vmqpy.replicas.copies import Copy, ReplicaCopies
from vmqpy.replicas.failover import Failover, merge_copies
from vmqpy.replicas.ops import Op


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

    def adopt_messages(self, client_id: str, outs: list[Outgoing], now: float) -> bool:
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
        {"op": "rep_copy", "ref": 4, "owner": "a", "session": None, "messages": [[1, b"m"]], "incoming": []},
        {"op": "rep_copy", "ref": 4, "done": True},
    ]
    node.on_control("r", {"op": "rep_count", "owner": "a", "ref": 9})
    assert links.sent[-1][1] == {"op": "rep_counted", "ref": 9, "counts": {"c": 1}}
    node.on_control("r", {"op": "rep_forget", "client_id": "c", "owner": "a"})
    assert node.copies.copies_of("c") == {}
    node.on_control("r", {"op": "rep_copy", "ref": 77, "owner": 1})  # an answer nobody waits for: ignored
