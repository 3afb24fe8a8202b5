"""The one error of the node-process harness."""

from __future__ import annotations


class HarnessError(Exception):
    """A node could not be started, joined, read or partitioned (the harness failed, not the broker's contract)."""
