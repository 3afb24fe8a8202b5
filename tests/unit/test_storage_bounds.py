"""broker.db stays bounded on disk (issue 36, the data directory's growth): a node's database file and its WAL
come back to the size of what is live after a burst (an offline queue filled and delivered, many retained
messages written and cleared), and stay there under a steady stream of rewrites. Before: the WAL kept the
size of its largest checkpoint interval (never truncated) and every page a burst had used stayed in the file
as a free page for ever (no auto-vacuum), so each burst raised the floor of the data directory.

Real SQLite files, the real writer thread; every wait polls a condition with a deadline."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vmqpy.storage import Storage

MiB = 1 << 20


def disk_bytes(path: Path) -> int:
    """broker.db with its -wal and -shm files, as the data directory's total counts them."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal"),
                                          path.with_name(path.name + "-shm")) if p.exists())


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    # Maintenance every 0.2 s instead of the node's 30 s: the same code, run often enough for a unit test.
    s = Storage(tmp_path / "broker.db", maintenance_interval=0.2)
    s.open()
    yield s
    s.close()


def test_a_burst_written_and_deleted_leaves_no_trace_on_disk(storage: Storage) -> None:
    storage.put("t", b"keep", b"k" * 100)
    storage.barrier().result(10)
    value = b"v" * 4096
    for i in range(6000):  # ~24 MiB: an offline queue, or many retained messages
        storage.put("msg", b"q\0" + i.to_bytes(8, "big"), value)
    storage.barrier().result(30)
    peak = disk_bytes(storage.path)
    assert peak > 20 * MiB, peak
    storage.delete_prefix("msg", b"q\0")
    storage.barrier().result(30)
    assert wait_for(lambda: disk_bytes(storage.path) < 2 * MiB), \
        f"{disk_bytes(storage.path)} bytes on disk after the burst was deleted (peak {peak})"
    assert storage.load("t") == [(b"keep", b"k" * 100)]
    assert storage.stats["vacuumed_pages"] > 0 and storage.stats["checkpoints"] > 0


def test_steady_rewrites_stay_within_the_live_data_plus_a_bounded_wal(storage: Storage) -> None:
    """Retained rewrites: the same 500 topics written again and again (~100 MB written in all)."""
    value = b"r" * 1000
    sizes: list[int] = []
    for round_ in range(200):
        for topic in range(500):
            storage.put("retain", f"topic/{topic}".encode(), value + round_.to_bytes(2, "big"))
        storage.barrier().result(30)
        sizes.append(disk_bytes(storage.path))
    live = 500 * 1010
    assert wait_for(lambda: disk_bytes(storage.path) < live + 2 * MiB), (disk_bytes(storage.path), live)
    # Never far above: the WAL is truncated back, not left at its largest size.
    assert max(sizes[50:]) < live + Storage.WAL_LIMIT + 8 * MiB, max(sizes)


def test_an_existing_database_without_auto_vacuum_is_converted_at_open(tmp_path: Path) -> None:
    path = tmp_path / "broker.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE kv (tbl TEXT NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL, PRIMARY KEY (tbl, k))"
                 " WITHOUT ROWID")
    conn.executemany("INSERT INTO kv VALUES (?, ?, ?)", [("t", i.to_bytes(4, "big"), b"x" * 2000)
                                                         for i in range(3000)])
    conn.commit()
    conn.execute("DELETE FROM kv WHERE k > ?", ((10).to_bytes(4, "big"),))
    conn.commit()
    conn.close()
    s = Storage(path, maintenance_interval=0.2)
    s.open()
    try:
        assert len(s.load("t")) == 11
        check = sqlite3.connect(path)
        try:
            assert check.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
        finally:
            check.close()
        assert wait_for(lambda: disk_bytes(path) < 1 * MiB), disk_bytes(path)
    finally:
        s.close()
