"""The arrows of docs/architecture.md ("Which way the arrows run"), read off the sources with `ast`.

Every import of every module of vmqpy, dvv, admin, chaos and spark_analytics counts, wherever it is written: at the
top, inside a function, or under `if TYPE_CHECKING:` (a type is still a dependency). A module belongs to a room:
a package of vmqpy (`vmqpy.cluster`, `vmqpy.metadata`, `vmqpy.mqtt`, `vmqpy.replicas`, `vmqpy.sessions`), one of the
broker's rooms (`vmqpy.broker.core`, `.machine`, `.driver`, `.listeners`, `.access`, `.operations`), a top-level
module of vmqpy (each its own room: `vmqpy.node`, `vmqpy.config`, ...), or `dvv`, `admin`, `chaos`,
`spark_analytics`. The rules are about rooms:

- `dvv` and `vmqpy.mqtt` import nothing of the project; `vmqpy.sessions` (the values the broker and the cluster
  share) only `vmqpy.mqtt`; `vmqpy.metadata` only `dvv` and the node's storage; the cluster nothing of the
  broker or the replicas; the broker nothing of the cluster or the replicas, and each of its rooms only the rooms
  below it (listeners, driver, machine, core, then access and operations at the bottom);
- `admin`, `chaos` and `spark_analytics` import nothing of vmqpy;
- no package imports the composition modules (node.py, facade.py and the modules only they use);
- no cycle between rooms;
- node.py is the only module that imports every service (broker, cluster, metadata, replicas).

A failure names the file, the line and the rule. `KNOWN` lists the imports that break a rule today, each with the
reason; an entry that no longer breaks it fails the test too, so that the list only shrinks.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import admin.prometheus
import vmqpy.client_metrics
import vmqpy.cluster.policy

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("vmqpy", "dvv", "admin", "chaos", "spark_analytics")
SERVICES = frozenset({"vmqpy.broker", "vmqpy.cluster", "vmqpy.metadata", "vmqpy.replicas"})
# top-level modules that wire or present the node: no package may import them
COMPOSITION = frozenset({"vmqpy.node", "vmqpy.facade", "vmqpy.admin_rows", "vmqpy.node_tick", "vmqpy.hangup",
                         "vmqpy.__main__"})
PROJECT = frozenset(TOPS) | {"vmqpy"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def room(module: str) -> str:
    """The room of a module of the project: its package below vmqpy or the top-level module itself (both
    `vmqpy.<name>`), `vmqpy` for the package's own `__init__`, or its top (`dvv`, `admin`, ...)."""
    parts = module.split(".")
    if parts[:2] == ["vmqpy", "broker"] and len(parts) > 2:
        return ".".join(parts[:3])
    return parts[0] if parts[0] != "vmqpy" or len(parts) == 1 else f"vmqpy.{parts[1]}"


def service(room_name: str) -> str:
    """The service a room is part of: the broker's rooms are the broker."""
    return "vmqpy.broker" if room_name.startswith("vmqpy.broker") else room_name


def is_package(name: str) -> bool:
    return (ROOT.joinpath(*name.split(".")) / "__init__.py").is_file()


@dataclass(frozen=True, slots=True)
class Import:
    source: Path
    line: int
    target: str  # the module of the project imported

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


