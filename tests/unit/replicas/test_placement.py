"""Which nodes hold a client id's queue copies (vmqpy.replicas.placement)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.leader import ranking
from vmqpy.replicas.placement import replica_nodes

MEMBERS = ["a@h", "b@h", "c@h", "d@h"]


@pytest.mark.parametrize(("members", "replicas", "expected_count"), [
    (MEMBERS, 1, 0),  # R = 1: only the owner
    (MEMBERS, 2, 1),
    (MEMBERS, 3, 2),
    (MEMBERS, 9, 3),  # never more than the other members
    (["a@h"], 2, 0),  # one member: nothing is replicated
    ([], 2, 0),
])
def test_count(members: list[str], replicas: int, expected_count: int) -> None:
    assert len(replica_nodes("client-1", "a@h", members, replicas)) == expected_count


def test_the_next_members_of_the_ranking_that_are_not_the_owner() -> None:
    order = ranking("client-1", MEMBERS)
    owner = order[0]
    assert replica_nodes("client-1", owner, MEMBERS, 3) == order[1:3]
    owner = order[1]  # the client connected elsewhere than its first-ranked node
    assert replica_nodes("client-1", owner, MEMBERS, 3) == [order[0], order[2]]


@given(st.text(max_size=20), st.lists(st.sampled_from(MEMBERS), unique=True, min_size=1), st.integers(1, 6),
       st.sampled_from(MEMBERS))
def test_properties(client_id: str, members: list[str], replicas: int, owner: str) -> None:
    targets = replica_nodes(client_id, owner, members, replicas)
    assert owner not in targets
    assert len(set(targets)) == len(targets) == min(replicas - 1, len(set(members) - {owner}))
    assert set(targets) <= set(members)
    assert targets == replica_nodes(client_id, owner, list(reversed(members)), replicas)  # order-free
