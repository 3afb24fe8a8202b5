"""The control table (vmqpy.cluster.controls): every frame from another node goes to exactly one handler, a second
handler for one frame type or op is refused, and a CONTROL op nobody registered is dropped, counted and logged
once per op."""

from __future__ import annotations

from typing import Any

import pytest
import structlog.testing

from vmqpy.cluster.controls import ControlTable
from vmqpy.cluster.errors import ClusterUsageError
from vmqpy.cluster.framing import FrameType

Calls = list[tuple[str, str, Any]]


def recorder(calls: Calls, name: str) -> Any:
    return lambda peer, body: calls.append((name, peer, body))


def test_each_op_and_frame_type_reaches_its_one_handler() -> None:
    calls: Calls = []
    table = ControlTable("n1")
    table.add("join", recorder(calls, "join"))
    table.add_ops({"fwd_ack": recorder(calls, "ack")})
    table.add_all(("leave_drain", "leave_abort"), recorder(calls, "leave"))
    table.add_frame(FrameType.FORWARD, recorder(calls, "forward"))
    table.add_frame(FrameType.REACHABILITY, recorder(calls, "reports"))

    table.deliver("n2", FrameType.CONTROL, {"op": "fwd_ack", "upto": 3})
    table.deliver("n2", FrameType.CONTROL, {"op": "leave_abort"})
    table.deliver("n3", FrameType.FORWARD, b"batch")
    table.deliver("n3", FrameType.REACHABILITY, ["n1", "n3"])
    table.deliver("n3", FrameType.REPLICA, b"nobody takes it")  # no handler for the type: dropped

    assert calls == [("ack", "n2", {"op": "fwd_ack", "upto": 3}), ("leave", "n2", {"op": "leave_abort"}),
                     ("forward", "n3", b"batch"), ("reports", "n3", ["n1", "n3"])]
    assert table.ops() == {"join", "fwd_ack", "leave_drain", "leave_abort"}
    assert not table.dropped


def test_a_second_handler_for_one_op_or_frame_type_is_refused() -> None:
    table = ControlTable("n1")
    table.add("join", lambda _p, _b: None)
    with pytest.raises(ClusterUsageError, match="join"):
        table.add("join", lambda _p, _b: None)
    with pytest.raises(ClusterUsageError, match="join"):
        table.add_all(("join_ok", "join"), lambda _p, _b: None)
    table.add_frame(FrameType.FORWARD, lambda _p, _b: None)
    with pytest.raises(ClusterUsageError, match="FORWARD"):
        table.add_frame(FrameType.FORWARD, lambda _p, _b: None)
    for link_own in (FrameType.CONTROL, FrameType.METADATA, FrameType.HELLO):  # routed by op, or the links' own
        with pytest.raises(ClusterUsageError):
            table.add_frame(link_own, lambda _p, _b: None)


def test_an_unknown_op_is_dropped_counted_and_logged_once_per_op() -> None:
    calls: Calls = []
    table = ControlTable("n1")
    table.add("join", recorder(calls, "join"))
    with structlog.testing.capture_logs() as logs:
        table.deliver("n2", FrameType.CONTROL, {"op": "from_a_newer_version"})
        table.deliver("n3", FrameType.CONTROL, {"op": "from_a_newer_version", "x": 1})
        table.deliver("n2", FrameType.CONTROL, {"op": "another"})
        table.deliver("n2", FrameType.CONTROL, {"no": "op"})
        table.deliver("n2", FrameType.CONTROL, ["not", "a", "map"])  # nothing to route by: ignored

    assert calls == []  # never handed to a handler of another op
    assert table.dropped == {"from_a_newer_version": 2, "another": 1, "None": 1}
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [entry["op"] for entry in warnings] == ["from_a_newer_version", "another", "None"]
