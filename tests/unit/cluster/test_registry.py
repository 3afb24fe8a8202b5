"""The leader's lock table: one holder per client id, waiting in order, leases, dead holders."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.registry import Busy, Grant, Registry


def test_free_lock_is_granted_at_once_with_no_owner_known() -> None:
    r = Registry()
    assert r.request("c", "n1", 1, 0.0) == [Grant("c", "n1", 1, None)]


def test_held_lock_waits_and_the_release_grants_the_next_with_the_new_owner() -> None:
    r = Registry()
    r.request("c", "n1", 1, 0.0)
    assert r.request("c", "n2", 2, 0.1) == []
    assert r.request("c", "n3", 3, 0.2) == []
    assert r.release("c", "n1", 1, "n1", 0.3) == [Grant("c", "n2", 2, "n1")]
    assert r.release("c", "n2", 2, "n2", 0.4) == [Grant("c", "n3", 3, "n2")]
    assert r.release("c", "n3", 3, None, 0.5) == []
    assert r.held == {} and r.waiting == {}
    assert r.owners == {"c": ("n2", None)}  # a failed connect (owner None) keeps the last known owner


def test_other_client_ids_are_independent() -> None:
    r = Registry()
    r.request("a", "n1", 1, 0.0)
    assert r.request("b", "n2", 2, 0.0) == [Grant("b", "n2", 2, None)]


def test_release_by_someone_else_is_ignored_but_drops_its_waiting_request() -> None:
    r = Registry()
    r.request("c", "n1", 1, 0.0)
    r.request("c", "n2", 2, 0.0)
    assert r.release("c", "n2", 2, "n2", 0.1) == []  # n2 gave up while waiting
    assert r.held["c"].node == "n1"
    assert r.release("c", "n1", 1, "n1", 0.2) == []


def test_lease_expiry_takes_the_lock_back() -> None:
    r = Registry(lease=10.0)
    r.request("c", "n1", 1, 0.0)
    r.request("c", "n2", 2, 1.0)
    assert r.next_deadline() == 10.0
    assert r.expire(9.9) == []
    assert r.expire(10.0) == [Grant("c", "n2", 2, None)]
    assert r.expired == 1
    assert r.next_deadline() == 20.0


def test_unreachable_holder_frees_its_locks_and_loses_its_waiting_requests() -> None:
    r = Registry()
    r.request("a", "n1", 1, 0.0)
    r.request("a", "n2", 2, 0.0)
    r.request("b", "n2", 3, 0.0)
    r.request("b", "n1", 4, 0.0)
    assert r.node_down("n1", 1.0) == [Grant("a", "n2", 2, None)]
    assert r.held["b"].node == "n2" and "b" not in r.waiting


def test_a_full_waiting_line_is_busy() -> None:
    r = Registry(max_waiting=2)
    r.request("c", "n1", 1, 0.0)
    r.request("c", "n1", 2, 0.0)
    r.request("c", "n1", 3, 0.0)
    with pytest.raises(Busy):
        r.request("c", "n1", 4, 0.0)


def test_a_newer_owner_record_replaces_the_remembered_owner_an_older_one_does_not() -> None:
    r = Registry()
    r.request("c", "n1", 1, 0.0)
    r.release("c", "n1", 1, "n1", 0.0, [1000, 0, "n1"])
    r.note_record("c", "n0", [999, 5, "n0"])  # the previous owner's record arriving late
    assert r.request("c", "n2", 2, 0.0) == [Grant("c", "n2", 2, "n1", [1000, 0, "n1"])]
    r.release("c", "n2", 2, None, 0.0)
    r.note_record("c", "n3", [1001, 0, "n2"])  # the session moved without a registration
    assert r.request("c", "n2", 3, 0.0) == [Grant("c", "n2", 3, "n3", [1001, 0, "n2"])]
    r.release("c", "n2", 3, None, 0.0)
    r.note_record("c", "n3", [1002, 0, "n3"])  # a newer record of the same owner: the grant names its stamp
    assert r.request("c", "n1", 4, 0.0) == [Grant("c", "n1", 4, "n3", [1002, 0, "n3"])]
    r.note_record("d", "n3", [1, 0, "n3"])  # not remembered: nothing to correct
    assert "d" not in r.owners


ops = st.lists(
    st.tuples(st.sampled_from(["request", "release", "down", "expire"]), st.sampled_from(["n1", "n2", "n3"]),
              st.sampled_from(["a", "b"])),
    max_size=60,
)


@given(ops)
def test_at_most_one_holder_and_every_request_is_granted_once(steps: list[tuple[str, str, str]]) -> None:
    """Whatever happens, a client id has at most one holder, and no request is granted twice."""
    r = Registry(lease=5.0)
    now = 0.0
    granted: set[int] = set()
    holders: dict[str, tuple[str, int]] = {}
    next_request = 1
    for op, node, cid in steps:
        now += 1.0
        if op == "request":
            grants = r.request(cid, node, next_request, now)
            next_request += 1
        elif op == "release":
            hold = holders.get(cid)
            grants = [] if hold is None else r.release(cid, hold[0], hold[1], hold[0], now)
            if hold is not None:
                holders.pop(cid)
        elif op == "down":
            grants = r.node_down(node, now)
            holders = {c: h for c, h in holders.items() if h[0] != node}
        else:
            grants = r.expire(now)
            holders = {c: h for c, h in holders.items() if c in r.held and r.held[c].request == h[1]}
        for g in grants:
            assert g.request not in granted
            granted.add(g.request)
            holders[g.client_id] = (g.node, g.request)
        for cid_, held in r.held.items():
            assert holders[cid_] == (held.node, held.request)