def imports_of(path: Path, text: str | None = None) -> list[Import]:
    """Every import of a module of the project in `path` (its `text`, when given), resolved to the module (not to
    a name in it)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[Import] = []
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.append(submodule if is_module(submodule) else base)
        found.extend(Import(path, node.lineno, target) for target in targets
                     if target.split(".")[0] in PROJECT)
    return found


def all_imports() -> list[Import]:
    return [found for top in TOPS for path in sorted((ROOT / top).rglob("*.py")) for found in imports_of(path)]


_BROKER_BASE = frozenset({"vmqpy.mqtt", "vmqpy.sessions"})
#: the rooms each package may import (besides itself and the top-level modules of vmqpy that are not COMPOSITION)
ALLOWED: dict[str, frozenset[str]] = {
    "dvv": frozenset(),
    "vmqpy.mqtt": frozenset(),
    "vmqpy.sessions": frozenset({"vmqpy.mqtt"}),
    "vmqpy.metadata": frozenset({"dvv"}),
    "vmqpy.cluster": frozenset({"dvv", "vmqpy.metadata", "vmqpy.mqtt", "vmqpy.sessions"}),
    "vmqpy.broker": frozenset(),
    "vmqpy.broker.access": _BROKER_BASE,
    "vmqpy.broker.operations": _BROKER_BASE,
    "vmqpy.broker.core": _BROKER_BASE | {"vmqpy.broker.access", "vmqpy.broker.operations"},
    "vmqpy.broker.machine": _BROKER_BASE | {"vmqpy.broker.core", "vmqpy.broker.access"},
    "vmqpy.broker.driver": _BROKER_BASE | {"vmqpy.broker.machine", "vmqpy.broker.core", "vmqpy.broker.access",
                                           "vmqpy.broker.operations"},
    "vmqpy.broker.listeners": _BROKER_BASE | {"vmqpy.broker.driver", "vmqpy.broker.machine", "vmqpy.broker.core",
                                              "vmqpy.broker.access", "vmqpy.broker.operations"},
    "vmqpy.replicas": frozenset({"vmqpy.broker.core", "vmqpy.cluster", "vmqpy.metadata", "vmqpy.mqtt",
                                 "vmqpy.sessions"}),
    "admin": frozenset(),
    "chaos": frozenset(),
    "spark_analytics": frozenset(),
}
#: the only top-level modules of vmqpy that vmqpy.metadata may use: the node's storage and the collector's pause
#: during bulk loads (its driver, service.py, loads and writes through them)
METADATA_TOP = frozenset({"vmqpy.storage", "vmqpy.bulk_load"})
#: rooms whose imports of vmqpy's top-level modules are rules too (they import nothing of vmqpy, or only METADATA_TOP)
CLOSED = frozenset({"dvv", "vmqpy.mqtt", "vmqpy.sessions", "vmqpy.metadata", "admin", "chaos", "spark_analytics"})

#: (file, the room it imports) -> why that import still breaks a rule
KNOWN: dict[tuple[str, str], str] = {
    ("admin/cli/settings.py", "vmqpy.runtime_settings"):
        "the help of `vmq-admin set` lists vmqpy.runtime_settings.RUNTIME (the keys that change at run time and "
        "when); it should come through the facade or live in admin (issue 37: the file was not in this change)",
}
for _composition in ("vmqpy.__main__", "vmqpy.node", "admin"):
    KNOWN[("chaos/zygote.py", _composition)] = (
        "the fork server imports what `python -m vmqpy` and `vmq-admin` import, once, so that each node or call it "
        "forks need not (docs/testing.md); it calls nothing of them but the entry point `runpy` runs in the child")
#: cycles between rooms that exist today, as the set of rooms in each, with the reason
KNOWN_CYCLES: dict[frozenset[str], str] = {
    frozenset({"vmqpy.cluster", "vmqpy.config", "vmqpy.config_schema"}):
        "vmqpy.config_schema imports vmqpy.cluster.discovery_plan.parse_peers to check cluster.discovery, and "
        "vmqpy.cluster.policy types its settings with vmqpy.config.Config (under TYPE_CHECKING): the parser belongs "
        "with the configuration's value parsers (vmqpy.config_values), or policy should take its own settings type",
}


def broken(found: Import) -> str | None:
    """The rule `found` breaks, or None."""
    source, target = room(module_name(found.source)), room(found.target)
    if source == target:
        return None
    if source in ALLOWED and target in COMPOSITION:
        return f"{source} imports {target}: no package imports a composition module (node.py wires them)"
    if source not in ALLOWED:
        return None  # a top-level module of vmqpy: held by the cycle and services rules
    if target in ALLOWED[source]:
        return None
    top_level = target == "vmqpy" or not is_package(target)
    if top_level and source not in CLOSED:
        return None
    if top_level and source == "vmqpy.metadata" and target in METADATA_TOP:
        return None
    may = ", ".join(sorted(ALLOWED[source])) or "nothing of the project"
    return f"{source} imports {target}: {source} may import {may} (docs/architecture.md)"


def test_imports_follow_the_arrows() -> None:
    failures = []
    seen_known = set()
    for found in all_imports():
        rule = broken(found)
        if rule is None:
            continue
        key = (str(found.source.relative_to(ROOT)), room(found.target))
        if key in KNOWN:
            seen_known.add(key)
            continue
        failures.append(f"{found.where}: {rule}")
    assert not failures, "imports against the rules:\n" + "\n".join(failures)
    stale = set(KNOWN) - seen_known
    assert not stale, f"these known exceptions no longer break a rule; remove them from KNOWN: {sorted(stale)}"


def room_graph() -> dict[str, dict[str, list[Import]]]:
    graph: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for found in all_imports():
        source, target = room(module_name(found.source)), room(found.target)
        if source != target:
            graph[source][target].append(found)
    return graph


def cycles(graph: Mapping[str, Mapping[str, list[Import]]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycle_between_rooms() -> None:
    graph = room_graph()
    failures = []
    seen_known = set()
    for component in cycles(graph):
        if frozenset(component) in KNOWN_CYCLES:
            seen_known.add(frozenset(component))
            continue
        edges = [f"  {a} -> {b}: {graph[a][b][0].where}" for a in component for b in component if b in graph[a]]
        failures.append("a cycle between " + ", ".join(component) + " (no package cycles):\n" + "\n".join(edges))
    assert not failures, "\n".join(failures)
    stale = set(KNOWN_CYCLES) - seen_known
    assert not stale, f"these known cycles are gone; remove them from KNOWN_CYCLES: {[sorted(c) for c in stale]}"


def test_the_cycle_check_finds_a_cycle() -> None:
    a = Import(ROOT / "vmqpy/a.py", 1, "vmqpy.b")
    graph = {"x": {"y": [a]}, "y": {"z": [a]}, "z": {"x": [a]}, "w": {"x": [a]}}
    assert cycles(graph) == [["x", "y", "z"]]


def test_only_node_py_imports_every_service() -> None:
    services_of: dict[str, set[str]] = defaultdict(set)
    where: dict[str, str] = {}
    for found in all_imports():
        target = service(room(found.target))
        if target in SERVICES:
            module = module_name(found.source)
            services_of[module].add(target)
            where.setdefault(module, found.where)
    knowing_all = sorted(module for module, services in services_of.items() if services == SERVICES)
    assert knowing_all == ["vmqpy.node"], (
        f"only vmqpy/node.py imports every service ({', '.join(sorted(SERVICES))}); these do too: "
        + ", ".join(f"{module} ({where[module]})" for module in knowing_all if module != "vmqpy.node"))


def test_the_rules_see_type_checking_function_and_relative_imports() -> None:
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from vmqpy.broker.core.session import Session\n"
        "def f() -> None:\n"
        "    from vmqpy.replicas import ledger\n"
        "from . import leader\n"
        "import vmqpy.node\n"
    )
    found = sorted(imports_of(ROOT / "vmqpy" / "cluster" / "example.py", text), key=lambda imp: imp.line)
    assert [(imp.line, imp.target) for imp in found] == [
        (3, "vmqpy.broker.core.session"), (5, "vmqpy.replicas.ledger"), (6, "vmqpy.cluster.leader"), (7, "vmqpy.node"),
    ]
    rules = [broken(imp) for imp in found]
    assert rules[2] is None  # its own room
    assert rules[0] is not None and "vmqpy.cluster imports vmqpy.broker" in rules[0]
    assert rules[1] is not None and "vmqpy.cluster imports vmqpy.replicas" in rules[1]
    assert rules[3] is not None and "composition" in rules[3]
    assert found[0].where == "vmqpy/cluster/example.py:3"


def test_a_top_level_module_is_a_rule_for_closed_rooms_only() -> None:
    assert broken(Import(ROOT / "vmqpy/broker/core/broker.py", 1, "vmqpy.config")) is None
    assert broken(Import(ROOT / "vmqpy/metadata/service.py", 1, "vmqpy.storage")) is None
    assert broken(Import(ROOT / "vmqpy/mqtt/codec.py", 1, "vmqpy.storage")) is not None
    assert broken(Import(ROOT / "admin/http.py", 1, "vmqpy.heap_trim")) is not None
    assert broken(Import(ROOT / "vmqpy/cluster/service.py", 1, "vmqpy.facade")) is not None


# admin imports nothing of vmqpy: the values it needs of the node are written in admin and checked here


def test_admins_connack_return_codes_are_the_nodes() -> None:
    assert admin.prometheus.CONNACK_RETURN_CODES == tuple(sorted({*vmqpy.client_metrics.CONNACK_LABELS.values(),
                                                                  "other"}))


def test_admins_netsplit_operations_are_the_nodes() -> None:
    assert admin.prometheus.NETSPLIT_OPERATIONS == tuple(sorted(vmqpy.cluster.policy.OPERATIONS))
