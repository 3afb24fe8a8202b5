"""Lanes: how the integration and Spark tests run on several pytest-xdist workers at once without two tests sharing
a loopback address, a port, an iptables chain or a latency budget.

- **Modules** are never split: every test of a module runs on one worker (its work unit is the module, or a group
  of modules: `LaneScheduling`, xdist's `--dist loadscope` with our groups as scopes), so a module's shared broker
  or cluster is started once, and its tests keep their written order. (Not xdist's `loadgroup`: with pytest 9.2
  its `xdist_group` marks no longer group, since xdist 3.8 renames the items through an attribute pytest no longer
  reads.)
- **Free modules** use nodes on 127.0.0.1 with free ports only. Each worker hands out its own slice of the port
  space (`chaos.ports.use_slice`), so two workers never give one port to two nodes.
- **Cluster modules** (nodes built by tests/integration/cluster.py) run on the worker's own address block and
  iptables chain: worker `gwN` puts node i on 127.0.(N+1).(10+i) and partitions in the chain VMQPY-TEST-(N+1).
  Two workers' clusters never see each other's packets, and healing one never removes the other's rules.
- **Fixed modules** name addresses of 127.0.0.0/24 themselves (a client's source address, "n3@127.0.0.13" in an
  assertion) or run a chaos experiment. What they hold (`resources_of`: block 0 when they name an address of
  127.0.0.11-20, where their clusters then are, with the chain VMQPY-TEST; the chaos experiments' chain
  VMQPY-CHAOS; each other address they name) decides their group: fixed modules that hold something in common
  are one group and run one after another; the others run beside them. A fixed module that does not hold block 0
  puts its clusters on its worker's block, as a cluster module does. No worker's block overlaps 127.0.0.0/24.
- **Spark modules** (tests/spark) share one group, `spark`, so one worker starts the local SparkSession they
  share; the end-to-end one reads the short chaos experiment's logs and joins the chaos group (the experiment
  runs once, for it and the chaos test).
- **Serial modules** count a well-behaved client's round trips while a hostile one attacks, or run a benchmark:
  a second test beside them would be measured too. They carry the marker `serial` and run alone after the
  parallel pass (`make test`: `-m "not serial"`, then `-m serial`).

Which lane and group a module is in follows from its code and that of the helper modules it imports
(`sources_of`): a new module that names an address in a string, or runs a chaos experiment, is placed without
anybody remembering to list it. Only `SERIAL` is a list: whether a
test measures is not in its code's strings.
"""

from __future__ import annotations

import ast
import ipaddress
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

from xdist.scheduler import LoadScopeScheduling

FIXED: Final = "fixed"
CLUSTER: Final = "cluster"
FREE: Final = "free"
SPARK: Final = "spark"

#: Modules whose assertions count a well-behaved client's round trips during an attack, or that run a benchmark.
SERIAL: Final = frozenset({
    "test_hostile_clients",
    "test_login_budget",
    "test_turn_budget",
    "test_subscribe_slices",
    "test_bench_loadgen",
    "test_bench_suite",
})

BLOCK0_FIRST_HOST: Final = "127.0.0.11"
BLOCK0_LAST: Final = 20  # block 0 is 127.0.0.11-20: the fixed modules' clusters and the addresses they name there
BLOCK0_CHAIN: Final = "VMQPY-TEST"
BLOCK0: Final = "block0"
CHAOS: Final = "chaos"  # the chaos experiments' chain, VMQPY-CHAOS, and their base addresses

# An address of 127.0.0.0/24 other than 127.0.0.1 (and 127.0.0.0, a network), in a string of the code.
_FIXED_ADDRESS = re.compile(r"127\.0\.0\.(?:[2-9]|[1-9]\d|1\d\d|2[0-4]\d|25[0-4])(?!\d)")
# Runs a chaos experiment: the VMQPY-CHAOS chain, the experiment's base address.
_CHAOS = re.compile(r"short_chaos_run|\"-m\", \"chaos\"")
_CLUSTER = re.compile(r"from tests\.integration\.cluster import|\b(?:pair|cluster)\s*:\s*list")
# A helper module of the tests (not a test module) imported by a module: what it names, the module names too.
_HELPER_IMPORT = re.compile(r"^\s*from (tests\.(?:integration|spark)(?:\.[a-z_0-9]+)+) import", re.MULTILINE)


