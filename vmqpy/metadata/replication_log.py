"""The replication log: one JSON line per metadata event, the input of the Spark convergence audits.

Lines are buffered in memory and written in one write at the end of the event-loop turn that made them (the
metadata service schedules `flush`) and at shutdown, so logging costs a list append on the write path and a
kill -9 of the node loses at most the turn it interrupts. The schema (field names, types, one example per event)
is docs/replication-log.md; `SCHEMA_VERSION` changes whenever a field changes meaning.
"""

from __future__ import annotations

import os
import time
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import orjson

SCHEMA_VERSION = 1
MAX_BUFFERED = 10_000


def _default(value: Any) -> Any:
    """What JSON does not know: bytes become base64 text (tuples already become lists)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return b64encode(value).decode("ascii")
    if hasattr(value, "to_list"):
        return value.to_list()
    raise TypeError(f"cannot log a {type(value).__name__}")


_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS  # stamps go through _default: lists


def _dumps(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record, default=_default, option=_OPTIONS)


class ReplicationLog:
    """Appends events to `path`. Not thread-safe: call from the node's event loop."""

    def __init__(self, path: Path, node: str, *, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.path = path
        self.node = node
        self._wall_ns = wall_ns
        self._buffer: list[bytes] = []
        self._file: IO[bytes] | None = None
        self.lines_written = 0

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")

    def write(self, event: str, hlc: Any, fields: dict[str, Any]) -> None:
        record = {"schema": SCHEMA_VERSION, "ts": self._wall_ns(), "node": self.node, "hlc": hlc, "event": event}
        record.update(fields)
        value = record.get("value")
        if type(value) is bytes:  # the common case, without a call back from orjson into Python
            record["value"] = b64encode(value).decode("ascii")
        self._buffer.append(_dumps(record))
        if len(self._buffer) >= MAX_BUFFERED:
            self.flush()

    def flush(self) -> None:
        if not self._buffer or self._file is None:
            return
        lines, self._buffer = self._buffer, []
        self._file.write(b"\n".join(lines) + b"\n")
        self._file.flush()
        self.lines_written += len(lines)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
