"""The expiry scan (vmqpy.broker.core.expiry): a bounded slice of sessions per tick, every expired offline session
found within len(sessions) / per_tick ticks, none that is online, never expires or has not expired."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from vmqpy.broker.core.expiry import ExpiryScan
from vmqpy.broker.core.session import Session


def session(client_id: str, expiry: float | None, disconnected_at: float | None) -> Session:
    s = Session(client_id, protocol_level=5, expiry_interval=expiry, max_inflight=10, max_online=100,
                max_offline=100)
    s.disconnected_at = disconnected_at
    return s


def test_a_small_node_checks_every_session_on_every_tick() -> None:
    sessions = {
        "expired": session("expired", 10, 0.0),
        "not-yet": session("not-yet", 100, 0.0),
        "never": session("never", None, 0.0),
        "connected": session("connected", 10, None),
    }
    scan = ExpiryScan(sessions, per_tick=10)
    assert [s.client_id for s in scan.due(50.0)] == ["expired"]
    assert [s.client_id for s in scan.due(50.0)] == ["expired"]  # the next tick looks again (not discarded)
    assert sorted(s.client_id for s in scan.due(200.0)) == ["expired", "not-yet"]


def test_a_session_gone_since_the_snapshot_is_skipped() -> None:
    sessions = {f"c{i}": session(f"c{i}", 1, 0.0) for i in range(4)}
    scan = ExpiryScan(sessions, per_tick=2)
    assert [s.client_id for s in scan.due(5.0)] == ["c0", "c1"]
    del sessions["c2"]
    assert [s.client_id for s in scan.due(5.0)] == ["c3"]


@given(st.lists(st.tuples(st.sampled_from([None, 1.0, 100.0]), st.booleans()), max_size=60),
       st.integers(min_value=1, max_value=16))
def test_every_expired_session_is_found_within_its_bound_and_no_other(
        shapes: list[tuple[float | None, bool]], per_tick: int) -> None:
    sessions = {f"c{i}": session(f"c{i}", expiry, None if online else 0.0)
                for i, (expiry, online) in enumerate(shapes)}
    expected = {cid for cid, s in sessions.items() if s.disconnected_at is not None and s.expiry_interval == 1.0}
    scan = ExpiryScan(sessions, per_tick)
    found: list[str] = []
    for _ in range(max(1, math.ceil(len(sessions) / per_tick))):
        for s in scan.due(10.0):
            found.append(s.client_id)
            del sessions[s.client_id]  # what Broker.tick does (discard)
    assert sorted(found) == sorted(expected)