def _code_strings(source: str) -> Iterator[str]:
    """The string constants of a module's code (f-string parts included), without its docstrings: an address in
    a docstring or a comment places nothing."""
    tree = ast.parse(source)
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def resources_of(source: str, addresses: bool = True) -> frozenset[str]:
    """What a module of text `source` holds that another module's tests must not use at the same time: BLOCK0, CHAOS,
    and each other address of 127.0.0.0/24 it names (with `addresses`; a Spark test's addresses are data).
    Empty for a module that holds nothing fixed."""
    held: set[str] = set()
    for text in _code_strings(source) if addresses else ():
        for address in _FIXED_ADDRESS.findall(text):
            held.add(BLOCK0 if int(address.rsplit(".", 1)[1]) in range(11, BLOCK0_LAST + 1) else address)
    if _CHAOS.search(source):
        held.add(CHAOS)
    return frozenset(held)


def sources_of(path: Path) -> list[str]:
    """The text of the module at `path` and of every helper module of tests/ it imports, directly or through
    another helper (a module's addresses may be written in the helper it calls)."""
    root = next((parent.parent for parent in path.parents if parent.name == "tests"), None)
    texts: list[str] = []
    pending, seen = [path], {path}
    while pending:
        text = pending.pop().read_text()
        texts.append(text)
        if root is None:
            continue
        for name in _HELPER_IMPORT.findall(text):
            base = root.joinpath(*name.split("."))
            for helper in (base.with_suffix(".py"), base / "__init__.py"):
                if helper.exists() and not helper.name.startswith("test_") and helper not in seen:
                    seen.add(helper)
                    pending.append(helper)
    return texts


def _held(path: Path) -> tuple[frozenset[str], bool]:
    """What the module at `path` holds (its helpers included) and whether it starts clusters."""
    texts = sources_of(path)
    addresses = path.parent.name != "spark"
    held = frozenset().union(*(resources_of(text, addresses) for text in texts))
    return held, any(_CLUSTER.search(text) for text in texts)


def module_resources(path: Path) -> frozenset[str]:
    return _held(path)[0]


def _lane(held: frozenset[str], clusters: bool) -> str:
    """Where a module's clusters go: block 0 only for the modules that hold it."""
    if BLOCK0 in held:
        return FIXED
    return CLUSTER if held or clusters else FREE


def lane_of(source: str, addresses: bool = True) -> str:
    """The lane of a module whose text is `source` (its helper modules left out)."""
    return _lane(resources_of(source, addresses), bool(_CLUSTER.search(source)))


def module_lane(path: Path) -> str:
    """The lane of the module at `path`, its helper modules included."""
    return _lane(*_held(path))


def groups_of(paths: Iterable[Path]) -> dict[Path, str]:
    """The xdist group of each test module: fixed modules that hold a resource in common share a group (named
    `fixed-` and block0, chaos or its first address), the Spark modules share `spark`, every other module is a
    group of its own."""
    paths = sorted(set(paths))
    held = {path: module_resources(path) for path in paths}
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for resources in held.values():
        first, *rest = sorted(resources) or [""]
        for other in rest:
            parent[root(other)] = root(first)
    members: dict[str, set[str]] = {}
    for resources in held.values():
        for name in resources:
            members.setdefault(root(name), set()).add(name)
    groups: dict[Path, str] = {}
    for path in paths:
        if held[path]:
            names = members[root(next(iter(held[path])))]
            groups[path] = f"{FIXED}-{next((n for n in (BLOCK0, CHAOS) if n in names), min(names))}"
        elif path.parent.name == "spark":
            groups[path] = SPARK
        else:
            groups[path] = f"{path.parent.name}/{path.name}"
    return groups


@cache
def _laned_modules(root: Path) -> list[Path]:
    """The integration and Spark test modules under the rootdir `root`."""
    return [path for folder in ("integration", "spark") for path in (root / "tests" / folder).glob("test_*.py")]


