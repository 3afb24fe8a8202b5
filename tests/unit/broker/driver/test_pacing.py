"""The read gate of a connection (vmqpy/broker/driver/pacing.py): the socket is read exactly when nothing holds it (a
CONNECT being decided, congested subscribers or nodes, a sliced SUBSCRIBE or the bulk lane, a max_message_rate
hold), and a closed connection's socket is paused or resumed no more."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.transports import FakeTransport
from vmqpy.broker.core.router import RouteResult
from vmqpy.broker.driver.pacing import ReadGate


def gate() -> tuple[ReadGate, FakeTransport]:
    g = ReadGate()
    transport = FakeTransport()
    g.transport = transport
    return g, transport


class Congested:
    """A congested subscriber: it calls back once it drained (`drained`)."""

    def __init__(self) -> None:
        self.waiting: list[Callable[[], None]] = []

    def wait_for_drain(self, callback: Callable[[], None]) -> None:
        self.waiting.append(callback)

    def drained(self) -> None:
        for callback in self.waiting:
            callback()
        self.waiting.clear()


@pytest.mark.parametrize(("hold", "release"), [
    (ReadGate.hold, ReadGate.release),
    (ReadGate.add_block, ReadGate.unblock),
    (lambda g: g.hold_rate(5.0), ReadGate.release_rate),
])
def test_each_hold_pauses_reading_until_released(hold: Callable[[ReadGate], None],
                                                 release: Callable[[ReadGate], None]) -> None:
    g, transport = gate()
    hold(g)
    assert transport.paused and g.paused
    release(g)
    assert not transport.paused and not g.paused


def test_reading_resumes_only_when_nothing_holds_it() -> None:
    g, transport = gate()
    g.hold()
    g.add_block()
    g.hold_rate(5.0)
    for release in (g.release, g.unblock):
        release()
        assert transport.paused
    g.release_rate()
    assert not transport.paused


def test_congested_subscribers_and_nodes_each_hold_until_they_drained() -> None:
    g, transport = gate()
    a, b = Congested(), Congested()
    nodes: list[tuple[str, Callable[[], None]]] = []
    g.block(RouteResult(congested=[a, b], congested_nodes=["n2"]),  # type: ignore[list-item]  # fakes of sessions
            lambda node, callback: nodes.append((node, callback)))
    assert transport.paused and g.blocked_on == 3
    a.drained()
    b.drained()
    assert transport.paused
    nodes[0][1]()
    assert not transport.paused and g.blocked_on == 0


def test_an_unblock_more_than_blocked_stays_at_zero() -> None:
    g, transport = gate()
    g.unblock()
    assert g.blocked_on == 0 and not transport.paused


def test_a_closed_gate_touches_the_socket_no_more() -> None:
    g, transport = gate()
    g.close()
    g.hold()
    g.block(RouteResult(congested=[Congested()]), lambda node, callback: None)  # type: ignore[list-item]
    assert not transport.paused and g.blocked_on == 0
