"""`max_connections` of a listener (vmqpy/broker/listeners/listener_limit.py): admissions, refusals counted, the log
throttled to a line a second, and the refused connection closed before anything is read."""

from __future__ import annotations

from collections import Counter

from structlog.testing import capture_logs

from tests.unit.transports import FakeTransport
from vmqpy.broker.listeners.listener_limit import REFUSED_METRIC, ConnectionLimit, RefusedConnection


def test_no_limit_admits_everything() -> None:
    limit = ConnectionLimit("default", None, Counter())
    assert all(limit.admit(0.0) for _ in range(1000))
    assert limit.live == 1000


def test_at_the_limit_new_connections_are_refused_and_counted_until_one_goes() -> None:
    metrics: Counter[str] = Counter()
    limit = ConnectionLimit("default", 2, metrics)
    assert [limit.admit(0.0) for _ in range(4)] == [True, True, False, False]
    assert (limit.live, metrics[REFUSED_METRIC]) == (2, 2)
    limit.release()
    assert [limit.admit(0.1), limit.admit(0.1)] == [True, False]
    assert (limit.live, metrics[REFUSED_METRIC]) == (2, 3)


def test_refusals_are_logged_at_most_once_a_second() -> None:
    limit = ConnectionLimit("edge", 1, Counter())
    limit.admit(0.0)
    with capture_logs() as logs:
        for now in (0.0, 0.2, 0.9, 1.0, 1.5, 3.0):
            assert not limit.admit(now)
    assert [(e["listener"], e["refused"]) for e in logs] == [("edge", 1), ("edge", 3), ("edge", 2)]
    assert all(e["log_level"] == "warning" and e["max_connections"] == 1 for e in logs)


def test_a_release_never_goes_below_zero() -> None:
    limit = ConnectionLimit("default", 1, Counter())
    limit.release()
    assert limit.admit(0.0) and not limit.admit(0.0)


def test_a_refused_connection_is_closed_as_soon_as_it_is_made() -> None:
    transport = FakeTransport()
    RefusedConnection().connection_made(transport)
    assert transport.closed
