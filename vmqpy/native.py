"""Which build of the core runs: the compiled one (mypyc) or the pure-Python modules.

The modules of COMPILED are the pure core (codec, protocol machine, session, routing, retained, records) and the
connection's driver with the listeners' per-connection parts (docs/architecture.md, "The compiled core", says
which modules are left out and why). When a C compiler and Python's headers are present, installing the project
(setup.py) compiles them with mypyc (a small extension module beside each source, the code in one library per
room, `group_of`), and writes a manifest (`native_manifest.json`, next to this file) with a digest of every
source it compiled. The pure modules stay the reference and the fallback: `select()`, run
when the `vmqpy` package is imported, makes every module of COMPILED load from its `.py` file when

- VMQPY_PURE=1 is set,
- there is no manifest (a build without a compiler, or never built), or
- a compiled module's source no longer matches its digest, or its extension is missing (the build is stale: a
  source was edited or checked out after it; `make` builds again).

It is all or nothing: compiled modules call each other directly, so one module loaded from source beside the
others compiled would leave the compiled copy of it running. `BUILD` says which build runs and why; `vmqpy
--version`, `/status` and `/metrics` show it.

This module is never compiled, and imports only the standard library: setup.py reads COMPILED from it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

MANIFEST: Final = "native_manifest.json"
PURE_ENV: Final = "VMQPY_PURE"

# In the order of the rooms' libraries (group_of): driver and listeners, values (mqtt, sessions), core (machine,
# core). A module added here is compiled at the next `make`; test_native.py and the pure run of `make test` hold it.
COMPILED: Final[tuple[str, ...]] = (
    "vmqpy.broker.driver.ack_order",
    "vmqpy.broker.driver.connect_budget",
    "vmqpy.broker.driver.connect_flow",
    "vmqpy.broker.driver.connection",
    "vmqpy.broker.driver.linger",
    "vmqpy.broker.driver.live_connections",
    "vmqpy.broker.driver.pacing",
    "vmqpy.broker.driver.rate_limit",
    "vmqpy.broker.driver.subscribe_slices",
    "vmqpy.broker.driver.writer",
    "vmqpy.broker.listeners.address_limit",
    "vmqpy.broker.listeners.connect_pacing",
    "vmqpy.broker.listeners.handshake_prelude",
    "vmqpy.broker.listeners.listener_limit",
    "vmqpy.broker.listeners.listeners",
    "vmqpy.broker.listeners.preludes",
    "vmqpy.broker.listeners.proxy_protocol",
    "vmqpy.mqtt.decoder",
    "vmqpy.mqtt.encoder",
    "vmqpy.mqtt.packets",
    "vmqpy.mqtt.properties",
    "vmqpy.mqtt.reason_codes",
    "vmqpy.mqtt.topics",
    "vmqpy.mqtt.trie",
    "vmqpy.mqtt.wire",
    "vmqpy.sessions.handover",
    "vmqpy.sessions.message",
    "vmqpy.sessions.names",
    "vmqpy.sessions.owners",
    "vmqpy.sessions.parts",
    "vmqpy.sessions.records",
    "vmqpy.sessions.remote",
    "vmqpy.broker.machine.connection_state",
    "vmqpy.broker.machine.decisions",
    "vmqpy.broker.machine.negotiation",
    "vmqpy.broker.machine.outbound_rules",
    "vmqpy.broker.machine.protocol",
    "vmqpy.broker.machine.topic_aliases",
    "vmqpy.broker.core.acl_enforcement",
    "vmqpy.broker.core.broker",
    "vmqpy.broker.core.expiry",
    "vmqpy.broker.core.forward_wire",
    "vmqpy.broker.core.forwards",
    "vmqpy.broker.core.lineage",
    "vmqpy.broker.core.operator_actions",
    "vmqpy.broker.core.persistence",
    "vmqpy.broker.core.remote_ack",
    "vmqpy.broker.core.retained",
    "vmqpy.broker.core.route_feed",
    "vmqpy.broker.core.router",
    "vmqpy.broker.core.session",
    "vmqpy.broker.core.stalls",
    "vmqpy.broker.core.stored_will",
    "vmqpy.broker.core.sweeper",
    "vmqpy.broker.core.turn_budget",
    "vmqpy.broker.core.wills",
)

ROOT: Final = Path(__file__).resolve().parent.parent


def group_of(module: str) -> str:
    """The shared library a module of COMPILED goes into (setup.py): one per room, so that mypyc's runtime is
    linked once a room, and the rooms compile in parallel. Calls between rooms stay native."""
    if module.startswith(("vmqpy.broker.driver.", "vmqpy.broker.listeners.")):
        return "vmqpy_driver"
    if module.startswith(("vmqpy.broker.machine.", "vmqpy.broker.core.")):
        return "vmqpy_core"
    return "vmqpy_values"  # vmqpy.mqtt and vmqpy.sessions


def source_path(module: str, root: Path = ROOT) -> Path:
    """The `.py` file of a module of COMPILED, under the project (or site-packages) root."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_for(modules: Sequence[str], root: Path = ROOT) -> dict[str, str]:
    """What setup.py writes before it compiles: each module's source digest."""
    return {module: digest(source_path(module, root)) for module in modules}


