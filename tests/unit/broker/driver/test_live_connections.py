"""The node's live connections iterate in the order they were accepted (vmqpy/broker/driver/live_connections.py)."""

from __future__ import annotations

from vmqpy.broker.driver.live_connections import LiveConnections


class Conn:
    """An object hashed by identity, as a connection is."""


def test_iteration_is_in_insertion_order_whatever_the_addresses() -> None:
    conns = [Conn() for _ in range(50)]
    live: LiveConnections[Conn] = LiveConnections()
    for conn in reversed(conns):
        live.add(conn)
    assert list(live) == list(reversed(conns))
    live.discard(conns[10])
    live.discard(conns[10])  # a second discard is nothing
    live.add(conns[20])  # already there: keeps its place
    assert list(live) == [c for c in reversed(conns) if c is not conns[10]]
    assert len(live) == 49 and conns[10] not in live and conns[11] in live


def test_it_is_a_set_for_its_users() -> None:
    a, b = Conn(), Conn()
    live: LiveConnections[Conn] = LiveConnections()
    live.add(a)
    live.add(b)
    assert set(live) == {a, b} and live.isdisjoint({Conn()}) and bool(live)
    for conn in list(live):
        live.discard(conn)
    assert not live and len(live) == 0
