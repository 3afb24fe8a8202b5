"""`log.console`: console and json on stderr, file in `log.console.file`, both in both, off nowhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from vmqpy import logconfig


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logconfig.configure("console", "info")  # closes the test's log file
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def log_one(name: str) -> None:
    structlog.get_logger(name).warning("hello from the test", n=1)


@pytest.mark.parametrize(("fmt", "on_stderr", "in_file"), [
    ("console", True, False),
    ("json", True, False),
    ("file", False, True),
    ("both", True, True),
    ("off", False, False),
])
def test_where_lines_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, on_stderr: bool, in_file: bool
) -> None:
    log_file = tmp_path / "logs" / "console.log"  # its directory is made
    logconfig.configure(fmt, "info", node="n1@127.0.0.1", file=log_file)
    log_one(f"test.{fmt}")
    stderr = capsys.readouterr().err
    assert ("hello from the test" in stderr) == on_stderr
    written = log_file.read_text() if log_file.exists() else ""
    assert ("hello from the test" in written) == in_file
    if in_file:
        assert "n1@127.0.0.1" in written and written.endswith("\n")
    if fmt == "json":
        assert json.loads(stderr.strip())["event"] == "hello from the test"


def test_the_file_is_appended_to(tmp_path: Path) -> None:
    log_file = tmp_path / "console.log"
    log_file.write_text("an earlier run\n")
    logconfig.configure("file", "info", file=log_file)
    log_one("test.append")
    lines = log_file.read_text().splitlines()
    assert lines[0] == "an earlier run" and "hello from the test" in lines[1]


def test_a_log_file_that_cannot_be_opened_is_an_oserror(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(OSError):
        logconfig.configure("file", "info", file=blocker / "console.log")
