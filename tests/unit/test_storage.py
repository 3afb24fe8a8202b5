from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vmqpy.storage import Storage, StorageError, prefix_upper_bound

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "node1" / "store.db"


@pytest.fixture
def storage(db_path: Path) -> Iterator[Storage]:
    s = Storage(db_path)
    s.open()
    yield s
    try:
        s.close()
    except StorageError:
        pass


def wait(fut: concurrent.futures.Future[None], timeout: float = 10.0) -> None:
    fut.result(timeout=timeout)


def raw_rows(path: Path, table: str) -> list[tuple[bytes, bytes]]:
    """Read through an independent connection: sees only what is committed."""
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("SELECT k, v FROM kv WHERE tbl = ? ORDER BY k", (table,)).fetchall()
    finally:
        conn.close()


class Gate:
    """Replaces Storage._apply: the writer thread blocks in its first batch until release()."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        original = Storage._apply
        gate = self

        def gated(conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
            if not gate.released.is_set():
                gate.entered.set()
                assert gate.released.wait(10)
            original(conn, batch)

        monkeypatch.setattr(Storage, "_apply", staticmethod(gated))

    def release(self) -> None:
        self.released.set()


# -- basics ----------------------------------------------------------------------------------------


def test_open_creates_dir_file_schema_and_wal(db_path: Path) -> None:
    assert not db_path.parent.exists()
    s = Storage(db_path)
    s.open()
    try:
        assert db_path.is_file()
        conn = sqlite3.connect(str(db_path))
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'kv'").fetchone()[0]
        finally:
            conn.close()
        assert "WITHOUT ROWID" in sql and "PRIMARY KEY (tbl, k)" in sql
        assert s.load("anything") == []
    finally:
        s.close()


def test_put_load_key_order_and_tables(storage: Storage) -> None:
    keys = [b"b", b"\xff", b"a\x00", b"", b"a", b"\x00", b"ab", b"\xff\x00"]
    for i, k in enumerate(keys):
        storage.put("t1", k, b"v%d" % i)
    storage.put("t2", b"a", b"other")
    wait(storage.barrier())
    assert storage.load("t1") == sorted((k, b"v%d" % i) for i, k in enumerate(keys))
    assert storage.load("t2") == [(b"a", b"other")]
    assert storage.load("t3") == []
    assert raw_rows(storage.path, "t1") == storage.load("t1")


def test_ops_apply_in_queue_order(storage: Storage) -> None:
    storage.put("t", b"put-then-delete", b"1")
    storage.delete("t", b"put-then-delete")
    storage.delete("t", b"delete-then-put")
    storage.put("t", b"delete-then-put", b"2")
    storage.put("t", b"overwrite", b"old")
    storage.put("t", b"overwrite", b"new")
    storage.put("t", b"p/1", b"x")
    storage.delete_prefix("t", b"p/")
    storage.put("t", b"p/2", b"after-prefix-delete")
    storage.put("t", b"q/1", b"x")
    storage.put("t", b"q/2", b"x")
    storage.delete_prefix("t", b"q/")
    wait(storage.barrier())
    assert dict(storage.load("t")) == {
        b"delete-then-put": b"2",
        b"overwrite": b"new",
        b"p/2": b"after-prefix-delete",
    }


def test_order_across_many_batches(db_path: Path) -> None:
    s = Storage(db_path, max_batch=7)
    s.open()
    try:
        for i in range(500):
            key = b"k%d" % (i % 13)
            if i % 5 == 4:
                s.delete("t", key)
            else:
                s.put("t", key, b"%d" % i)
        wait(s.barrier())
        model: dict[bytes, bytes] = {}
        for i in range(500):
            key = b"k%d" % (i % 13)
            if i % 5 == 4:
                model.pop(key, None)
            else:
                model[key] = b"%d" % i
        assert dict(s.load("t")) == model
        assert s.stats["ops"] == 500
        assert s.stats["max_batch_seen"] <= 7
        assert s.stats["commits"] >= 500 // 7
    finally:
        s.close()


def test_rejects_non_bytes(storage: Storage) -> None:
    with pytest.raises(TypeError):
        storage.put("t", "key", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        storage.put("t", b"k", bytearray(b"v"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        storage.delete("t", "k")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        storage.delete_prefix("t", "k")  # type: ignore[arg-type]
    wait(storage.barrier())
    assert storage.load("t") == []


def test_invalid_parameters(db_path: Path) -> None:
    with pytest.raises(ValueError):
        Storage(db_path, max_batch=0)
    with pytest.raises(ValueError):
        Storage(db_path, max_delay=-1)


# -- delete_prefix -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "bound"),
    [
        (b"a", b"b"),
        (b"ab", b"ac"),
        (b"a\xff", b"b"),
        (b"ab\xff\xff", b"ac"),
        (b"a\xfe", b"a\xff"),
        (b"\x00", b"\x01"),
        (b"\x00\xff", b"\x01"),
        (b"\xfe\xff\xff", b"\xff"),
        (b"\xff", None),
        (b"\xff\xff\xff", None),
        (b"", None),
    ],
)
def test_prefix_upper_bound(prefix: bytes, bound: bytes | None) -> None:
    assert prefix_upper_bound(prefix) == bound


EDGE_KEYS = [
    b"",
    b"\x00",
    b"\x00\xff",
    b"\x01",
    b"a",
    b"a\x00",
    b"a\xfe",
    b"a\xfe\xff",
    b"a\xff",
    b"a\xff\x00",
    b"a\xff\xff",
    b"a\xff\xff\xff",
    b"b",
    b"b\x00",
    b"\xfe",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
    b"\xff\xff\x01",
]


@pytest.mark.parametrize(
    "prefix", [b"", b"a", b"a\xff", b"a\xff\xff", b"a\xfe", b"\xff", b"\xff\xff", b"\xfe", b"\x00", b"c"]
)
def test_delete_prefix_edge_cases(storage: Storage, prefix: bytes) -> None:
    for k in EDGE_KEYS:
        storage.put("t", k, b"v")
        storage.put("neighbour", k, b"v")
    storage.delete_prefix("t", prefix)
    wait(storage.barrier())
    assert [k for k, _ in storage.load("t")] == sorted(k for k in EDGE_KEYS if not k.startswith(prefix))
    assert len(storage.load("neighbour")) == len(EDGE_KEYS)  # other tables untouched


SMALL_BYTES = st.sampled_from([b"\x00", b"\x01", b"a", b"\xfe", b"\xff"])


def _key() -> st.SearchStrategy[bytes]:
    return st.lists(SMALL_BYTES, max_size=3).map(b"".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("put"), _key(), st.binary(max_size=2)),
            st.tuples(st.just("delete"), _key(), st.just(b"")),
            st.tuples(st.just("prefix"), _key(), st.just(b"")),
            st.tuples(st.just("barrier"), st.just(b""), st.just(b"")),
        ),
        max_size=40,
    ),
    max_batch=st.integers(1, 10),
)
def test_ops_equal_dict_model(tmp_path: Path, ops: list[tuple[str, bytes, bytes]], max_batch: int) -> None:
    path = tmp_path / f"model-{time.monotonic_ns()}.db"
    s = Storage(path, max_batch=max_batch, max_delay=0)
    s.open()
    model: dict[bytes, bytes] = {}
    try:
        for op, key, value in ops:
            if op == "put":
                s.put("t", key, value)
                model[key] = value
            elif op == "delete":
                s.delete("t", key)
                model.pop(key, None)
            elif op == "prefix":
                s.delete_prefix("t", key)
                model = {k: v for k, v in model.items() if not k.startswith(key)}
            else:
                wait(s.barrier())
                assert s.load("t") == sorted(model.items())
        wait(s.barrier())
        assert s.load("t") == sorted(model.items())
    finally:
        s.close()


# -- barrier semantics -------------------------------------------------------------------------------


def test_barrier_with_nothing_pending_resolves_promptly(db_path: Path) -> None:
    s = Storage(db_path, max_delay=5.0)  # a long group-commit delay must not delay an empty barrier
    s.open()
    try:
        t0 = time.monotonic()
        wait(s.barrier(), timeout=2)
        assert time.monotonic() - t0 < 1.0
        assert s.stats["commits"] == 0
    finally:
        s.close()


def test_barrier_cuts_the_group_commit_delay_short(db_path: Path) -> None:
    s = Storage(db_path, max_delay=5.0)
    s.open()
    try:
        t0 = time.monotonic()
        s.put("t", b"k", b"v")
        wait(s.barrier(), timeout=4)
        assert time.monotonic() - t0 < 2.0
        assert raw_rows(db_path, "t") == [(b"k", b"v")]
    finally:
        s.close()


def test_unsynced_writes_wait_for_the_group_commit_delay(db_path: Path) -> None:
    s = Storage(db_path, max_delay=1.0)
    s.open()
    try:
        s.put("t", b"k", b"v")
        time.sleep(0.1)
        assert raw_rows(db_path, "t") == []  # still gathering a batch
        deadline = time.monotonic() + 5
        while not raw_rows(db_path, "t"):
            assert time.monotonic() < deadline, "never committed"
            time.sleep(0.02)
        assert s.stats["commits"] == 1
    finally:
        s.close()


def test_barrier_resolves_only_after_commit(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)
    storage.put("t", b"first", b"1")
    b1 = storage.barrier()
    assert gate.entered.wait(5)
    storage.put("t", b"second", b"2")
    b2 = storage.barrier()
    time.sleep(0.1)
    assert not b1.done() and not b2.done()
    assert raw_rows(storage.path, "t") == []
    seen_at_b1: list[list[tuple[bytes, bytes]]] = []
    b1.add_done_callback(lambda _: seen_at_b1.append(raw_rows(storage.path, "t")))
    gate.release()
    wait(b2)
    assert b1.done() and b1.exception() is None
    assert seen_at_b1 and (b"first", b"1") in seen_at_b1[0]  # committed when b1 resolved
    assert raw_rows(storage.path, "t") == [(b"first", b"1"), (b"second", b"2")]


def test_batches_take_everything_queued_up_to_max_batch(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    s = Storage(db_path, max_batch=2000)
    s.open()
    try:
        s.put("t", b"x", b"x")
        assert gate.entered.wait(5)  # the writer is inside the first batch: everything else queues up
        for i in range(5000):
            s.put("t", b"%05d" % i, b"v")
        fut = s.barrier()
        gate.release()
        wait(fut)
        batches = {k: s.stats[k] for k in ("commits", "ops", "max_batch_seen")}
        assert batches == {"commits": 4, "ops": 5001, "max_batch_seen": 2000}  # 1, 2000, 2000, 1000
        assert len(s.load("t")) == 5001
    finally:
        s.close()


async def test_sync_from_asyncio(storage: Storage) -> None:
    for i in range(100):
        storage.put("t", b"%03d" % i, b"v")
    await storage.sync()
    assert len(raw_rows(storage.path, "t")) == 100
    await storage.sync()  # nothing pending


async def test_cancelled_sync_does_not_break_the_writer(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    storage.put("t", b"a", b"1")
    task = asyncio.ensure_future(storage.sync())
    assert await asyncio.to_thread(gate.entered.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.release()
    storage.put("t", b"b", b"2")
    await asyncio.wait_for(storage.sync(), 5)
    assert storage.load("t") == [(b"a", b"1"), (b"b", b"2")]


# -- lifecycle -----------------------------------------------------------------------------------------


def test_close_commits_queued_and_reopen(db_path: Path) -> None:
    s = Storage(db_path, max_delay=10.0)  # without close() flushing, these would sit in the queue
    s.open()
    for i in range(1000):
        s.put("sessions", b"c%04d" % i, b"state%d" % i)
    s.delete("sessions", b"c0000")
    thread = s._thread
    s.close()
    assert thread is not None and not thread.is_alive()
    s.close()  # idempotent

    s2 = Storage(db_path)
    s2.open()
    try:
        rows = s2.load("sessions")
        assert len(rows) == 999
        assert rows[0] == (b"c0001", b"state1")
        s2.put("sessions", b"new", b"x")
        wait(s2.barrier())
    finally:
        s2.close()
    s3 = Storage(db_path)
    s3.open()
    try:
        assert len(s3.load("sessions")) == 1000
    finally:
        s3.close()


def test_use_before_open_and_after_close(db_path: Path) -> None:
    s = Storage(db_path)
    with pytest.raises(StorageError):
        s.put("t", b"k", b"v")
    with pytest.raises(StorageError):
        s.barrier()
    with pytest.raises(StorageError):
        s.load("t")
    s.open()
    with pytest.raises(StorageError):
        s.open()
    s.close()
    for call in (
        lambda: s.put("t", b"k", b"v"),
        lambda: s.delete("t", b"k"),
        lambda: s.delete_prefix("t", b"k"),
        lambda: s.barrier(),
        lambda: s.load("t"),
        lambda: s.open(),
    ):
        with pytest.raises(StorageError):
            call()
    Storage(db_path).close()  # closing a never-opened storage is fine


# -- errors ----------------------------------------------------------------------------------------------


def test_open_fails_with_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    s = Storage(blocker / "sub" / "store.db")
    with pytest.raises(StorageError) as info:
        s.open()
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(StorageError):
        s.put("t", b"k", b"v")


def test_open_fails_on_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(StorageError) as info:
        Storage(path).open()
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_writer_failure_is_reported(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
        raise OSError(28, "No space left on device")

    storage.put("t", b"ok", b"1")
    wait(storage.barrier())
    monkeypatch.setattr(Storage, "_apply", staticmethod(failing))
    with structlog.testing.capture_logs() as logs:
        storage.put("t", b"lost", b"2")
        fut = storage.barrier()
        with pytest.raises(StorageError) as info:
            fut.result(timeout=5)
    assert isinstance(info.value.__cause__, OSError)
    assert [e["event"] for e in logs] == ["storage.write_failed"]
    assert logs[0]["log_level"] == "error" and "No space left" in logs[0]["error"]
    with pytest.raises(StorageError) as later:
        storage.put("t", b"k", b"v")
    assert isinstance(later.value.__cause__, OSError)
    with pytest.raises(StorageError):
        storage.barrier()
    with pytest.raises(StorageError):
        storage.delete("t", b"ok")
    assert storage.load("t") == [(b"ok", b"1")]  # the failed batch was rolled back
    with pytest.raises(StorageError):
        storage.close()  # queued writes were lost: close says so
    storage.close()


def test_barriers_queued_behind_a_failure_fail_too(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch)
    storage.put("t", b"a", b"1")
    b1 = storage.barrier()
    assert gate.entered.wait(5)
    storage.put("t", b"b", b"2")
    b2 = storage.barrier()
    b3 = storage.barrier()

    def failing(conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Storage, "_apply", staticmethod(failing))  # later batches fail
    gate.release()
    # b1's batch was already inside the gated _apply (which succeeds); b2/b3 hit the failure.
    wait(b1)
    for fut in (b2, b3):
        with pytest.raises(StorageError):
            fut.result(timeout=5)
    with pytest.raises(StorageError):
        storage.barrier()


def test_database_locked_by_another_connection(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Storage, "BUSY_TIMEOUT", 0.05)
    s = Storage(db_path)
    s.open()
    other = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        s.put("t", b"k", b"v")
        with pytest.raises(StorageError) as info:
            s.barrier().result(timeout=5)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert "locked" in str(info.value.__cause__)
        with pytest.raises(StorageError):
            s.put("t", b"k2", b"v")
    finally:
        other.execute("ROLLBACK")
        other.close()
        with pytest.raises(StorageError):
            s.close()


# -- durability ------------------------------------------------------------------------------------------

KILL_SCRIPT = r"""
import asyncio, sys, time
from pathlib import Path
from vmqpy.storage import Storage

async def main() -> None:
    s = Storage(Path(sys.argv[1]))
    s.open()
    n = int(sys.argv[2])
    for i in range(n):
        s.put("msgs", b"%08d" % i, b"payload-%d" % i)
        if i % 1000 == 999:
            await asyncio.sleep(0)
    s.delete_prefix("msgs", b"0000000")  # keys 00000000..00000009
    await s.sync()
    print("synced", flush=True)
    for i in range(n, n + 100_000):  # keep writing without syncing until killed
        s.put("msgs", b"%08d" % i, b"unsynced")
        if i % 100 == 0:
            await asyncio.sleep(0)
    time.sleep(60)

asyncio.run(main())
"""


def test_synced_writes_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "node" / "store.db"
    n = 20_000
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(path), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "synced", proc.stderr.read() if proc.stderr else line
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()

    s = Storage(path)
    s.open()
    try:
        rows = dict(s.load("msgs"))
    finally:
        s.close()
    for i in range(10):
        assert b"%08d" % i not in rows
    for i in range(10, n):
        assert rows.get(b"%08d" % i) == b"payload-%d" % i
    # whatever of the unsynced tail made it is intact
    assert all(rows[k] == b"unsynced" for k in rows if int(k) >= n)
