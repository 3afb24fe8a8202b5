"""admin.http.OneLineBadRequests: aiohttp's log record for a request it could not parse (and answered with a 4xx
itself) becomes one warning line without a traceback; other records pass unchanged."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from admin.http import OneLineBadRequests, quiet_bad_requests


def _record(exc: BaseException | None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s",
                             ("127.0.0.1",), exc_info)


def test_a_bad_request_becomes_one_warning_line() -> None:
    try:
        raise LineTooLong("x" * 9000, "8190")
    except LineTooLong as e:
        record = _record(e)
    assert OneLineBadRequests().filter(record)
    assert (record.levelno, record.levelname, record.exc_info) == (logging.WARNING, "WARNING", None)
    line = record.getMessage()
    assert line.startswith("bad HTTP request from 127.0.0.1 answered 400: ") and "\n" not in line
    assert len(line) < 300


def test_other_errors_keep_their_traceback() -> None:
    try:
        raise RuntimeError("a bug in a handler")
    except RuntimeError as e:
        record = _record(e)
    OneLineBadRequests().filter(record)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    plain = _record(None)
    OneLineBadRequests().filter(plain)
    assert plain.getMessage() == "Error handling request from 127.0.0.1"


def test_installed_once() -> None:
    server_log = logging.getLogger("aiohttp.server")
    quiet_bad_requests()
    quiet_bad_requests()
    assert sum(isinstance(f, OneLineBadRequests) for f in server_log.filters) == 1
    record = _record(BadHttpMessage("Invalid header token"))
    assert server_log.filter(record) and record.levelno == logging.WARNING
