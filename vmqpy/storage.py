"""Durable key/value storage: SQLite in WAL mode, written by one thread with group commit.

The event loop queues operations (``put``, ``delete``, ``delete_prefix``) without blocking; a single
writer thread takes everything queued (up to ``max_batch`` operations) and commits it in one
transaction, then resolves the ``barrier()`` futures that were queued before that point. Operations
are applied in the order they were queued.

Durability: the database runs with ``journal_mode=WAL`` and ``synchronous=NORMAL``. A committed
transaction has been written to the WAL file (it is in the OS page cache), so once ``barrier()`` /
``sync()`` has resolved, the writes survive a crash of the process (``kill -9``). They can be lost
on a power failure or kernel crash until the next WAL checkpoint (this is what NORMAL trades for
speed).

Size on disk: the file and its WAL come back to the size of what is live. The database runs with
``auto_vacuum=INCREMENTAL`` (a file made before is converted once at open, with a VACUUM) and
``journal_size_limit`` (:attr:`Storage.WAL_LIMIT`); SQLite's own checkpoint every
:attr:`Storage.CHECKPOINT_PAGES` pages (1 MiB) keeps the WAL from growing while writes go on, and every
``maintenance_interval`` seconds after a write the writer thread (the only thread that writes, never the
event loop) returns free pages to the file system (``PRAGMA incremental_vacuum``, at most
:attr:`Storage.VACUUM_STEP` pages at a time, once more than :attr:`Storage.FREE_PAGES_KEPT` are free) and
truncates the WAL (``PRAGMA wal_checkpoint(TRUNCATE)``). Without this a burst (an offline queue filled and
delivered, many retained messages cleared) left its pages in the file and its WAL at its largest size for
ever (tests/unit/test_storage_bounds.py, tests/integration/test_data_dir_bounds.py).

Errors in the writer thread are not swallowed: they are logged on the ``vmqpy.storage`` structlog
logger, every pending barrier future fails with a :class:`StorageError` (whose ``__cause__`` is the
original exception), and every later ``put`` / ``delete`` / ``barrier`` raises :class:`StorageError`.

Schema: one table ``kv(tbl, k, v)`` keyed by ``(tbl, k)``; several logical tables (sessions,
subscriptions, queued messages, retained messages, metadata) share it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import structlog

__all__ = ["Storage", "StorageError", "prefix_upper_bound"]

log = structlog.get_logger("vmqpy.storage")

_PUT = 0
_DELETE = 1
_DELETE_PREFIX = 2
_BARRIER = 3  # kinds >= _BARRIER are not database operations
_STOP = 4

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    "tbl TEXT NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL, PRIMARY KEY (tbl, k)"
    ") WITHOUT ROWID"
)
_SQL_PUT = "INSERT OR REPLACE INTO kv (tbl, k, v) VALUES (?, ?, ?)"
_SQL_DELETE = "DELETE FROM kv WHERE tbl = ? AND k = ?"
_SQL_DELETE_RANGE = "DELETE FROM kv WHERE tbl = ? AND k >= ? AND k < ?"
_SQL_DELETE_FROM = "DELETE FROM kv WHERE tbl = ? AND k >= ?"
_SQL_LOAD = "SELECT k, v FROM kv WHERE tbl = ? ORDER BY k"


class StorageError(Exception):
    """The storage cannot be opened, is closed, or its writer failed (see ``__cause__``)."""


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with ``prefix``.

    ``None`` if there is none (``prefix`` is empty or all 0xFF bytes): then every key ``>= prefix``
    starts with it. Trailing 0xFF bytes cannot be incremented, so they are dropped first:
    ``b"a\\xff"`` -> ``b"b"``.
    """
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes((p[-1] + 1,))


def _resolve(fut: concurrent.futures.Future[None], exc: BaseException | None) -> None:
    try:
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled by its waiter


