"""The leave of a node as its driver runs it (vmqpy.cluster.departure): each way a leave ends, on a scripted
cluster and broker (the real links are tests/integration/test_membership_churn.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from vmqpy.cluster.departure import Departure
from vmqpy.cluster.errors import CommandRefused
from vmqpy.cluster.leaving import LeaveState

ME, COMMANDER, OTHER = "n3@h", "n1@h", "n2@h"


@dataclass
class ScriptedSession:
    client_id: str
    persistent: bool = True
    online: bool = False
    moving_to: str | None = None
    queue: list[object] = field(default_factory=list)
    inflight: dict[int, object] = field(default_factory=dict)


class ScriptedBroker:
    """Sessions that move when told to, and are gone once `hand_over_all()` says their handover ended."""

    def __init__(self, *client_ids: str) -> None:
        self.sessions = {cid: ScriptedSession(cid, queue=[object()]) for cid in client_ids}

    def local_sessions(self) -> list[ScriptedSession]:
        return list(self.sessions.values())

    def move_session(self, client_id: str, target: str) -> bool:
        self.sessions[client_id].moving_to = target
        return True

    def hand_over_all(self) -> None:
        self.sessions.clear()


class ScriptedCluster:
    def __init__(self) -> None:
        self.name = ME
        self.members = {ME: None, COMMANDER: None, OTHER: None}
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.removals: list[tuple[str, str | None]] = []
        self.no_other_member = False

    def member_names(self) -> list[str]:
        return sorted(self.members)

    def send_control(self, node: str, body: dict[str, Any]) -> bool:
        self.sent.append((node, body))
        return True

    def check_leave(self, node: str) -> str:
        if self.no_other_member:
            raise CommandRefused(f"{node} cannot leave now: no other member is reachable to keep the removal", 503)
        return node

    def is_reachable(self, node: str) -> bool:
        return True

    async def remove_member(self, name: str, witness: str | None = None) -> list[str]:
        self.removals.append((name, witness))
        return []


@dataclass
class Node:
    departure: Departure
    cluster: ScriptedCluster
    broker: ScriptedBroker
    listening: list[bool]


def leaving_node(*client_ids: str) -> Node:
    cluster, broker, listening = ScriptedCluster(), ScriptedBroker(*client_ids), [True]
    departure = Departure(cast(Any, cluster), cast(Any, None), cast(Any, broker),
                          stop_serving=lambda _reference: listening.append(False),
                          serve_again=lambda: listening.append(True))
    return Node(departure, cluster, broker, listening)


async def until(condition: Any, seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_drain_that_settles_removes_the_node_with_the_commander_as_witness() -> None:
    node = leaving_node("a", "b")
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 5.0})
    assert node.departure.state is LeaveState.DRAINING and node.listening[-1] is False
    await until(lambda: node.departure.settled)
    assert {s.moving_to for s in node.broker.sessions.values()} <= {COMMANDER, OTHER}
    node.broker.hand_over_all()
    await until(lambda: node.cluster.removals)
    assert node.cluster.removals == [(ME, COMMANDER)]
    final = [body for peer, body in node.cluster.sent if body.get("op") == "leave_progress"]
    assert final and final[0]["query"] == 0 and final[0]["moving_total"] == 2, final  # before the removal
    node.departure.removed()  # node.py, once the removal is in
    assert node.departure.progress()["state"] == LeaveState.LEFT.value


async def test_a_drain_that_does_not_settle_in_time_is_given_up_and_the_node_serves() -> None:
    node = leaving_node("stuck")
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 0.3})
    await until(lambda: node.departure.state is LeaveState.SERVING)
    assert node.listening == [True, False, True]
    assert node.cluster.removals == []
    assert "1 sessions with 1 messages were still on it after 0.3s" in node.departure.outcome
    assert node.departure.leaving() is None


@pytest.mark.parametrize("abort", ["leave_abort", "join"])
async def test_a_leave_abort_or_a_join_while_draining_gives_the_leave_up(abort: str) -> None:
    node = leaving_node("stuck")
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 60.0})
    await until(lambda: node.departure.settled)
    assert node.departure.leaving() is not None
    if abort == "join":
        assert "given up" in (await node.departure.before_join() or "")
    else:
        node.departure.on_control(COMMANDER, {"op": "leave_abort"})
    assert node.departure.state is LeaveState.SERVING and node.listening[-1] is True
    node.broker.hand_over_all()  # the handover under way finishes later: the node stays, it does not leave
    await asyncio.sleep(0.3)
    assert node.cluster.removals == [] and node.departure.state is LeaveState.SERVING


async def test_a_removal_no_other_member_can_keep_is_given_up() -> None:
    node = leaving_node()
    node.cluster.no_other_member = True
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 5.0})
    await until(lambda: node.departure.state is LeaveState.SERVING)
    assert node.listening == [True, False, True]
    assert "no other member is reachable" in node.departure.outcome


async def test_the_commander_reports_a_leave_given_up_with_its_reason() -> None:
    commander = leaving_node()
    commander.cluster.name = commander.departure.name = COMMANDER

    def answer(node: str, body: dict[str, Any]) -> bool:
        if body.get("op") == "leave_status":
            commander.departure.on_control(node, {"op": "leave_progress", "query": body["query"], "state": "serving",
                                                  "settled": False, "sessions": 1, "messages": 4, "moving_total": 0,
                                                  "outcome": "1 sessions with 4 messages were still on it after 1s"})
        return True

    commander.cluster.send_control = answer  # type: ignore[method-assign]
    with pytest.raises(CommandRefused) as refused:
        await commander.departure.leave(ME, 0.05, 1.0)
    assert refused.value.status == 503
    assert f"{ME} gave the leave up: 1 sessions with 4 messages were still on it after 1s" in str(refused.value)


async def test_a_join_while_the_node_removes_itself_waits_for_the_removal() -> None:
    node = leaving_node()
    release = asyncio.Event()
    removals = node.cluster.removals

    async def slow_removal(name: str, witness: str | None = None) -> list[str]:
        removals.append((name, witness))
        await release.wait()
        node.departure.removed()  # node.py's _on_removed, at the end of the removal
        return []

    node.cluster.remove_member = slow_removal  # type: ignore[method-assign]
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 5.0})
    await until(lambda: removals)
    join = asyncio.ensure_future(node.departure.before_join())
    await asyncio.sleep(0.1)
    assert not join.done(), "a join must not run while the node removes itself"
    release.set()
    assert await asyncio.wait_for(join, 5) is None
    assert node.departure.progress()["state"] == "left"  # the join then makes a new incarnation (cluster.join)


async def test_a_removal_that_fails_is_given_up_and_the_node_serves() -> None:
    node = leaving_node()

    async def broken_removal(name: str, witness: str | None = None) -> list[str]:
        raise OSError("storage is closed")

    node.cluster.remove_member = broken_removal  # type: ignore[method-assign]
    node.departure.on_control(COMMANDER, {"op": "leave_drain", "timeout": 5.0})
    await until(lambda: node.departure.state is LeaveState.SERVING)
    assert node.listening == [True, False, True]
    assert "its removal failed: OSError('storage is closed')" in node.departure.outcome
