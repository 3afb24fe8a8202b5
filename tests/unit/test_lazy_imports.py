"""A node that serves no HTTP API and no WebSocket listener never loads aiohttp (about 12-15 MiB of its empty
RSS: docs/performance.md, "Memory"): the admin API's server (admin.http) and the WebSocket listeners
(vmqpy.broker.listeners.websocket) import it when they start. Nor orjson (the replication log's first line loads
it), ctypes or tempfile (the heap trim's first call loads ctypes; it no longer searches for libc, which needed
tempfile): 2.4 MiB together. Checked in a fresh interpreter, on the build that runs and on the pure modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAZY = "('aiohttp', 'admin.http', 'orjson', 'ctypes', 'tempfile')"  # top-level names the probe must not find
PROBE = ("LAZY = " + LAZY + "; import sys, vmqpy.node, vmqpy.broker.listeners.listeners, "
         "vmqpy.broker.listeners.websocket, vmqpy; "
         "print(vmqpy.BUILD.kind, sorted(m for m in sys.modules if m.split('.')[0] in LAZY))")


@pytest.mark.parametrize("pure", [False, True], ids=["build", "pure"])
def test_the_node_loads_no_aiohttp_orjson_or_ctypes_until_a_part_needs_it(pure: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VMQPY_PURE"}
    if pure:
        env["VMQPY_PURE"] = "1"
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=env, check=True)
    kind, _, loaded = done.stdout.strip().partition(" ")
    assert loaded == "[]", f"{kind} build: loaded at import: {loaded}"
    if pure:
        assert kind == "pure"
