"""The replication log: one JSON line per metadata event, the input of the Spark convergence audits.

Lines are buffered in memory and written in one write at the end of the event-loop turn that made them (the
metadata service schedules `flush`; a long turn writes every MAX_BUFFERED_BYTES) and at shutdown, so logging
costs a list append on the write path and a kill -9 of the node loses at most the turn it interrupts. The schema
(field names, types, one example per event) is docs/replication-log.md; `SCHEMA_VERSION` changes whenever a field
changes meaning.

The log is bounded and private. A value is logged as its size and a sha256 prefix unless `values` is on (the
payloads of retained messages are in the values). The node rotates the file itself: when the next line would
take it past `max_size`, the file is renamed to `replication.log.SEQ` (on the loop: a rename and an open) and a
worker thread compresses it to `replication.log.SEQ.gz` and deletes all but the newest `count` rotated files.
Sequence numbers only grow: a file keeps its name once written, so the worker never races the loop and a reader
never sees a file renamed under it. Every file is created with mode 0600.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import re
import shutil
import time
from base64 import b64encode
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import structlog

SCHEMA_VERSION = 1
MAX_BUFFERED = 10_000
MAX_BUFFERED_BYTES = 1 << 20  # a long turn's lines go to the file in pieces of about this size
FILE_MODE = 0o600  # the log holds keys (client ids, topics) and, with values on, payloads
DIR_MODE = 0o700
DIGEST_HEX = 16  # `value_sha256`: the first 16 hex digits (64 bits) of the value's sha256
_COPY_CHUNK = 1 << 20

log = structlog.get_logger("vmqpy.metadata")


def _default(value: Any) -> Any:
    """What JSON does not know: bytes become base64 text (tuples already become lists)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return b64encode(value).decode("ascii")
    if hasattr(value, "to_list"):
        return value.to_list()
    raise TypeError(f"cannot log a {type(value).__name__}")


def _dumps(record: dict[str, Any]) -> bytes:
    """One line. orjson is loaded by the first line: a node without a replication log does not carry it (about
    1.3 MiB of an empty node's RSS, docs/performance.md "Memory")."""
    import orjson

    # stamps go through _default: lists
    return orjson.dumps(record, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS)


# -- rotation, pure: names and decisions ---------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Rotated:
    """A rotated file: `replication.log.SEQ` (just rotated, not compressed yet) or `replication.log.SEQ.gz`."""

    seq: int
    compressed: bool


def rotated_name(base: Path, seq: int, compressed: bool = True) -> Path:
    """`replication.log.7.gz` (or `replication.log.7` before its compression). Sequence numbers only grow, so a
    file never changes its name once written: the highest is the newest."""
    return base.with_name(f"{base.name}.{seq}.gz" if compressed else f"{base.name}.{seq}")


def partial_name(base: Path, seq: int) -> Path:
    """The compressed file being written: not a name the readers take for a log."""
    return base.with_name(f"{base.name}.{seq}.gz.tmp")


def parse_rotated(base: Path, name: str) -> Rotated | None:
    """The rotated file of `base` called `name`, None for every other name (the live file, a partial one)."""
    match = re.fullmatch(re.escape(base.name) + r"\.([1-9]\d*)(\.gz)?", name)
    return Rotated(int(match.group(1)), match.group(2) is not None) if match else None


def should_rotate(size: int, incoming: int, max_size: int) -> bool:
    """Rotate before writing `incoming` bytes to a live file of `size` bytes? Never with max_size 0 (rotation
    off), never an empty file (a turn's lines larger than max_size go to a file of their own)."""
    return max_size > 0 and size > 0 and size + incoming > max_size


def retention_plan(present: Iterable[Rotated], count: int) -> tuple[list[Rotated], list[int]]:
    """What the worker does with the rotated files `present`: the files to delete (all but the newest `count`
    sequence numbers; a not yet compressed copy whose compressed one is complete) and the sequence numbers to
    compress, oldest first."""
    files = sorted(set(present))
    seqs = sorted({r.seq for r in files})
    kept = set(seqs[-count:]) if count > 0 else set()
    compressed = {r.seq for r in files if r.compressed}
    deletes = [r for r in files if r.seq not in kept or (not r.compressed and r.seq in compressed)]
    return deletes, [seq for seq in seqs if seq in kept and seq not in compressed]


# -- rotation, the file work (the worker thread) ---------------------------------------------------------------


