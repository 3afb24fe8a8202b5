"""`log.console`: console and json on stderr, file in `log.file` (alias `log.console.file`), both in both, off
nowhere; the file rotates by size."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

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


# -- size-based rotation (log.file.max_size, log.file.count) -------------------------------------------------------

def files_of(path: Path) -> list[Path]:
    """The log file and its rotated files, newest last."""
    rotated = sorted(path.parent.glob(path.name + ".*"), key=lambda p: -int(p.suffix[1:]))
    return [*rotated, *([path] if path.exists() else [])]


def test_the_file_rotates_at_max_size_and_keeps_count_files(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "vmqpy.log"
    log_file = logconfig.RotatingLogFile(path, max_size=200, count=2)
    lines = [f"line {n:03d} " + "x" * 30 + "\n" for n in range(40)]
    for line in lines:
        log_file.write(line)
    log_file.close()
    assert [p.name for p in files_of(path)] == ["vmqpy.log.2", "vmqpy.log.1", "vmqpy.log"]
    kept = "".join(p.read_text() for p in files_of(path))
    assert all(p.stat().st_size <= 200 for p in files_of(path))
    assert kept == "".join(lines[-len(kept.splitlines()):])  # the newest lines, whole and in order


def test_max_size_zero_never_rotates(tmp_path: Path) -> None:
    path = tmp_path / "vmqpy.log"
    log_file = logconfig.RotatingLogFile(path, max_size=0, count=1)
    for n in range(500):
        log_file.write(f"line {n}\n")
    log_file.close()
    assert files_of(path) == [path] and len(path.read_text().splitlines()) == 500


@pytest.mark.parametrize(("max_size", "count"), [(-1, 1), (100, 0), (0, -1)])
def test_bad_rotation_settings_are_refused(tmp_path: Path, max_size: int, count: int) -> None:
    with pytest.raises(ValueError, match="rotation"):
        logconfig.RotatingLogFile(tmp_path / "x.log", max_size, count)


@given(st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=400), st.integers(min_value=1, max_value=4))
def test_rotation_keeps_whole_lines_in_order_and_a_bounded_number_of_files(
    lengths: list[int], max_size: int, count: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "vmqpy.log"
        log_file = logconfig.RotatingLogFile(path, max_size, count)
        lines = [f"{n:03d}:" + "y" * length + "\n" for n, length in enumerate(lengths)]
        for line in lines:
            log_file.write(line)
        log_file.close()
        files = files_of(path)
        assert 1 <= len(files) <= count + 1
        kept = "".join(p.read_text() for p in files)
        assert kept == "".join(lines[-len(kept.splitlines()):])  # whole lines, the newest, in order
        assert lines[-1] in path.read_text()  # the last line is in the current file
        for p in files:
            content = p.read_text()
            assert content.endswith("\n")
            # a file holds more than max_size bytes only when it is one line longer than that
            assert len(content) <= max_size or len(content.splitlines()) == 1


def test_configure_writes_the_rotating_file(tmp_path: Path) -> None:
    path = tmp_path / "vmqpy.log"
    logconfig.configure("file", "info", file=path, max_size=300, count=1)
    for n in range(20):
        structlog.get_logger("test.rotate").info("a line", n=n)
    assert [p.name for p in files_of(path)] == ["vmqpy.log.1", "vmqpy.log"]
    assert "n=19" in path.read_text()