class Storage:
    """Key/value tables in one SQLite file, with batched writes on a single writer thread.

    ``put``, ``delete``, ``delete_prefix`` and ``barrier`` must be called from one thread (the event
    loop). ``load`` is a synchronous read, meant for start-up or small reads from the loop thread.
    """

    #: SQLite busy timeout (seconds) for both connections.
    BUSY_TIMEOUT: ClassVar[float] = 5.0
    #: How long ``close()`` waits for the writer thread to finish (seconds).
    CLOSE_TIMEOUT: ClassVar[float] = 30.0
    #: The WAL file is truncated to this size after a checkpoint (SQLite's ``journal_size_limit``), bytes.
    WAL_LIMIT: ClassVar[int] = 1 << 20
    #: SQLite checkpoints the WAL into the database after this many pages (``wal_autocheckpoint``; SQLite's
    #: default 1,000 pages kept a 4 MiB WAL beside a database of a few hundred KiB).
    CHECKPOINT_PAGES: ClassVar[int] = 256
    #: Free pages left in the file for the next writes; above this many, maintenance gives them back.
    FREE_PAGES_KEPT: ClassVar[int] = 256
    #: The most pages one maintenance gives back (a bounded pause of the writer thread: 16 MiB of 4 KiB pages).
    VACUUM_STEP: ClassVar[int] = 4096

    def __init__(self, path: Path, *, max_batch: int = 2000, max_delay: float = 0.002,
                 maintenance_interval: float = 30.0) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if max_delay < 0:
            raise ValueError("max_delay must be >= 0")
        if not maintenance_interval > 0:
            raise ValueError("maintenance_interval must be > 0")
        self.path = Path(path)
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.maintenance_interval = maintenance_interval
        self.stats: dict[str, int] = {"commits": 0, "ops": 0, "max_batch_seen": 0, "checkpoints": 0,
                                      "vacuumed_pages": 0, "maintenance_errors": 0}
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        # Why put/barrier are refused (None while open and healthy), and the underlying exception.
        self._reject: str | None = "storage is not open"
        self._cause: BaseException | None = None
        self._failed = False  # set by the writer thread; from then on it only fails barriers
        self._state = "new"  # new -> open -> closed
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            str(self.path), timeout=self.BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
        try:
            # Before anything creates the file (WAL mode writes its first page): a new file gets incremental
            # auto-vacuum; on an existing one this does nothing (_incremental_vacuum_mode converts it).
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"cannot enable WAL journal mode on {self.path} (got {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA journal_size_limit={self.WAL_LIMIT}")
            conn.execute(f"PRAGMA wal_autocheckpoint={self.CHECKPOINT_PAGES}")
        except BaseException:
            conn.close()
            raise
        return conn

    def open(self) -> None:
        """Create the directory, the database file and the schema; start the writer thread."""
        if self._state != "new":
            raise StorageError(f"storage is {self._state}; open() can be called once")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            writer = self._connect()
            try:
                self._incremental_vacuum_mode(writer)
                writer.execute(_SCHEMA)
                reader = self._connect()
            except BaseException:
                writer.close()
                raise
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open storage at {self.path}: {exc}") from exc
        self._writer = writer
        self._reader = reader
        self._state = "open"
        self._reject = None
        self._thread = threading.Thread(target=self._run, name=f"vmqpy-storage:{self.path.name}", daemon=True)
        self._thread.start()

    def _incremental_vacuum_mode(self, conn: sqlite3.Connection) -> None:
        """``auto_vacuum=INCREMENTAL``: set on a new file before its first table; a file made without it (by an
        earlier version) is converted with one VACUUM, which rewrites it (logged, with its size)."""
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            return
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            started = time.monotonic()
            before = self.path.stat().st_size
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            log.info("storage.converted_to_incremental_vacuum", path=str(self.path), bytes_before=before,
                     bytes_after=self.path.stat().st_size, seconds=round(time.monotonic() - started, 3))

    def close(self) -> None:
        """Commit what is queued, stop and join the writer thread, close the database. Idempotent.

        Raises :class:`StorageError` (after closing) if the writer failed at any point, i.e. if some
        queued writes were not committed.
        """
        if self._state == "closed":
            return
        was_open = self._state == "open"
        self._state = "closed"
        self._reject = "storage is closed"
        if not was_open:
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue.put((_STOP, done))
        thread = self._thread
        assert thread is not None
        thread.join(self.CLOSE_TIMEOUT)
        if thread.is_alive():
            # The writer still owns its connection; leave it to the daemon thread.
            log.error("storage.close_timeout", path=str(self.path), timeout=self.CLOSE_TIMEOUT)
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        if thread.is_alive():
            raise StorageError(f"storage writer did not stop within {self.CLOSE_TIMEOUT}s")
        exc = done.exception(timeout=0)
        if exc is not None:
            raise StorageError(f"storage closed after a write failure: {exc}") from exc

    # -- reads -------------------------------------------------------------------------------------

    def load(self, table: str) -> list[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of ``table`` in key order (committed data only)."""
        with self._read_lock:
            if self._reader is None:
                raise StorageError("storage is not open")
            try:
                rows: list[tuple[bytes, bytes]] = self._reader.execute(_SQL_LOAD, (table,)).fetchall()
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read table {table!r}: {exc}") from exc
        return rows

    # -- writes (event loop thread) ----------------------------------------------------------------

    def _refuse(self) -> StorageError:
        err = StorageError(self._reject)
        err.__cause__ = self._cause
        return err

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Queue ``table[key] = value``."""
        if self._reject is not None:
            raise self._refuse()
        if type(key) is not bytes or type(value) is not bytes:
            raise TypeError("key and value must be bytes")
        self._queue.put((_PUT, table, key, value))

    def delete(self, table: str, key: bytes) -> None:
        """Queue the deletion of ``table[key]`` (no error if it does not exist)."""
        if self._reject is not None:
            raise self._refuse()
        if type(key) is not bytes:
            raise TypeError("key must be bytes")
        self._queue.put((_DELETE, table, key))

    def delete_prefix(self, table: str, prefix: bytes) -> None:
        """Queue the deletion of every key of ``table`` that starts with ``prefix``."""
        if self._reject is not None:
            raise self._refuse()
        if type(prefix) is not bytes:
            raise TypeError("prefix must be bytes")
        self._queue.put((_DELETE_PREFIX, table, prefix, prefix_upper_bound(prefix)))

    def barrier(self) -> concurrent.futures.Future[None]:
        """A future resolved once everything queued before it is committed (or failed with StorageError)."""
        if self._reject is not None:
            raise self._refuse()
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._queue.put((_BARRIER, fut))
        return fut

    async def sync(self) -> None:
        """Wait until everything queued so far is committed."""
        await asyncio.wrap_future(self.barrier())

    # -- writer thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        q = self._queue
        max_batch = self.max_batch
        max_delay = self.max_delay
        get = q.get
        get_nowait = q.get_nowait
        monotonic = time.monotonic
        Empty = queue.Empty
        batch: list[tuple[Any, ...]] = []
        interval = self.maintenance_interval
        due = 0.0  # when the next maintenance runs; 0: nothing written since the last one
        try:
            while True:
                if due:
                    try:
                        item = get(timeout=max(0.0, due - monotonic()))
                    except Empty:
                        due = monotonic() + interval if self._maintain() else 0.0
                        continue
                else:
                    item = get()
                batch = [item]
                kind = item[0]
                nops = 1 if kind < _BARRIER else 0
                waiting = kind == _BARRIER  # someone waits: commit as soon as the queue is empty
                stop = kind == _STOP
                deadline = 0.0
                while not stop and nops < max_batch:
                    try:
                        item = get_nowait()
                    except Empty:
                        # Nothing more right now. Wait a little for more operations (group commit)
                        # unless somebody waits on a barrier (then nops may be 0: commit nothing).
                        if waiting or max_delay <= 0:
                            break
                        now = monotonic()
                        if not deadline:
                            deadline = now + max_delay
                        if now >= deadline:
                            break
                        try:
                            item = get(timeout=deadline - now)
                        except Empty:
                            break
                    batch.append(item)
                    kind = item[0]
                    if kind < _BARRIER:
                        nops += 1
                    elif kind == _BARRIER:
                        waiting = True
                    else:
                        stop = True
                self._process(batch, nops)
                batch = []
                if stop:
                    return
                if nops:
                    now = monotonic()
                    if not due:
                        due = now + interval
                    elif now >= due:  # writes without a pause: maintenance between two batches
                        self._maintain()
                        due = monotonic() + interval
        except BaseException as exc:  # a bug in this module: never leave waiters hanging
            self._mark_failed(exc, len(batch))
            self._fail(exc, batch)
            if batch and batch[-1][0] == _STOP:
                return
            while True:  # fail everything until close() asks us to stop
                item = get()
                self._fail(exc, [item])
                if item[0] == _STOP:
                    return
        finally:
            if self._writer is not None:
                try:
                    self._writer.close()
                except sqlite3.Error:
                    pass

    def _process(self, batch: list[tuple[Any, ...]], nops: int) -> None:
        """Apply the operations of ``batch`` in one transaction, then resolve its futures."""
        if self._failed:
            self._fail(self._cause, batch)
            return
        if nops:
            conn = self._writer
            assert conn is not None
            try:
                conn.execute("BEGIN")
                try:
                    self._apply(conn, batch)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    raise
            except Exception as exc:
                self._mark_failed(exc, nops)
                self._fail(exc, batch)
                return
            stats = self.stats
            stats["commits"] += 1
            stats["ops"] += nops
            if nops > stats["max_batch_seen"]:
                stats["max_batch_seen"] = nops
        for item in batch:
            if item[0] >= _BARRIER:
                _resolve(item[1], None)

    def _maintain(self) -> bool:
        """Give free pages back to the file system and truncate the WAL (writer thread, between batches); whether
        there is more to do (more free pages than one step, or the checkpoint could not finish). A failure here
        loses nothing (every write is committed): it is logged and counted, and writes go on."""
        conn = self._writer
        if conn is None or self._failed:
            return False
        try:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            if free > self.FREE_PAGES_KEPT:
                pages = min(free, self.VACUUM_STEP)
                # Run to its end by sqlite3_exec: the module's execute() steps a statement without result
                # columns once, and this one frees one page per step.
                conn.executescript(f"PRAGMA incremental_vacuum({pages});")
                self.stats["vacuumed_pages"] += free - conn.execute("PRAGMA freelist_count").fetchone()[0]
            busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                self.stats["checkpoints"] += 1
            return bool(busy) or free > self.FREE_PAGES_KEPT + self.VACUUM_STEP
        except sqlite3.Error as exc:
            self.stats["maintenance_errors"] += 1
            log.warning("storage.maintenance_failed", path=str(self.path), error=repr(exc))
            return False

    @staticmethod
    def _apply(conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
        """Execute the operations of ``batch`` in order; runs of puts / deletes use executemany."""
        run: list[tuple[Any, ...]] = []
        run_kind = -1
        for item in batch:
            kind = item[0]
            if kind >= _BARRIER:
                continue
            if kind != run_kind and run:
                conn.executemany(_SQL_PUT if run_kind == _PUT else _SQL_DELETE, run)
                run = []
            if kind == _PUT or kind == _DELETE:
                run_kind = kind
                run.append(item[1:])
            elif kind == _DELETE_PREFIX:
                run_kind = -1
                _, table, prefix, upper = item
                if upper is None:
                    conn.execute(_SQL_DELETE_FROM, (table, prefix))
                else:
                    conn.execute(_SQL_DELETE_RANGE, (table, prefix, upper))
        if run:
            conn.executemany(_SQL_PUT if run_kind == _PUT else _SQL_DELETE, run)

    def _mark_failed(self, exc: BaseException, nops: int) -> None:
        """Enter the failed state: log, and refuse every later operation."""
        self._failed = True
        self._cause = exc
        self._reject = f"storage writer failed: {exc!r}"
        log.error("storage.write_failed", path=str(self.path), error=repr(exc), batch_ops=nops, exc_info=exc)

    def _fail(self, cause: BaseException | None, batch: list[tuple[Any, ...]]) -> None:
        """Fail the futures of ``batch`` (barriers and the stop request); drop its operations."""
        for item in batch:
            if item[0] >= _BARRIER:
                err = StorageError(f"storage writer failed: {cause!r}")
                err.__cause__ = cause
                _resolve(item[1], err)