@dataclass(frozen=True, slots=True)
class Build:
    compiled: bool
    reason: str  # why this build runs, for an operator: "mypyc, 8 modules", "VMQPY_PURE=1", "stale: ..."

    @property
    def kind(self) -> str:
        return "compiled" if self.compiled else "pure"

    def describe(self) -> str:
        return f"{self.kind} core ({self.reason})"


def _extension(module: str, root: Path) -> Path | None:
    base = source_path(module, root).with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.exists():
            return candidate
    return None


def pure_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """VMQPY_PURE set to anything but "" or "0": the pure modules, at install and at run time."""
    return environ.get(PURE_ENV, "") not in ("", "0")


def examine(environ: Mapping[str, str] = os.environ, root: Path = ROOT) -> Build:
    """Which build can run here, and why; reads the manifest and the sources, changes nothing."""
    if pure_requested(environ):
        return Build(False, f"{PURE_ENV}={environ[PURE_ENV]}")
    try:
        recorded = json.loads((root / "vmqpy" / MANIFEST).read_text())
    except FileNotFoundError:
        return Build(False, "not compiled: no C compiler at install, or not built")
    except (OSError, ValueError) as exc:
        return Build(False, f"unreadable {MANIFEST}: {exc}")
    digests = recorded.get("sources", {}) if isinstance(recorded, dict) else {}
    if set(digests) != set(COMPILED):
        return Build(False, "stale: the compiled modules' list changed since the build; run make")
    for module in COMPILED:
        if _extension(module, root) is None:
            return Build(False, f"not compiled: no extension for {module}")
        try:
            if digest(source_path(module, root)) != digests[module]:
                return Build(False, f"stale: {module} changed since the build; run make")
        except OSError as exc:
            return Build(False, f"unreadable source of {module}: {exc}")
    return Build(True, f"mypyc, {len(COMPILED)} modules")


class _FromSource:
    """Loads a `vmqpy` module from its `.py` file where an extension module beside it must not run: every module
    of the pure build, and in either build an extension left over from an earlier build's list."""

    def __init__(self, compiled: frozenset[str]) -> None:
        self.compiled = compiled  # the modules whose extensions may run

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("vmqpy.") or fullname in self.compiled:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or spec.origin.endswith(".py") or spec.submodule_search_locations:
            return spec
        source = Path(spec.origin).parent / (fullname.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(fullname, source) if source.exists() else spec


def select() -> Build:
    """Decides once per process (the `vmqpy` package's import): the compiled core, or every module of COMPILED
    from source. Returns what it decided."""
    build = examine()
    if not any(isinstance(finder, _FromSource) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FromSource(frozenset(COMPILED) if build.compiled else frozenset()))
    return build

