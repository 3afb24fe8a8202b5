"""The chaos runner reads every replication log a node kept: rotated, compressed and live, oldest first."""

from __future__ import annotations

import gzip
from pathlib import Path

from chaos.runner import _log_text, replication_logs


def test_rotated_and_compressed_logs_are_read_oldest_first(tmp_path: Path) -> None:
    (tmp_path / "replication.log").write_text("live\n")
    (tmp_path / "replication.log.0").write_text("pending\n")
    (tmp_path / "replication.log.1.gz").write_bytes(gzip.compress(b"newest rotated\n"))
    (tmp_path / "replication.log.10.gz").write_bytes(gzip.compress(b"oldest\n"))
    (tmp_path / "replication.log.2.gz").write_bytes(gzip.compress(b"older\n"))
    (tmp_path / "replication.log.0.gz.tmp").write_bytes(b"being written")
    (tmp_path / "node.log").write_text("not a replication log\n")
    files = replication_logs(tmp_path)
    assert [p.name for p in files] == ["replication.log.10.gz", "replication.log.2.gz", "replication.log.1.gz",
                                       "replication.log.0", "replication.log"]
    assert "".join(_log_text(p) for p in files) == "oldest\nolder\nnewest rotated\npending\nlive\n"


def test_a_compressed_log_cut_short_reads_as_far_as_it_goes(tmp_path: Path) -> None:
    cut = tmp_path / "replication.log.1.gz"
    cut.write_bytes(gzip.compress(b"".join(b"line %d\n" % i for i in range(5000)))[:-200])
    text = _log_text(cut)
    assert text.startswith("line 0\nline 1\n") and 0 < text.count("\n") < 5000
    (tmp_path / "replication.log.2.gz").write_bytes(b"not gzip")
    assert _log_text(tmp_path / "replication.log.2.gz") == ""
    assert replication_logs(tmp_path / "missing") == []
