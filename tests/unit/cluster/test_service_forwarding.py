"""The cluster service hands forwarding to its ForwardDriver: FORWARD frames and `fwd_ack` reach it, the broker's
`forward` goes through it, and `stats()` keeps the counter names and order that `vmq-admin metrics show` reads."""

from __future__ import annotations

import asyncio
from typing import Any

from vmqpy.broker.message import Message
from vmqpy.broker.records import forward_record
from vmqpy.cluster.framing import FrameType
from vmqpy.cluster.service import ClusterService


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


def service(name: str, network: StubNetwork, delivered: list[Any] | None = None) -> ClusterService:
    def deliver(record: Any, now: float, peer: str, seq: int) -> bool:
        if delivered is not None:
            delivered.append((peer, seq))
        return False

    return ClusterService(name, 1, ("127.0.0.1", 1), network, None,  # type: ignore[arg-type]
                          deliver_forwarded=deliver, on_removed=lambda: None)


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_forward_is_delivered_acknowledged_and_its_publisher_told() -> None:
    n1_net, n2_net = StubNetwork(), StubNetwork()
    delivered: list[Any] = []
    n1, n2 = service("n1", n1_net), service("n2", n2_net, delivered)
    acked: list[str] = []
    record, size = forward_record(Message("t", b"x", 1, False, "pub"), [])
    assert n1.forward("n2", record, size, lambda: acked.append("t"), lambda _why: None)
    await turn()
    [batch] = n1_net.sent(FrameType.FORWARD)
    n2._on_message("n1", FrameType.FORWARD, batch)
    await turn()
    assert delivered == [("n1", 1)]
    [ack] = n2_net.sent(FrameType.CONTROL)
    assert ack["op"] == "fwd_ack" and ack["upto"] == 1
    n1._on_message("n2", FrameType.CONTROL, ack)
    assert acked == ["t"] and n1.stats()["forwards_unacknowledged"] == 0


def test_stats_names_and_order() -> None:
    assert list(service("n1", StubNetwork()).stats()) == [
        "netsplit_detected",
        "netsplit_resolved",
        "forward_received",
        "forward_duplicates",
        "forwards_resent",
        "forwards_refused",
        "forward_malformed",
        "members",
        "forwards_unacknowledged",
        "reachable",
        "links.frames_in",
    ]
