"""The only structlog.configure call of the node: console text or JSON lines on stderr, or text in a file, or both.

The file (`log.file`, or its older name `log.console.file`) rotates by size through the standard library's
`logging.handlers.RotatingFileHandler`: before a line would take the file to `log.file.max_size` bytes, the file
becomes `PATH.1` (the older ones `PATH.2` ... `PATH.<log.file.count>`, the oldest deleted) and a new one starts.
A line is never split between two files. `max_size = 0` never rotates.

The level can change while the node runs (`vmq-admin set log.console.level=debug`, `vmq-admin log level`).
Module loggers are cached on first use, so the level is not baked into them: every logger asks the one
current threshold (`set_level`) when a method is called, which costs one comparison for a filtered call.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
LEVELS = tuple(_LEVELS)


class _Threshold:
    """The lowest level logged now (shared by every logger of the process)."""

    value = logging.INFO


def _drop(_logger: Any, _name: str, _event: MutableMapping[str, Any]) -> Mapping[str, Any]:
    raise structlog.DropEvent


class LevelLogger(structlog.BoundLoggerBase):
    """A bound logger whose methods check the process-wide threshold at each call (see the module docstring)."""

    def _log(self, level: int, method: str, event: str | None, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        if level < _Threshold.value:
            return None
        if args:
            event = event % args if event is not None else event
        return self._proxy_to_logger(method, event, **kw)

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._log(logging.DEBUG, "debug", event, args, kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._log(logging.INFO, "info", event, args, kw)

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._log(logging.WARNING, "warning", event, args, kw)

    warn = warning

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._log(logging.ERROR, "error", event, args, kw)

    def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        kw.setdefault("exc_info", True)
        return self._log(logging.ERROR, "error", event, args, kw)

    def critical(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._log(logging.CRITICAL, "critical", event, args, kw)

    fatal = critical


def set_level(level: str) -> None:
    """Log `level` and above from now on, in every logger already made; ValueError for an unknown level."""
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}: expected one of {', '.join(LEVELS)}")
    _Threshold.value = _LEVELS[level]


def enabled(level: int) -> bool:
    """Whether a line at `level` (logging.INFO, ...) is logged now: lets a hot path skip building a line's fields
    (and binding a logger for it) when it would be dropped."""
    return level >= _Threshold.value


def level() -> str:
    """The current level's name."""
    return next((name for name, number in _LEVELS.items() if number == _Threshold.value), "critical")


class _ConnectionLines:
    """`log.connections`: whether each client connection writes its `client connected` and `client disconnected`
    lines (info). Process-wide like the level, and changed at run time the same way (`vmq-admin set`)."""

    on = True


def set_connection_lines(on: bool) -> None:
    """Log (True) or leave out (False) the per-connection `client connected` / `client disconnected` lines."""
    _ConnectionLines.on = on


def connection_lines() -> bool:
    """Whether a connection's connect and disconnect lines are logged now: `log.connections` is on and info is
    logged (checked before the line's fields and the connection's bound logger are made)."""
    return _ConnectionLines.on and _Threshold.value <= logging.INFO


class LineStream(Protocol):
    """Where LineWriter writes: stderr, or a log file."""

    def write(self, text: str, /) -> Any: ...

    def flush(self) -> None: ...


class LineWriter:
    """The end of the chain: writes each rendered line to every one of `streams` (stderr, a log file), whole
    lines even when several threads log."""

    def __init__(self, streams: Sequence[LineStream]) -> None:
        self.streams = tuple(streams)
        self._lock = threading.Lock()

    def msg(self, message: str) -> None:
        line = message + "\n"
        with self._lock:
            for stream in self.streams:
                stream.write(line)
                stream.flush()

    log = debug = info = warn = warning = error = exception = critical = fatal = msg


class _SizeRotatingHandler(logging.handlers.RotatingFileHandler):
    """RotatingFileHandler that never rotates an empty file (a first line longer than max_size stays alone in it,
    rather than leaving an empty rotated file behind)."""

    def shouldRollover(self, record: logging.LogRecord) -> int:
        stream = self.stream
        if stream is not None and self.maxBytes > 0:
            stream.seek(0, 2)
            if stream.tell() == 0:
                return False
        return super().shouldRollover(record)


class RotatingLogFile:
    """A log file appended to line by line, rotated by size (see the module docstring): `max_size` bytes at most
    per file (0: never rotated), `count` rotated files kept (PATH.1 the newest). Its directory is made if
    missing; OSError when the file cannot be opened, ValueError for a size or count out of range."""

    def __init__(self, path: Path, max_size: int = 0, count: int = 5) -> None:
        if max_size < 0 or count < 0 or (max_size > 0 and count < 1):
            raise ValueError(f"log file rotation needs max_size >= 0 and, when rotating, count >= 1 "
                             f"(got max_size={max_size}, count={count})")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._handler = _SizeRotatingHandler(path, maxBytes=max_size, backupCount=count, encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler.terminator = ""  # the lines come with their newline

    def write(self, text: str, /) -> None:
        """Append `text` (whole lines), after rotating when it would take the file past `max_size`."""
        # a record of the text as it is (no %-formatting: it carries no args); emit rotates, writes and flushes
        self._handler.emit(logging.makeLogRecord({"msg": text, "levelno": logging.INFO}))

    def flush(self) -> None:
        self._handler.flush()

    def close(self) -> None:
        self._handler.close()


class _LogFile:
    """The log file the node writes now (closed when `configure` is called again)."""

    stream: RotatingLogFile | None = None


def _streams(fmt: str, file: Path | None, max_size: int, count: int) -> list[LineStream]:
    """Where the lines of `fmt` go: stderr for console and json, the file for file, both for both (the file of
    an earlier configuration is closed)."""
    if _LogFile.stream is not None:
        _LogFile.stream.close()
        _LogFile.stream = None
    stderr: TextIO = sys.stderr
    if fmt in ("file", "both"):
        if file is None:
            raise ValueError(f"log.console = {fmt} needs a log file")
        log_file = _LogFile.stream = RotatingLogFile(file, max_size, count)  # kept open while the node runs
        return [log_file] if fmt == "file" else [stderr, log_file]
    return [stderr]


def configure(fmt: str = "console", level: str = "info", node: str | None = None, file: Path | None = None,
              max_size: int = 0, count: int = 5) -> None:
    """Configure structlog once. `fmt` is console, json, file (text lines in `file`), both (on stderr and in
    `file`) or off; context vars (node, client_id, peer) merge in. `file` rotates at `max_size` bytes keeping
    `count` older files (`RotatingLogFile`). OSError when `file` cannot be opened."""
    set_level(level)
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "off":
        processors = [_drop]
    elif fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    writer = LineWriter(_streams(fmt, file, max_size, count))
    structlog.configure(
        processors=processors,
        wrapper_class=LevelLogger,
        logger_factory=lambda *_args: writer,
        cache_logger_on_first_use=True,
    )
    if node is not None:
        structlog.contextvars.bind_contextvars(node=node)
