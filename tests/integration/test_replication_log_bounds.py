"""The replication log is bounded and private (issue 33, findings 7 and 8): a real node, one client rewriting one
retained topic thousands of times. The log rotates by size and keeps `count` compressed files, so the data
directory's log files stay under max_size x (count + 1); payloads are never in the log unless
`metadata.replication_log.values = on`; every file the node writes in its data directory is 0600, the directory
it creates 0700."""

from __future__ import annotations

import gzip
import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import unique
from tests.integration.conftest import Broker, broker_kind, free_port, public_metrics, wait_until
from tests.integration.replication_log_files import exposes, log_files, log_text, rewrite, rotation_done

pytestmark = pytest.mark.vmqpy_only("the replication log and the data directory's layout are vmqpy's")

MAX_SIZE = 64 * 1024
COUNT = 3
REWRITES = 3000
ROTATIONS = "vmqpy_replication_log_rotations_total"


def _modes(data_dir: Path) -> dict[str, str]:
    """Every entry under the data directory (and the directory itself) whose mode is not private: name -> mode."""
    wide: dict[str, str] = {}
    for path in [data_dir, *data_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        private = 0o700 if path.is_dir() else 0o600
        if mode != private:
            wide[str(path.relative_to(data_dir.parent))] = oct(mode)
    return wide


def _last_write(data_dir: Path, topic: str) -> dict[str, Any] | None:
    """The newest md_write line of `topic` in the live log."""
    for line in reversed((data_dir / "replication.log").read_bytes().splitlines()):
        record = json.loads(line)
        if record.get("event") == "md_write" and record.get("key") == ["", topic]:
            return record  # type: ignore[no-any-return]
    return None


def _fresh(tmp_path: Path, **extra: Any) -> Broker:
    """A broker whose data directory does not exist yet: the node creates it."""
    broker = Broker(broker_kind(), tmp_path / "node", extra)
    broker.data_dir.rmdir()
    return broker


def test_one_client_rewriting_a_retained_topic_cannot_fill_the_disk(tmp_path: Path, clients: Any) -> None:
    http = free_port()
    broker = _fresh(tmp_path, **{"metadata.replication_log.max_size": MAX_SIZE,
                                 "metadata.replication_log.count": COUNT,
                                 "listener.http.default": f"127.0.0.1:{http}", "metrics.public": "on"})
    broker.start()
    try:
        assert public_metrics(http, [ROTATIONS]) == {ROTATIONS: 0.0}  # exported from the start
        topic, marker = unique("replog/bound/"), f"PRIVATE-{uuid.uuid4().hex}".encode()
        rewrite(broker, clients, topic, marker, REWRITES)
        data_dir = broker.data_dir
        last = wait_until(lambda: _last_write(data_dir, topic), 10, what="the last write's line in the live log")
        wait_until(lambda: rotation_done(data_dir), 10, what="the last rotation compressed")
        files = log_files(data_dir)
        names = [p.name for p in files]
        assert len(names) == COUNT + 1 and names[0] == "replication.log", names  # rotated: replication.log.N.gz
        # ~12 MB of 4 KB values through a 64 KiB log: many more rotations than the files kept
        assert public_metrics(http, [ROTATIONS])[ROTATIONS] > COUNT
        sizes = {p.name: p.stat().st_size for p in files}
        assert sum(sizes.values()) <= MAX_SIZE * (COUNT + 1), sizes
        for p in files[1:]:
            assert sizes[p.name] < MAX_SIZE, sizes  # compressed
            assert 0 < len(log_text(p)) <= MAX_SIZE, p  # a rotated file held at most max_size
        for p in files:
            assert not exposes(log_text(p), marker), f"a payload in {p.name}"
        for p in files:
            for line in log_text(p).splitlines():
                record = json.loads(line)
                if record.get("event") == "md_write" and record.get("op") == "put":
                    assert "value" not in record, record
                    assert record["value_size"] > 4096 and len(record["value_sha256"]) == 16, record
        assert last["op"] == "put" and "value" not in last
        assert _modes(data_dir) == {}
    finally:
        broker.stop()
    assert _modes(broker.data_dir) == {}  # and after the stop (the final flush, the SQLite checkpoint)


def test_a_fresh_node_keeps_its_data_directory_private(tmp_path: Path, clients: Any) -> None:
    """After the start (nothing written yet) and after writes: the directory 0700, every file 0600."""
    broker = _fresh(tmp_path)
    broker.start()
    try:
        assert _modes(broker.data_dir) == {}
        topic, marker = unique("replog/mode/"), f"PRIVATE-{uuid.uuid4().hex}".encode()
        rewrite(broker, clients, topic, marker, 20)
        wait_until(lambda: _last_write(broker.data_dir, topic), 10, what="the last write's line")
        names = {p.name for p in broker.data_dir.iterdir()}
        assert {"broker.db", "replication.log"} <= names, names
        assert _modes(broker.data_dir) == {}
        assert not exposes((broker.data_dir / "replication.log").read_bytes(), marker)
    finally:
        broker.stop()


def test_files_an_older_version_left_readable_are_made_private(tmp_path: Path, clients: Any) -> None:
    """A data directory of a version before the umask: the node's own files become 0600 at the start."""
    broker = Broker(broker_kind(), tmp_path / "node", {})
    broker.start()
    broker.stop()
    data_dir = broker.data_dir
    for path in data_dir.iterdir():
        if path.name.startswith(("broker.db", "replication.log")):
            os.chmod(path, 0o644)
    (data_dir / "replication.log.1.gz").write_bytes(gzip.compress(b""))
    os.chmod(data_dir / "replication.log.1.gz", 0o644)
    broker.start()
    try:
        wait_until(lambda: not {p.name for p in data_dir.iterdir()
                                if stat.S_IMODE(p.stat().st_mode) & 0o077
                                and p.name.startswith(("broker.db", "replication.log"))},
                   10, what="the node's files private")
    finally:
        broker.stop()


def test_payloads_stay_out_of_the_log_by_default(tmp_path: Path, clients: Any) -> None:
    """The default configuration: a retained payload is logged as its size and digest, in no encoding."""
    broker = _fresh(tmp_path)
    broker.start()
    try:
        topic, marker = unique("replog/default/"), f"PRIVATE-{uuid.uuid4().hex}".encode()
        rewrite(broker, clients, topic, marker, 2)
        last = wait_until(lambda: _last_write(broker.data_dir, topic), 10, what="the last write's line")
        assert not exposes((broker.data_dir / "replication.log").read_bytes(), marker)
        assert "value" not in last and last["value_size"] > 4096, last
    finally:
        broker.stop()


def test_values_in_clear_only_when_asked(tmp_path: Path, clients: Any) -> None:
    broker = _fresh(tmp_path, **{"metadata.replication_log.values": "on"})
    broker.start()
    try:
        topic, marker = unique("replog/values/"), f"PRIVATE-{uuid.uuid4().hex}".encode()
        rewrite(broker, clients, topic, marker, 2)
        last = wait_until(lambda: _last_write(broker.data_dir, topic), 10, what="the last write's line")
        assert isinstance(last["value"], str) and "value_sha256" not in last, last
        assert exposes((broker.data_dir / "replication.log").read_bytes(), marker)
        assert _modes(broker.data_dir) == {}
    finally:
        broker.stop()
