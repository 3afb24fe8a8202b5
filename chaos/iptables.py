"""Partitions with iptables: DROP rules between two loopback addresses, both ways, in a chain of our own that
INPUT and/or OUTPUT jump to for loopback traffic only. Each user has its own chain (the chaos experiments
`VMQPY-CHAOS`, the integration tests `VMQPY-TEST`), so removing one never touches the other's rules. A chain is
flushed and removed in teardown (and at exit, in case the harness dies first); every removal loop is bounded.

The argument lists are built by pure functions; `Chain` runs them. `IptablesNetwork` is the chaos runner's
network backend on top of one chain."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from chaos.ports import loopback

CHAIN = "VMQPY-CHAOS"  # the chaos experiments' chain
JUMP_REMOVALS = 20  # at most this many copies of one jump are deleted (a crashed run may have left some)
IPTABLES_TIMEOUT_S = 30


@dataclass(frozen=True)
class Hook:
    """A built-in chain that jumps to ours for loopback traffic: `-i lo` on INPUT, `-o lo` on OUTPUT."""
    builtin: str
    interface_flag: str


INPUT = Hook("INPUT", "-i")
OUTPUT = Hook("OUTPUT", "-o")


def jump_args(action: str, hook: Hook, chain: str) -> list[str]:
    """Insert (`-I`) or delete (`-D`) the jump from `hook` to `chain` for loopback traffic."""
    return [action, hook.builtin, hook.interface_flag, "lo", "-j", chain]


def create_args(chain: str, hooks: Iterable[Hook]) -> list[list[str]]:
    """Create `chain` and jump to it from every hook."""
    return [["-N", chain], *(jump_args("-I", hook, chain) for hook in hooks)]


def drop_args(chain: str, a: str, b: str) -> list[list[str]]:
    """DROP every packet between addresses `a` and `b`, either way (loopback addresses only)."""
    a, b = loopback(a), loopback(b)
    return [["-A", chain, "-s", src, "-d", dst, "-j", "DROP"] for src, dst in ((a, b), (b, a))]


def flush_args(chain: str) -> list[str]:
    return ["-F", chain]


def delete_args(chain: str) -> list[list[str]]:
    """Empty `chain` and delete it (its jumps must be gone first)."""
    return [flush_args(chain), ["-X", chain]]


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("iptables") or "/usr/sbin/iptables"
    return subprocess.run([exe, "-w", *args], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT_S,
                          check=check)


def available() -> str | None:
    """None when iptables can be used here, else why not."""
    if os.geteuid() != 0:
        return "iptables needs root"
    if shutil.which("iptables") is None and not os.path.exists("/usr/sbin/iptables"):
        return "iptables is not installed"
    probe = _run(["-L", "OUTPUT", "-n"], check=False)
    if probe.returncode != 0:
        return f"iptables does not work here: {probe.stderr.strip()}"
    return None


_removed_at_exit: set[Chain] = set()


@dataclass(frozen=True)
class Chain:
    """One user's chain: `install`, then `drop_between` pairs of addresses, `flush` to heal, `remove`."""
    name: str
    hooks: tuple[Hook, ...]

    def install(self) -> None:
        """Create the chain and its jumps, removing first whatever a previous run left of them."""
        self.remove()
        for args in create_args(self.name, self.hooks):
            _run(args)
        if self not in _removed_at_exit:
            _removed_at_exit.add(self)
            atexit.register(self.remove)

    def drop_between(self, a: str, b: str) -> None:
        for args in drop_args(self.name, a, b):
            _run(args)

    def flush(self, check: bool = True) -> None:
        """Remove every DROP rule: the partition heals."""
        _run(flush_args(self.name), check=check)

    def remove(self) -> None:
        """Delete our jumps and our chain (idempotent; never fails)."""
        for hook in self.hooks:
            for _ in range(JUMP_REMOVALS):
                if _run(jump_args("-D", hook, self.name), check=False).returncode != 0:
                    break
        for args in delete_args(self.name):
            _run(args, check=False)

    @contextmanager
    def installed(self) -> Iterator[Chain]:
        """The chain, installed for the block and removed after it, however the block ends."""
        self.install()
        try:
            yield self
        finally:
            self.remove()


CHAOS_CHAIN = Chain(CHAIN, (INPUT, OUTPUT))


class IptablesNetwork:
    """The chaos runner's iptables backend: cuts between node indexes in the chain VMQPY-CHAOS, jumped to from
    INPUT and OUTPUT."""

    name = "iptables"

    def __init__(self, hosts: list[str], chain: Chain = CHAOS_CHAIN) -> None:
        self.hosts = [loopback(h) for h in hosts]
        self.chain = chain
        self._installed = False

    def setup(self) -> None:
        self.chain.install()
        self._installed = True

    def cut(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Replace the current cut by `pairs` (node indexes): no packet between them, either way."""
        self.chain.flush()
        for a, b in pairs:
            self.chain.drop_between(self.hosts[a], self.hosts[b])

    def heal(self) -> None:
        self.chain.flush(check=False)

    def teardown(self) -> None:
        if self._installed:
            self.chain.remove()
            self._installed = False
