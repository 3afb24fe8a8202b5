"""The retained messages each client may keep (vmqpy.broker.access.retain_quota), as a table of steps, and the broker
refusing a retained PUBLISH over the quota (not stored, not routed, counted) while a delete always works."""

from __future__ import annotations

import pytest

from tests.unit.broker.fakes import MemoryMetadata
from vmqpy.broker.access.retain_quota import RetainQuota
from vmqpy.broker.core.broker import Broker
from vmqpy.sessions.message import Message


def test_count_limit_replacement_and_release() -> None:
    quota = RetainQuota(max_count=2, max_bytes=0)
    for topic in ("a", "b"):
        assert quota.admits("c1", topic, 10)
        quota.stored("c1", topic, 10)
    assert not quota.admits("c1", "c", 1)  # a third topic
    assert quota.admits("c1", "a", 500)  # a replacement does not add a topic
    assert quota.admits("c2", "c", 1)  # another client's count is its own
    quota.released("a")  # deleted, or replaced by someone else
    assert quota.held("c1") == (1, 10)
    assert quota.admits("c1", "c", 1)


def test_bytes_limit_counts_the_size_difference_of_a_replacement() -> None:
    quota = RetainQuota(max_count=0, max_bytes=100)
    quota.stored("c1", "a", 60)
    assert not quota.admits("c1", "b", 41)
    assert quota.admits("c1", "b", 40)
    assert quota.admits("c1", "a", 100)  # replaces its 60 bytes
    assert not quota.admits("c1", "a", 101)


def test_a_topic_taken_by_another_client_moves_to_its_count() -> None:
    quota = RetainQuota(max_count=1, max_bytes=0)
    quota.stored("c1", "a", 5)
    quota.stored("c2", "a", 7)
    assert quota.held("c1") == (0, 0) and quota.held("c2") == (1, 7)


@pytest.mark.parametrize("limit", [0])
def test_zero_is_no_limit(limit: int) -> None:
    quota = RetainQuota(limit, limit)
    for n in range(1000):
        quota.stored("c1", f"t/{n}", 1 << 20)
    assert quota.admits("c1", "t/new", 1 << 30)


def test_the_broker_refuses_a_retained_message_over_the_quota_and_deletes_always(
        node_b: tuple[Broker, MemoryMetadata]) -> None:
    broker, _metadata = node_b
    broker.retain_quota = RetainQuota(max_count=2, max_bytes=0)
    assert broker.metrics["retain_quota_exceeded"] == 0  # exported at 0 from the start
    for topic in ("r/1", "r/2"):
        assert not broker.publish(Message(topic, b"kept", 1, retain=True, publisher="c1"), 1.0).retain_refused
    refused = broker.publish(Message("r/3", b"over", 1, retain=True, publisher="c1"), 1.0)
    assert refused.retain_refused and "r/3" not in broker.retained
    assert broker.metrics["retain_quota_exceeded"] == 1
    broker.publish(Message("r/1", b"", 1, retain=True, publisher="c1"), 1.0)  # a delete
    assert "r/1" not in broker.retained
    assert not broker.publish(Message("r/3", b"now", 1, retain=True, publisher="c1"), 1.0).retain_refused
    assert sorted(topic for topic, _m in broker.retained.match("#")) == ["r/2", "r/3"]
