"""The netsplit policy: refusals while not ready, each lifted by its setting, majority readiness."""

from __future__ import annotations

import pytest

from vmqpy.cluster.policy import OPERATIONS, NetsplitSettings, Policy
from vmqpy.cluster.view import compute

A, B, C = "a@h", "b@h", "c@h"
READY = compute(A, [A, B, C], {A: {B, C}, B: {A, C}, C: {A, B}})
MINORITY = compute(C, [A, B, C], {A: {B}, B: {A}, C: set()})
MAJORITY_SIDE = compute(A, [A, B, C], {A: {B}, B: {A}, C: set()})


def test_single_node_is_always_ready() -> None:
    policy = Policy()
    assert policy.ready and all(policy.may(op) for op in OPERATIONS)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_not_ready_refuses_and_counts_each_operation(operation: str) -> None:
    policy = Policy()
    policy.view = MAJORITY_SIDE
    assert not policy.ready
    assert not policy.may(operation)
    assert policy.refused[operation] == 1
    policy.update(**{f"allow_{operation}": True})
    assert policy.may(operation)
    others = [op for op in OPERATIONS if op != operation]
    assert not any(policy.may(op) for op in others)


def test_majority_readiness_keeps_the_majority_side_serving() -> None:
    policy = Policy(NetsplitSettings(readiness="majority"))
    policy.view = MAJORITY_SIDE
    assert policy.ready and policy.may("register")
    policy.view = MINORITY
    assert not policy.ready and not policy.may("register")
    assert "unreachable: a@h, b@h" in policy.reason()


def test_ready_cluster_serves_everything() -> None:
    policy = Policy()
    policy.view = READY
    assert all(policy.may(op) for op in OPERATIONS) and not policy.refused


@pytest.mark.parametrize("view", [None, READY])
def test_a_joining_node_refuses_everything_whatever_the_settings_until_the_join_is_over(view: object) -> None:
    policy = Policy(NetsplitSettings(True, True, True, True))
    policy.view = view  # type: ignore[assignment]
    policy.joining = True
    assert not policy.ready and not any(policy.may(op) for op in OPERATIONS)
    assert policy.reason().startswith("joining a cluster")
    policy.joining = False
    assert policy.ready and all(policy.may(op) for op in OPERATIONS)
