"""A node's database comes back to the size of what it holds (issue 36, the data directory's growth): a real
node takes 12,000 retained rewrites (metadata writes: the replicated store keeps retained messages in broker.db)
and a persistent session's offline queue of 1,000 messages of 4 KiB, delivered; then broker.db with its -wal
and -shm files must come back under what is live plus 2 MiB. Before the fix the WAL stayed at SQLite's 4 MiB
checkpoint size for ever and the queue's pages stayed in the file as free pages (vmqpy/storage.py: incremental
auto-vacuum, a 1 MiB WAL truncated by the writer thread every 30 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.clients import RawClient, unique
from tests.integration.conftest import Broker, wait_until

pytestmark = pytest.mark.vmqpy_only("broker.db is vmqpy's")

MiB = 1 << 20
PERSISTENT = {"session_expiry_interval": 3600}


def database_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("broker.db*"))


def test_the_database_shrinks_back_after_rewrites_and_an_offline_queue(broker: Broker) -> None:
    writer = RawClient(broker.port, broker.host, 5)
    writer.connect(unique("retainer-"))
    for round_ in range(40):
        for topic in range(300):
            writer.publish(f"bounds/retained/{topic}", b"%03d" % round_ + b"r" * 500, qos=0, retain=True)
        writer.publish("bounds/sync", b"", qos=1)  # paces the writer: the node has taken the round
    subscriber_id = unique("queue-")
    subscriber = RawClient(broker.port, broker.host, 5)
    subscriber.connect(subscriber_id, clean=False, props=PERSISTENT)
    subscriber.subscribe(("bounds/queue", 1))
    subscriber.disconnect()
    for i in range(1000):
        writer.publish("bounds/queue", b"%04d" % i + b"q" * 4096, qos=1)
    writer.disconnect()
    peak = database_bytes(broker.data_dir)
    assert peak > 4 * MiB, peak  # the queue is on disk

    subscriber = RawClient(broker.port, broker.host, 5)
    assert subscriber.connect(subscriber_id, clean=False, props=PERSISTENT).session_present
    assert len(subscriber.recv_publishes(1000, timeout=60)) == 1000
    subscriber.disconnect()

    live = 300 * 600  # the retained messages; the session's record is bytes
    limit = live + 2 * MiB
    try:
        wait_until(lambda: database_bytes(broker.data_dir) < limit, 90, interval=0.5, what="broker.db* shrinking")
    except AssertionError:
        files = sorted((p.name, p.stat().st_size) for p in broker.data_dir.glob("broker.db*"))
        raise AssertionError(f"broker.db* not back under {limit} bytes within 90 s (peak {peak}): {files}") from None
