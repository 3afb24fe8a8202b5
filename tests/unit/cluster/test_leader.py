"""The registration leader: rendezvous hashing over the members, stable across processes."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.leader import leader_for, ranking, weight

MEMBERS = ["n1@127.0.0.11", "n2@127.0.0.12", "n3@127.0.0.13"]

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789@.", min_size=1, max_size=20)


def test_weight_is_a_fixed_function_of_member_and_client_id() -> None:
    # Concrete values: the choice must not depend on Python's per-process hash seed.
    assert weight("n1@127.0.0.11", "client-1") == weight("n1@127.0.0.11", "client-1")
    assert weight("n1@127.0.0.11", "client-1") != weight("n2@127.0.0.12", "client-1")
    assert weight("a", "b") == int.from_bytes(
        __import__("hashlib").blake2b(b"a\0b", digest_size=8).digest(), "big")


def test_leader_does_not_depend_on_member_order() -> None:
    for i in range(50):
        cid = f"c{i}"
        assert leader_for(cid, MEMBERS) == leader_for(cid, list(reversed(MEMBERS)))


def test_leaders_spread_over_the_members() -> None:
    counts = Counter(leader_for(f"client-{i}", MEMBERS) for i in range(3000))
    assert set(counts) == set(MEMBERS)
    assert min(counts.values()) > 800  # about 1000 each


def test_no_members_is_an_error() -> None:
    with pytest.raises(ValueError):
        leader_for("c", [])


@given(st.lists(names, min_size=1, max_size=8, unique=True), names)
def test_ranking_starts_with_the_leader_and_holds_every_member(members: list[str], client_id: str) -> None:
    order = ranking(client_id, members)
    assert order[0] == leader_for(client_id, members)
    assert sorted(order) == sorted(members)


@given(st.lists(names, min_size=2, max_size=8, unique=True), names, st.data())
def test_removing_a_member_moves_only_the_ids_it_led(members: list[str], client_id: str, data: st.DataObject) -> None:
    gone = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != gone]
    before = leader_for(client_id, members)
    after = leader_for(client_id, rest)
    if before != gone:
        assert after == before
    else:
        assert after == ranking(client_id, members)[1]
