"""The replication log's rotation and privacy: the pure decisions as tables, then the file work on a temporary
directory (a real ReplicationLog, real gzip files, its worker thread)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from vmqpy.metadata.replication_log import (
    ReplicationLog,
    Rotated,
    maintain,
    parse_rotated,
    partial_name,
    retention_plan,
    rotated_name,
    should_rotate,
)

BASE = Path("/data/replication.log")


@pytest.mark.parametrize(
    ("size", "incoming", "max_size", "rotate"),
    [
        (0, 10, 100, False),  # an empty file takes any turn's lines, even more than max_size
        (0, 500, 100, False),
        (90, 10, 100, False),  # exactly max_size: still fits
        (91, 10, 100, True),
        (100, 1, 100, True),
        (10**9, 1, 0, False),  # max_size 0: never
    ],
)
def test_should_rotate(size: int, incoming: int, max_size: int, rotate: bool) -> None:
    assert should_rotate(size, incoming, max_size) is rotate


def _r(*specs: str) -> list[Rotated]:
    """"3" is replication.log.3, "3z" replication.log.3.gz."""
    return [Rotated(int(s.rstrip("z")), s.endswith("z")) for s in specs]


@pytest.mark.parametrize(
    ("present", "count", "deletes", "compress"),
    [
        ([], 5, [], []),
        (["1"], 5, [], [1]),  # just rotated
        (["1z", "2z", "3"], 5, [], [3]),
        (["1z", "2z", "3z", "4z"], 3, ["1z"], []),  # the oldest past count
        (["4z", "5", "6", "7"], 2, ["4z", "5"], [6, 7]),  # the worker fell behind: delete before compressing
        (["3", "3z"], 5, ["3"], []),  # a crash after the .gz was complete, before its source was deleted
        (["1z", "2"], 0, ["1z", "2"], []),  # count 0: no rotated file kept
    ],
)
def test_retention_plan(present: list[str], count: int, deletes: list[str], compress: list[int]) -> None:
    assert retention_plan(_r(*present), count) == (_r(*deletes), compress)


@pytest.mark.parametrize(
    ("name", "rotated"),
    [
        ("replication.log.1.gz", Rotated(1, True)),
        ("replication.log.12.gz", Rotated(12, True)),
        ("replication.log.3", Rotated(3, False)),
        ("replication.log.3.gz.tmp", None),  # being written
        ("replication.log.0", None),
        ("replication.log.01.gz", None),
        ("replication.log", None),
        ("other.log.1.gz", None),
    ],
)
def test_parse_rotated(name: str, rotated: Rotated | None) -> None:
    assert parse_rotated(BASE, name) == rotated


def test_names() -> None:
    assert rotated_name(BASE, 3) == Path("/data/replication.log.3.gz")
    assert rotated_name(BASE, 3, compressed=False) == Path("/data/replication.log.3")
    assert partial_name(BASE, 3) == Path("/data/replication.log.3.gz.tmp")
    assert parse_rotated(BASE, rotated_name(BASE, 7).name) == Rotated(7, True)


def _log(tmp_path: Path, **kw: object) -> ReplicationLog:
    log = ReplicationLog(tmp_path / "replication.log", "n1@127.0.0.1", wall_ns=lambda: 1, **kw)  # type: ignore[arg-type]
    log.open()
    return log


def _write(log: ReplicationLog, i: int, value: bytes | None = b"v" * 100) -> None:
    log.write("md_write", [1, i, "n1"], {"prefix": "retain", "key": ["", f"t/{i}"], "dot": ["n1", i],
                                         "op": "put" if value is not None else "delete", "value": value,
                                         "context": {}})


def _lines(tmp_path: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for path in tmp_path.iterdir():
        if path.name.endswith(".gz"):
            out += [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
        elif path.name.startswith("replication.log"):
            out += [json.loads(line) for line in path.read_bytes().splitlines()]
    return out


def test_values_are_size_and_digest_unless_asked(tmp_path: Path) -> None:
    value = b"secret payload"
    private = _log(tmp_path / "off")
    _write(private, 1, value)
    _write(private, 2, None)
    private.close()
    put, delete = _lines(tmp_path / "off")
    assert "value" not in put and put["value_size"] == len(value)
    assert put["value_sha256"] == hashlib.sha256(value).hexdigest()[:16]
    assert delete["value"] is None and "value_size" not in delete
    clear = _log(tmp_path / "on", values=True)
    _write(clear, 1, value)
    clear.close()
    [line] = _lines(tmp_path / "on")
    assert line["value"] == "c2VjcmV0IHBheWxvYWQ=" and "value_sha256" not in line


def test_a_value_in_any_bytes_type_is_digested(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _write(log, 1, bytearray(b"secret"))  # type: ignore[arg-type]
    _write(log, 2, memoryview(b"secret"))  # type: ignore[arg-type]
    log.close()
    assert [(line.get("value"), line["value_size"]) for line in _lines(tmp_path)] == [(None, 6), (None, 6)]


def test_rotation_keeps_count_compressed_files_and_every_line_of_them(tmp_path: Path) -> None:
    log = _log(tmp_path, max_size=4096, count=3)
    for i in range(200):  # ~250 bytes a line: ~12 rotations
        _write(log, i)
        log.flush()  # one loop turn per write
    log.wait_rotated(10)
    rotated = [r for p in tmp_path.iterdir() if (r := parse_rotated(log.path, p.name)) is not None]
    n = log.rotations
    assert n > 3 and sorted(rotated) == [Rotated(n - 2, True), Rotated(n - 1, True), Rotated(n, True)]
    assert len(list(tmp_path.iterdir())) == 4  # and the live file
    sizes = [len(gzip.decompress(rotated_name(log.path, r.seq).read_bytes())) for r in rotated]
    assert all(0 < s <= 4096 for s in sizes), sizes
    assert log.path.stat().st_size <= 4096
    dots = sorted(line["dot"][1] for line in _lines(tmp_path))  # type: ignore[index]
    assert dots == list(range(200 - len(dots), 200)), "the kept files hold the newest lines, without a gap"
    assert {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {0o600}


def test_the_loop_rotates_on_while_the_worker_is_behind(tmp_path: Path) -> None:
    """The loop never waits for the compression: the live file stays under max_size; the worker, when it runs,
    deletes the oldest first, then compresses the rest."""
    log = _log(tmp_path, max_size=1024, count=2)
    log._worker = ThreadPoolExecutor(max_workers=1)
    gate = Future[None]()
    log._worker.submit(gate.result)  # the worker busy elsewhere
    for i in range(40):
        _write(log, i)
        log.flush()
        assert log.size <= 1024
    plain = sorted(r for p in tmp_path.iterdir() if (r := parse_rotated(log.path, p.name)) is not None)
    assert len(plain) == log.rotations > 3 and not any(r.compressed for r in plain)
    gate.set_result(None)
    log.close()
    kept = sorted(r for p in tmp_path.iterdir() if (r := parse_rotated(log.path, p.name)) is not None)
    assert kept == [Rotated(log.rotations - 1, True), Rotated(log.rotations, True)]


def test_count_zero_keeps_no_rotated_file(tmp_path: Path) -> None:
    log = _log(tmp_path, max_size=1024, count=0)
    for i in range(40):
        _write(log, i)
        log.flush()
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["replication.log"]


@pytest.mark.parametrize("crash", ["before_compression", "mid_compression", "after_compression"])
def test_a_rotation_interrupted_by_a_crash_is_finished_at_the_next_open(tmp_path: Path, crash: str) -> None:
    """What a kill -9 can leave: a rotated file not compressed yet, with half its .gz.tmp, or with its complete
    .gz. The next open finishes the work, losing and repeating no line."""
    base = tmp_path / "replication.log"
    rotated_name(base, 1).write_bytes(gzip.compress(b'{"old":1}\n'))
    rotated_name(base, 2, compressed=False).write_bytes(b'{"mid":1}\n')
    if crash == "mid_compression":
        partial_name(base, 2).write_bytes(b"half a gzip stream")
    elif crash == "after_compression":
        rotated_name(base, 2).write_bytes(gzip.compress(b'{"mid":1}\n'))
    log = _log(tmp_path, max_size=1 << 20, count=5)
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "replication.log", "replication.log.1.gz", "replication.log.2.gz"]
    assert gzip.decompress(rotated_name(base, 2).read_bytes()) == b'{"mid":1}\n'
    assert gzip.decompress(rotated_name(base, 1).read_bytes()) == b'{"old":1}\n'
    assert log._seq == 3, "the next rotated file gets a new name"


def test_an_existing_wide_file_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "replication.log"
    path.write_bytes(b'{"schema":1}\n')
    os.chmod(path, 0o644)
    rotated_name(path, 1).write_bytes(gzip.compress(b""))
    os.chmod(rotated_name(path, 1), 0o644)
    log = _log(tmp_path, max_size=1 << 20)
    log.close()
    assert {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {0o600}
    assert path.read_bytes() == b'{"schema":1}\n' and log.size == len(b'{"schema":1}\n')


def test_maintain_keeps_the_newest_count(tmp_path: Path) -> None:
    base = tmp_path / "replication.log"
    for i in range(1, 6):
        rotated_name(base, i).write_bytes(gzip.compress(b"x"))
    partial_name(base, 1).write_bytes(b"left by a crash")
    maintain(base, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replication.log.4.gz", "replication.log.5.gz"]


def test_one_long_turn_fills_several_files_each_under_max_size(tmp_path: Path) -> None:
    """A flood handled in one loop turn: its lines are split at max_size, not written to one file."""
    log = _log(tmp_path, max_size=2048, count=100)
    for i in range(100):
        _write(log, i)
    log.flush()
    log.close()
    rotated = [r for p in tmp_path.iterdir() if (r := parse_rotated(log.path, p.name)) is not None]
    assert len(rotated) == log.rotations > 5
    for r in rotated:
        assert 0 < len(gzip.decompress(rotated_name(log.path, r.seq).read_bytes())) <= 2048
    assert 0 < log.path.stat().st_size <= 2048
    assert sorted(line["dot"][1] for line in _lines(tmp_path)) == list(range(100))  # type: ignore[index]


def test_a_line_larger_than_max_size_gets_a_file_of_its_own(tmp_path: Path) -> None:
    log = _log(tmp_path, max_size=100, count=5, values=True)
    _write(log, 1, b"x" * 500)
    _write(log, 2, b"y" * 500)
    log.flush()
    log.close()
    assert log.rotations == 1 and len(_lines(tmp_path)) == 2


def test_a_long_turn_does_not_hold_more_than_a_mebibyte_of_lines(tmp_path: Path) -> None:
    log = _log(tmp_path, values=True)
    for i in range(1000):
        _write(log, i, b"z" * 4096)  # ~5.6 KB a line
        assert log._buffered < (1 << 20) + 8192
    assert log.lines_written > 0  # written before any flush of the turn
    log.close()