def _groups_under(root: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The group of every integration and Spark test module under the rootdir `root`, keyed by its path as a nodeid
    writes it (tests/integration/test_x.py), and the rank of each group (`rank_of`)."""
    paths = _laned_modules(root)
    groups = groups_of(paths)
    ranks: dict[str, int] = {}
    for path, group in groups.items():
        ranks[group] = min(ranks.get(group, len(RANKS)), rank_of(group, module_lane(path)))
    return {str(path.relative_to(root)): group for path, group in groups.items()}, ranks


#: The order work units are sent in: the long groups of modules that must run one after another first (so that
#: none of them starts last and keeps one worker busy while the others have finished), then the modules that
#: start clusters (a few long tests each), then the single-node modules (many short ones).
RANKS: Final = ("groups", CLUSTER, FREE)


def rank_of(group: str, lane: str) -> int:
    if group.startswith(f"{FIXED}-") or group == SPARK:
        return 0
    return RANKS.index(lane) if lane in RANKS else 1


class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
    """xdist's scheduling by scope, with a test's scope its module's group (`groups_of`): a group is one work unit,
    run by one worker; units are handed out in the order of RANKS, the most tests first within a rank."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._groups, self._ranks = _groups_under(Path(str(config.rootpath)))
        self._ordered = False

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return self._groups.get(module, module)

    def _rank(self, scope: str) -> int:
        """A unit's place in RANKS; the pure tests' modules (tests/unit, tests/sim: no group) come after everything
        else, a module a unit (a simulation module's tests share the histories and state spaces it computes once per
        process; a test a unit made every worker compute them, 165 s more CPU in one run), where they fill the CPU
        the integration tests' end leaves (handed out with the long groups instead, they slowed those groups' Spark
        and chaos set-ups: 8 min 19 s for the main pass against 7 min 21 s). Of the pure modules the simulations
        (tests/sim: a few tests of up to a minute and a half) go before tests/unit (thousands of short tests), so
        that the pass ends on short units rather than one worker playing a simulation while the others are done."""
        if scope in self._ranks:
            return self._ranks[scope]
        return len(RANKS) if scope.startswith("tests/sim/") else len(RANKS) + 1

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:
            self._ordered = True
            units = sorted(self.workqueue.items(),
                           key=lambda unit: (self._rank(unit[0]), -len(unit[1])))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)


@dataclass(frozen=True)
class Worker:
    """This process's place among the xdist workers: `index` from 0, `count` workers (1, index 0: no xdist)."""
    index: int
    count: int

    @classmethod
    def current(cls) -> Worker:
        name = os.environ.get("PYTEST_XDIST_WORKER", "")
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
        if not name.startswith("gw"):
            return cls(0, 1)
        return cls(int(name[2:]), max(count, 1))

    @property
    def parallel(self) -> bool:
        return self.count > 1

    def first_host(self, lane: str) -> str:
        """Node 1's address for a module of `lane`: block 0 for fixed modules and outside xdist, else the worker's
        own block 127.0.(index+1).11."""
        if lane == FIXED or not self.parallel:
            return BLOCK0_FIRST_HOST
        return str(ipaddress.ip_address(BLOCK0_FIRST_HOST) + 256 * (self.index + 1))

    def chain(self, lane: str) -> str:
        """The iptables chain of a module of `lane`'s partitions."""
        if lane == FIXED or not self.parallel:
            return BLOCK0_CHAIN
        return f"{BLOCK0_CHAIN}-{self.index + 1}"


@dataclass
class Placement:
    """Where the module now running puts its nodes (set by an autouse module fixture of the integration
    conftest.py before any other fixture of the module starts a node)."""
    first_host: str = BLOCK0_FIRST_HOST
    chain: str = BLOCK0_CHAIN


PLACEMENT = Placement()


def serial_paths(root: Path) -> list[str]:
    """The files of the SERIAL modules under the rootdir `root`, relative to it: the serial run collects only these."""
    return sorted(str(path.relative_to(root)) for path in _laned_modules(root) if path.stem in SERIAL)


def place(lane: str, worker: Worker | None = None) -> Placement:
    """Point PLACEMENT at `lane`'s block and chain on this worker, and return it."""
    worker = worker or Worker.current()
    PLACEMENT.first_host = worker.first_host(lane)
    PLACEMENT.chain = worker.chain(lane)
    return PLACEMENT


if __name__ == "__main__":  # `python -m tests.lanes serial-paths` (the Makefile's serial run)
    import sys

    if sys.argv[1:] != ["serial-paths"]:
        sys.exit("usage: python -m tests.lanes serial-paths")
    print(" ".join(serial_paths(Path.cwd())))
