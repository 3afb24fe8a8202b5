"""Forwarding between two cluster services wired as node.py wires them: the broker's `forward` goes to the
ForwardDriver, FORWARD frames and `fwd_ack` reach it through the control table, and `stats()` keeps the counter
names and order that `vmq-admin metrics show` reads."""

from __future__ import annotations

from typing import Any

from tests.unit.loop_turns import settle
from vmqpy.cluster.controls import ControlTable
from vmqpy.cluster.forward_driver import ForwardDriver
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.service import ClusterService
from vmqpy.sessions.message import Message
from vmqpy.sessions.records import forward_record


class StubNetwork:
    """Records the frames sent; every peer has room; no links."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, FrameType, Any]] = []

    def send_frame(self, peer: str, type: FrameType, body: Any, *, flush: bool = False) -> bool:
        self.frames.append((peer, type, body))
        return True

    def room(self, peer: str) -> int:
        return 1 << 40

    @property
    def max_frame(self) -> int:
        return 1 << 20

    def reachable(self) -> set[str]:
        return set()

    def stats(self) -> dict[str, int]:
        return {"frames_in": 0}

    def sent(self, type: FrameType) -> list[Any]:
        return [body for _peer, t, body in self.frames if t is type]


def service(name: str, network: StubNetwork, delivered: list[Any] | None = None
            ) -> tuple[ClusterService, ControlTable]:
    """A cluster service and its control table, as node.py builds and fills them."""
    def deliver(record: Any, now: float, peer: str, seq: int) -> bool:
        if delivered is not None:
            delivered.append((peer, seq))
        return False

    forwarding = ForwardDriver(network, deliver)
    replication = ForwardDriver(network, deliver, frame_type=FrameType.REPLICA, ack_op="rep_ack")
    cluster = ClusterService(name, 1, ("127.0.0.1", 1), network, None,  # type: ignore[arg-type]
                             forwarding=forwarding, replication=replication, on_removed=lambda: None)
    controls = ControlTable(name)
    for driver in (forwarding, replication):
        controls.add_frame(driver.frame_type, driver.receive)
        controls.add_ops(driver.control_ops())
    return cluster, controls


async def test_a_forward_is_delivered_acknowledged_and_its_publisher_told() -> None:
    n1_net, n2_net = StubNetwork(), StubNetwork()
    delivered: list[Any] = []
    (n1, n1_controls), (_n2, n2_controls) = service("n1", n1_net), service("n2", n2_net, delivered)
    acked: list[str] = []
    record, size = forward_record(Message("t", b"x", 1, False, "pub"), [])
    assert n1.forwarding.forward("n2", record, size, lambda: acked.append("t"), lambda _why: None)
    await settle()
    [batch] = n1_net.sent(FrameType.FORWARD)
    n2_controls.deliver("n1", FrameType.FORWARD, batch)
    await settle()
    assert delivered == [("n1", 1)]
    [ack] = n2_net.sent(FrameType.CONTROL)
    assert ack["op"] == "fwd_ack" and ack["upto"] == 1
    n1_controls.deliver("n2", FrameType.CONTROL, ack)
    assert acked == ["t"] and n1.stats()["forwards_unacknowledged"] == 0


def test_stats_names_and_order() -> None:
    assert list(service("n1", StubNetwork())[0].stats()) == [
        "netsplit_detected",
        "netsplit_resolved",
        "forward_entries_received",
        "forward_duplicates",
        "forwards_resent",
        "forwards_refused",
        "forward_malformed",
        "members",
        "forwards_unacknowledged",
        "reachable",
        "links.frames_in",
    ]
