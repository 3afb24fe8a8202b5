"""vmqpy.cluster.pending_links: the cluster port's sockets before their handshake, node-wide and per address."""

from __future__ import annotations

from vmqpy.cluster.link_counters import LinkCounters
from vmqpy.cluster.pending_links import PendingLinks


def test_one_address_holds_its_share_and_another_still_gets_in() -> None:
    counters = LinkCounters()
    links = PendingLinks("n1", maximum=4, per_address=2, counters=counters)
    held = [links.admit("127.0.0.5", 0.0) for _ in range(5)]
    assert [p is not None for p in held] == [True, True, False, False, False]
    assert counters.pending_refused_address == 3
    assert links.admit("127.0.0.12", 0.0) is not None


def test_the_node_wide_limit_refuses_an_address_holding_as_many_as_the_heaviest() -> None:
    counters = LinkCounters()
    links = PendingLinks("n1", maximum=2, per_address=2, counters=counters)
    first = links.admit("10.0.0.1", 0.0)
    assert first is not None and links.admit("10.0.0.2", 0.0) is not None
    assert links.admit("10.0.0.2", 0.0) is None  # 10.0.0.2 holds 1, as many as the heaviest: no eviction
    assert (counters.pending_refused, counters.pending_refused_address) == (1, 0)
    first.release()
    first.release()  # idempotent: one place back, not two
    assert links.live == 1 and "10.0.0.1" not in links.by_address and "10.0.0.1" not in links.places
    assert links.admit("10.0.0.3", 0.0) is not None


def test_at_the_node_wide_limit_a_new_address_takes_the_oldest_place_of_the_heaviest() -> None:
    counters = LinkCounters()
    links = PendingLinks("n1", maximum=4, per_address=3, counters=counters)
    closed: list[str] = []
    held = []
    for i, address in enumerate(["10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2"]):  # strangers fill the node
        place = links.admit(address, 0.0)
        assert place is not None
        place.close = lambda i=i: closed.append(f"socket {i}")
        held.append(place)
    member = links.admit("127.0.0.12", 0.0)  # a member dialing from its own address gets in
    assert member is not None
    assert closed == ["socket 0"] and held[0].released  # the oldest of the address holding the most
    assert links.live == 4 and links.by_address["10.0.0.1"] == 2 and counters.pending_refused == 1
    held[0].release()  # its socket's close comes later: nothing more to give back
    assert links.live == 4
    assert links.admit(None, 0.0) is None  # a socket without an address never evicts


def test_a_peer_without_an_address_counts_node_wide_only() -> None:
    links = PendingLinks("n1", maximum=3, per_address=1, counters=LinkCounters())
    assert all(links.admit(None, 0.0) is not None for _ in range(3))
    assert links.admit(None, 0.0) is None and not links.by_address


def test_refusals_are_logged_at_most_once_a_second(capsys: object) -> None:
    links = PendingLinks("n1", maximum=1, per_address=1, counters=LinkCounters())
    links.admit("10.0.0.1", 0.0)
    for i in range(100):
        links.admit("10.0.0.1", i * 0.001)  # 100 refusals within 0.1 s: one log line, then counted
    assert links.unlogged == 99
    links.admit("10.0.0.1", 1.5)
    assert links.unlogged == 0
