"""Per-address connection limits (vmqpy/broker/listeners/address_limit.py), the node-wide MQTT socket budget shared by
the
listeners' limits (vmqpy/broker/listeners/listener_limit.py) and the budget's arithmetic (vmqpy/descriptors.py)."""

from __future__ import annotations

import resource
from collections import Counter

import pytest
from structlog.testing import capture_logs

from vmqpy import descriptors
from vmqpy.broker.listeners.address_limit import REFUSED_METRIC, REFUSED_PENDING_METRIC, AddressLimits, address_of
from vmqpy.broker.listeners.listener_limit import DESCRIPTORS_REFUSED_METRIC, ConnectionLimit


def test_the_counters_exist_at_zero_from_the_start() -> None:
    metrics: Counter[str] = Counter()
    AddressLimits(None, None, metrics)
    ConnectionLimit("node", None, metrics, metric=DESCRIPTORS_REFUSED_METRIC)
    assert {REFUSED_METRIC, REFUSED_PENDING_METRIC, DESCRIPTORS_REFUSED_METRIC} <= set(metrics)


def test_one_address_at_its_limit_leaves_another_admitted() -> None:
    metrics: Counter[str] = Counter()
    limits = AddressLimits(3, None, metrics)
    admitted = [limits.admit("10.0.0.1", 0.0) for _ in range(5)]
    assert [a is not None for a in admitted] == [True, True, True, False, False]
    assert limits.admit("10.0.0.2", 0.0) is not None
    assert metrics[REFUSED_METRIC] == 2
    first = admitted[0]
    assert first is not None
    first.release()
    first.release()  # idempotent: one place freed, not two
    assert [limits.admit("10.0.0.1", 0.1) is not None for _ in range(2)] == [True, False]


def test_pending_sockets_have_their_own_lower_limit_until_their_connect() -> None:
    metrics: Counter[str] = Counter()
    limits = AddressLimits(10, 2, metrics)
    a, b = limits.admit("h", 0.0), limits.admit("h", 0.0)
    assert a is not None and b is not None
    assert limits.admit("h", 0.0) is None and metrics[REFUSED_PENDING_METRIC] == 1
    a.connected()
    a.connected()  # idempotent
    assert limits.admit("h", 0.0) is not None
    assert (limits.connections["h"], limits.waiting["h"]) == (3, 2)


def test_an_address_is_forgotten_once_its_sockets_are_gone() -> None:
    limits = AddressLimits(5, 5, Counter())
    admissions = [limits.admit(f"10.0.{i}.1", 0.0) for i in range(100)]
    for admission in admissions:
        assert admission is not None
        admission.connected()
        admission.release()
    assert not limits.connections and not limits.waiting


def test_refusals_are_logged_at_most_once_a_second_with_the_address() -> None:
    limits = AddressLimits(1, None, Counter())
    limits.admit("h", 0.0)
    with capture_logs() as logs:
        for now in (0.0, 0.5, 1.0, 1.2):
            assert limits.admit("h", now) is None
    assert [(e["address"], e["refused"], e["setting"]) for e in logs] == [
        ("h", 1, "listener.max_connections_per_address"), ("h", 2, "listener.max_connections_per_address")]


@pytest.mark.parametrize(("peer", "address"), [
    (("10.0.0.1", 1883), "10.0.0.1"), (("::1", 1883, 0, 0), "::1"), (None, None), ("/tmp/sock", None), ((), None),
])
def test_address_of(peer: object, address: str | None) -> None:
    assert address_of(peer) == address


def test_every_listener_counts_in_the_node_wide_budget() -> None:
    metrics: Counter[str] = Counter()
    node = ConnectionLimit("node", 3, metrics, metric=DESCRIPTORS_REFUSED_METRIC)
    one = ConnectionLimit("one", None, metrics, shared=node)
    two = ConnectionLimit("two", 10, metrics, shared=node)
    assert [one.admit(0.0), two.admit(0.0), one.admit(0.0), two.admit(0.0)] == [True, True, True, False]
    assert (one.live, two.live, node.live, metrics[DESCRIPTORS_REFUSED_METRIC]) == (2, 1, 3, 1)
    one.release()
    assert two.admit(0.1) and node.live == 3


@pytest.mark.parametrize(("soft", "open_now", "admin", "budget"), [
    (1024, 20, 64, 1024 - 20 - 64 - descriptors.SPARE),
    (256, 21, 64, 107),
    (100, 50, 64, descriptors.MINIMUM_BUDGET),
    (None, 20, 64, None),
])
def test_the_mqtt_socket_budget(soft: int | None, open_now: int, admin: int, budget: int | None) -> None:
    assert descriptors.mqtt_socket_budget(soft, open_now, admin) == budget


@pytest.mark.parametrize(("setting", "budget", "share", "limit"), [
    ("auto", 1000, 2, 500), ("auto", 1000, 8, 125), ("auto", 3, 8, 1), ("auto", None, 2, None), (7, 1000, 2, 7),
    (None, 1000, 2, None),
])
def test_per_address_limits(setting: int | str | None, budget: int | None, share: int, limit: int | None) -> None:
    assert descriptors.per_address(setting, budget, share) == limit


def test_raising_the_soft_limit_reaches_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        with capture_logs() as logs:
            limit = descriptors.raise_open_files_limit()
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert limit.soft == (None if now == resource.RLIM_INFINITY else now)
        if hard != resource.RLIM_INFINITY:
            assert now == hard
        assert logs and logs[0]["log_level"] == "info"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