def _private_open(path: Path, flags: int) -> int:
    """Open (or create) `path` with mode 0600, also when it existed with a wider mode."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _compress(source: Path, target: Path) -> None:
    """`source` gzip-compressed into `target` (0600), on disk (fsynced) before this returns."""
    with open(source, "rb") as src, os.fdopen(_private_open(target, os.O_WRONLY | os.O_TRUNC), "wb") as raw:
        with gzip.GzipFile(filename=source.name, mode="wb", fileobj=raw, compresslevel=6) as packed:
            shutil.copyfileobj(src, packed, _COPY_CHUNK)  # zlib releases the GIL while it deflates
        raw.flush()
        os.fsync(raw.fileno())


def rotated_files(base: Path) -> list[Rotated]:
    return sorted(r for p in base.parent.iterdir() if (r := parse_rotated(base, p.name)) is not None)


def maintain(base: Path, count: int) -> None:
    """Delete the rotated files past `count`, compress the others, make them 0600 (the worker's job).

    Safe to run again after a crash at any point: `replication.log.N` is deleted only once `replication.log.N.gz`
    is complete on disk, and a partial `.gz.tmp` is written again from it."""
    deletes, compress = retention_plan(rotated_files(base), count)
    for r in deletes:
        rotated_name(base, r.seq, r.compressed).unlink(missing_ok=True)
    for path in base.parent.glob(f"{glob.escape(base.name)}.*.gz.tmp"):
        digits = path.name[len(base.name) + 1 : -len(".gz.tmp")]
        if not (digits.isdigit() and int(digits) in compress):
            path.unlink(missing_ok=True)  # of a file deleted meanwhile
    for seq in compress:
        plain, partial = rotated_name(base, seq, False), partial_name(base, seq)
        _compress(plain, partial)
        os.replace(partial, rotated_name(base, seq))
        plain.unlink()
    for r in rotated_files(base):
        rotated_name(base, r.seq, r.compressed).chmod(FILE_MODE)  # files of a version before the umask


class ReplicationLog:
    """Appends events to `path`. Not thread-safe: call from the node's event loop (the compression of rotated
    files runs on a worker thread of its own)."""

    def __init__(
        self,
        path: Path,
        node: str,
        *,
        max_size: int = 0,
        count: int = 5,
        values: bool = False,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = path
        self.node = node
        self.max_size = max_size
        self.count = count
        self.values = values
        self._wall_ns = wall_ns
        self._buffer: list[bytes] = []
        self._buffered = 0  # bytes in _buffer
        self._file: IO[bytes] | None = None
        self._size = 0
        self._worker: ThreadPoolExecutor | None = None
        self._job: Future[None] | None = None
        self._seq = 1  # of the next rotated file
        self.lines_written = 0
        self.rotations = 0

    @property
    def size(self) -> int:
        """Bytes in the live file."""
        return self._size

    def open(self) -> None:
        self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        fd = _private_open(self.path, os.O_WRONLY | os.O_APPEND)
        self._file = os.fdopen(fd, "ab")
        self._size = os.fstat(fd).st_size
        present = rotated_files(self.path)
        self._seq = max((r.seq for r in present), default=0) + 1
        if present or any(self.path.parent.glob(f"{glob.escape(self.path.name)}.*.gz.tmp")):
            self._submit()  # a compression a stop or crash interrupted, count lowered, modes of an older version

    def write(self, event: str, hlc: Any, fields: dict[str, Any]) -> None:
        record = {"schema": SCHEMA_VERSION, "ts": self._wall_ns(), "node": self.node, "hlc": hlc, "event": event}
        record.update(fields)
        value = record.get("value")
        if isinstance(value, bytes | bytearray | memoryview):  # encoded here, never by orjson's fallback
            value = bytes(value)
            if self.values:
                record["value"] = b64encode(value).decode("ascii")
            else:
                del record["value"]
                record["value_size"] = len(value)
                record["value_sha256"] = hashlib.sha256(value).hexdigest()[:DIGEST_HEX]
        line = _dumps(record)
        self._buffer.append(line)
        self._buffered += len(line)
        if len(self._buffer) >= MAX_BUFFERED or self._buffered >= MAX_BUFFERED_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._buffer or self._file is None:
            return
        lines, self._buffer, self._buffered = self._buffer, [], 0
        total = sum(map(len, lines)) + len(lines)
        if self.max_size <= 0 or self._size + total <= self.max_size:
            self._append(lines, total)
            return
        chunk: list[bytes] = []
        size = 0
        for line in lines:  # a turn's lines can fill several files: each rotated at max_size
            if should_rotate(self._size + size, len(line) + 1, self.max_size):
                if chunk:
                    self._append(chunk, size)
                    chunk, size = [], 0
                self._rotate()
            chunk.append(line)
            size += len(line) + 1
        self._append(chunk, size)

    def _append(self, lines: list[bytes], size: int) -> None:
        assert self._file is not None
        self._file.write(b"\n".join(lines) + b"\n")
        self._file.flush()
        self._size += size
        self.lines_written += len(lines)

    def _rotate(self) -> None:
        """Live file -> `replication.log.SEQ` and a new live file (on the loop: a rename and an open); the
        compression and the deletion of the oldest handed to the worker."""
        assert self._file is not None
        self._file.close()
        os.replace(self.path, rotated_name(self.path, self._seq, compressed=False))
        self._seq += 1
        self._file = os.fdopen(_private_open(self.path, os.O_WRONLY | os.O_APPEND), "ab")
        self._size = 0
        self.rotations += 1
        self._submit()

    def _submit(self) -> None:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vmqpy-replog")
        self._job = self._worker.submit(self._maintain)

    def _maintain(self) -> None:
        try:
            maintain(self.path, self.count)
        except OSError as exc:  # disk full, a file removed by hand: the next rotation tries again
            log.warning("replication log rotation failed", path=str(self.path), error=str(exc))

    def wait_rotated(self, timeout: float | None = None) -> None:
        """Wait until the compression in progress (if any) is done."""
        if self._job is not None:
            self._job.result(timeout)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        if self._worker is not None:
            self._worker.shutdown(wait=True)  # a compression in progress ends (its input is never lost anyway)
            self._worker = None
            self._job = None
