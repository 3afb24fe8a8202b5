"""A node's state and the client operations it serves (vmqpy.facade.NodeFacade.node_state / serves), which
/health, the status rows and the status page's headline share: a table of the real netsplit policy
(vmqpy.cluster.policy) in each situation, with stand-ins for the cluster service and the node's lifecycle that
hold only the flags the facade reads."""

from __future__ import annotations

from typing import Any

import pytest

from vmqpy.cluster.policy import LEFT_REASON, NetsplitSettings, Policy
from vmqpy.cluster.view import View
from vmqpy.facade import NODE_STATES, NodeFacade

ALL = ["register", "publish", "subscribe", "unsubscribe"]
MEMBERS = ("a", "b", "c")
WHOLE = View("a", MEMBERS, frozenset(MEMBERS), (MEMBERS,), MEMBERS)
C_DOWN = View("a", MEMBERS, frozenset({"a", "b"}), (("a", "b"), ("c",)), ("a", "b"))


class Cluster:
    """What node_state asks of the cluster service, and the list the facade adds its handler of questions to."""

    def __init__(self, removed: bool) -> None:
        self.removed = removed
        self.control_handlers: list[Any] = []

    def health(self) -> tuple[bool, str]:
        return True, "all 3 members reachable"


class Lifecycle:
    def __init__(self, draining: str | None) -> None:
        self.draining = draining

    def drain_reason(self) -> str | None:
        return self.draining


def facade(policy: Policy, *, removed: bool = False, draining: str | None = None) -> NodeFacade:
    none: Any = None
    cluster: Any = Cluster(removed)
    lifecycle: Any = Lifecycle(draining)
    return NodeFacade(config=none, apply_setting=none, broker=none, metadata=none, storage=none, policy=policy,
                      connections=[], cluster=cluster, lifecycle=lifecycle)


def policy(view: View, settings: NetsplitSettings | None = None, left: bool = False,
           joining: bool = False) -> Policy:
    made = Policy(settings)
    made.view = view
    made.left = left
    made.joining = joining
    return made


@pytest.mark.parametrize(("made", "state", "serves"), [
    (policy(WHOLE), "ready", ALL),
    (policy(C_DOWN), "not ready", []),
    (policy(C_DOWN, NetsplitSettings(allow_publish=True)), "not ready", ["publish"]),
    (policy(C_DOWN, NetsplitSettings(True, True, True, True)), "not ready", ALL),
    (policy(C_DOWN, NetsplitSettings(readiness="majority")), "ready", ALL),
    (policy(WHOLE, NetsplitSettings(True, True, True, True), joining=True), "joining", []),
    (policy(WHOLE, NetsplitSettings(True, True, True, True), left=True), "left", []),
])
def test_state_and_serves(made: Policy, state: str, serves: list[str]) -> None:
    node = facade(made, removed=state == "left")
    assert node.node_state()[0] == state and state in NODE_STATES
    assert node.serves(state) == serves
    assert node.health()[0] == (state == "ready")  # /health: 200 only when ready
    if state == "left":
        assert node.health()[1] == LEFT_REASON


def test_a_draining_node_takes_no_new_client_but_serves_the_others() -> None:
    node = facade(policy(WHOLE), draining="draining (draining, 3 connections left)")
    assert node.node_state() == ("draining", "draining (draining, 3 connections left)")
    assert node.serves("draining") == ALL[1:]
    assert node.health() == (False, "draining (draining, 3 connections left)")
