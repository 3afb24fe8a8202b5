"""What a node process holds, read from /proc: its resident set, its open descriptors."""

from __future__ import annotations

import os


def rss(pid: int) -> int:
    """The resident set of process `pid`, bytes (VmRSS of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def descriptors(pid: int) -> int:
    """How many descriptors process `pid` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))
