"""What the soak reads from a running node every few seconds: its resident memory (/proc/PID/status VmRSS), its
open descriptors (/proc/PID/fd), the bytes of every file under its data directory (the database with its -wal
and -shm files, the replication log and its rotated files, small state files), and a Prometheus-style scrape of
GET /metrics with the node's API key, from which the event-loop stall counter (`vmqpy_loop_stalls`,
vmqpy/stall_watch.py) is taken."""

from __future__ import annotations

import os
import sqlite3
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["data_bytes", "descriptors", "files", "rss_bytes", "scrape", "stall_count", "tables"]

STALLS = "loop_stalls"  # vmqpy_loop_stalls; matched by its ending, whatever the prefix (prometheus_namespace)


def rss_bytes(pid: int) -> int:
    """VmRSS of process `pid`, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for {pid}")


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def files(directory: Path) -> dict[str, int]:
    """Every file under `directory` (relative path) and its size (a file removed while it is walked is left out)."""
    out: dict[str, int] = {}
    for root, _dirs, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            try:
                out[os.path.relpath(path, directory)] = os.stat(path).st_size
            except FileNotFoundError:
                continue
    return out


def data_bytes(directory: Path) -> tuple[int, int, int]:
    """The bytes of all files under `directory`; of which broker.db*; of which replication.log*."""
    sizes = files(directory)
    return (sum(sizes.values()), sum(v for k, v in sizes.items() if k.startswith("broker.db")),
            sum(v for k, v in sizes.items() if k.startswith("replication.log")))


def scrape(url: str, key: str, timeout: float = 10.0) -> str:
    """GET `url`/metrics as Prometheus does, with the node's API key as bearer token; the exposition text."""
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text: str = answer.read().decode()
    return text


def stall_count(text: str) -> int | None:
    """The stall counter in a scrape (None when the node does not export it)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name.endswith(STALLS) and not sample.name.endswith("_created"):
                return int(sample.value)
    return None


def tables(database: Path) -> dict[str, list[int]]:
    """Per logical table of a node's broker.db: [rows, bytes of keys and values], read-only (the node may run)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT tbl, count(*), sum(length(k) + length(v)) FROM kv GROUP BY tbl").fetchall()
        pages = conn.execute("PRAGMA page_count").fetchone()[0], conn.execute("PRAGMA freelist_count").fetchone()[0]
    finally:
        conn.close()
    out = {str(t): [int(n), int(b or 0)] for t, n, b in rows}
    out["(pages, free pages)"] = [int(pages[0]), int(pages[1])]
    return out
