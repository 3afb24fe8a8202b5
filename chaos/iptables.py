"""The iptables backend: DROP rules between node addresses in the chain VMQPY-CHAOS, jumped to from INPUT and
OUTPUT for loopback traffic only. `teardown` removes the jumps and the chain; the runner calls it in a
`finally`, on SIGINT/SIGTERM and at exit, so no rule outlives a run."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from collections.abc import Iterable

from chaos.cluster import loopback

CHAIN = "VMQPY-CHAOS"
JUMPS = (("INPUT", "-i"), ("OUTPUT", "-o"))


def available() -> str | None:
    """None when the backend can be used, else why not."""
    if os.geteuid() != 0:
        return "iptables needs root"
    if shutil.which("iptables") is None and not os.path.exists("/usr/sbin/iptables"):
        return "iptables is not installed"
    probe = _run("-L", "OUTPUT", "-n", check=False)
    if probe.returncode != 0:
        return f"iptables does not work here: {probe.stderr.strip()}"
    return None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("iptables") or "/usr/sbin/iptables"
    return subprocess.run([exe, "-w", *args], capture_output=True, text=True, timeout=30, check=check)


class IptablesNetwork:
    name = "iptables"

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = [loopback(h) for h in hosts]
        self._installed = False

    def setup(self) -> None:
        teardown()
        _run("-N", CHAIN)
        for chain, flag in JUMPS:
            _run("-I", chain, flag, "lo", "-j", CHAIN)
        self._installed = True
        atexit.register(teardown)

    def cut(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Replace the current cut by `pairs` (node indexes): no packet between them, either way."""
        _run("-F", CHAIN)
        for a, b in pairs:
            for src, dst in ((self.hosts[a], self.hosts[b]), (self.hosts[b], self.hosts[a])):
                _run("-A", CHAIN, "-s", src, "-d", dst, "-j", "DROP")

    def heal(self) -> None:
        _run("-F", CHAIN, check=False)

    def teardown(self) -> None:
        if self._installed:
            teardown()
            self._installed = False


def teardown() -> None:
    """Remove our jumps and our chain (idempotent; bounded)."""
    for chain, flag in JUMPS:
        for _ in range(20):
            if _run("-D", chain, flag, "lo", "-j", CHAIN, check=False).returncode != 0:
                break
    _run("-F", CHAIN, check=False)
    _run("-X", CHAIN, check=False)
