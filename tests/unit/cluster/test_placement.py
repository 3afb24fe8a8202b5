"""The assigned server of a client id (vmqpy.cluster.placement): table tests and properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.cluster.leader import ranking
from vmqpy.cluster.placement import Owner, assigned_node, place, reference_for
from vmqpy.sessions.remote import Redirect

MEMBERS = ["a@127.0.0.11", "b@127.0.0.12", "c@127.0.0.13"]
ADDRESSES = {m: {"tcp": f"127.0.0.{11 + i}:1883", "ssl": f"127.0.0.{11 + i}:8883"} for i, m in enumerate(MEMBERS)}


def everyone(_node: str) -> bool:
    return True


def client_assigned_to(node: str) -> str:
    """A client id whose assigned node, with every member reachable, is `node`."""
    for i in range(10_000):
        if ranking(f"c{i}", MEMBERS)[0] == node:
            return f"c{i}"
    raise AssertionError("no such client id")


def test_a_persistent_connect_at_its_assigned_node_is_served_there() -> None:
    cid = client_assigned_to(MEMBERS[1])
    assert place(cid, True, "tcp", MEMBERS[1], MEMBERS, everyone, None, ADDRESSES) is None


def test_a_persistent_connect_elsewhere_is_sent_to_the_assigned_nodes_address_of_its_listener_kind() -> None:
    cid = client_assigned_to(MEMBERS[1])
    redirect = place(cid, True, "ssl", MEMBERS[0], MEMBERS, everyone, None, ADDRESSES)
    assert redirect == Redirect(MEMBERS[1], "127.0.0.12:8883", f"the assigned server of this client id is {MEMBERS[1]}")
    tcp = place(cid, True, "ws", MEMBERS[2], MEMBERS, everyone, None, ADDRESSES)
    assert tcp is not None and tcp.reference == "127.0.0.12:1883", "no ws listener advertised: its tcp one"


def test_an_unreachable_assigned_node_passes_to_the_next_in_the_ranking() -> None:
    cid = client_assigned_to(MEMBERS[1])
    order = ranking(cid, MEMBERS)
    here = order[2]
    redirect = place(cid, True, "tcp", here, MEMBERS, lambda n: n != order[0], None, ADDRESSES)
    assert redirect is not None and redirect.node == order[1]
    assert place(cid, True, "tcp", order[1], MEMBERS, lambda n: n != order[0], None, ADDRESSES) is None


def test_nothing_is_redirected_to_a_node_without_an_advertised_address() -> None:
    cid = client_assigned_to(MEMBERS[1])
    assert place(cid, True, "tcp", MEMBERS[0], MEMBERS, everyone, None, {MEMBERS[0]: {"tcp": "x:1"}}) is None


def test_a_clean_connect_goes_once_to_where_a_persistent_session_lives() -> None:
    cid = client_assigned_to(MEMBERS[1])
    there = Owner(MEMBERS[2], persistent=True)
    redirect = place(cid, False, "tcp", MEMBERS[0], MEMBERS, everyone, there, ADDRESSES)
    assert redirect is not None and redirect.node == MEMBERS[2]
    # after the clean connect there, the owner record is a clean session's: served wherever it lands
    assert place(cid, False, "tcp", MEMBERS[0], MEMBERS, everyone, Owner(MEMBERS[2], False), ADDRESSES) is None
    assert place(cid, False, "tcp", MEMBERS[0], MEMBERS, lambda n: n != MEMBERS[2], there, ADDRESSES) is None
    assert place(cid, False, "tcp", MEMBERS[2], MEMBERS, everyone, there, ADDRESSES) is None
    assert place(cid, False, "tcp", MEMBERS[0], MEMBERS, everyone, None, ADDRESSES) is None


def test_reference_for_prefers_the_listener_kind_then_tcp() -> None:
    assert reference_for({"tcp": "h:1", "wss": "h:2"}, "wss") == "h:2"
    assert reference_for({"tcp": "h:1"}, "ssl") == "h:1"
    assert reference_for({"ws": "h:3"}, "ssl") is None


names = st.lists(st.sampled_from([f"n{i}@127.0.0.{11 + i}" for i in range(6)]), min_size=1, max_size=6, unique=True)


@given(members=names, client_id=st.text(max_size=20), data=st.data())
def test_members_that_see_the_same_reachable_set_agree_on_the_assigned_node(
    members: list[str], client_id: str, data: st.DataObject
) -> None:
    reachable = set(data.draw(st.sets(st.sampled_from(members), min_size=1)))
    answers = {assigned_node(client_id, members, here, reachable.__contains__) for here in reachable}
    assert len(answers) == 1
    assert answers <= reachable


@given(members=names, client_id=st.text(max_size=20), persistent=st.booleans(), data=st.data())
def test_a_redirect_never_points_home_nor_to_an_unreachable_node(
    members: list[str], client_id: str, persistent: bool, data: st.DataObject
) -> None:
    here = data.draw(st.sampled_from(members))
    reachable = data.draw(st.sets(st.sampled_from(members)))
    owner_node = data.draw(st.sampled_from(members))
    owner = Owner(owner_node, data.draw(st.booleans()))
    addresses = {m: {"tcp": f"{m}:1883"} for m in members}
    redirect = place(client_id, persistent, "tcp", here, members, reachable.__contains__, owner, addresses)
    if redirect is not None:
        assert redirect.node != here and redirect.node in reachable
        assert redirect.reference == f"{redirect.node}:1883"
