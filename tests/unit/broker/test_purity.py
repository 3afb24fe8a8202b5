"""The broker's pure rooms (docs/architecture.md): every module of `vmqpy/broker/machine/` (the connection machine:
protocol, its outbound rules, its state, decisions, negotiation, topic aliases) and of `vmqpy/broker/core/` (the
sessions, routing, retained store, wills, forwards, the core itself, migration, holdback, lineage, the bulk lane)
takes plain values and `now` and hands packets to a Sink; only the driver, the listeners and storage touch the
outside world. A module added to either room is held by this test from its first line."""

from __future__ import annotations

from pathlib import Path

from tests.unit.purity import ROOT, check, check_loaded

PURE_ROOMS = ("vmqpy/broker/machine", "vmqpy/broker/core")
MODULES = sorted(str(path.relative_to(ROOT)) for room in PURE_ROOMS for path in (ROOT / room).glob("*.py"))

# docs/architecture.md: migration and holdback "read the clock themselves where the cluster calls them without it"
# (registration and departure hand a session over, or a forward arrives, without a `now`): passing `now` down
# from the cluster's calls would remove these. The bulk lane measures its budget in CPU-bound time.
KNOWN = {
    "vmqpy/broker/core/migration.py": {"time": "reads the clock where the cluster moves a session without a `now`"},
    "vmqpy/broker/core/holdback.py": {"time": "times moved routes and late forwards where the cluster calls it "
                                              "without a `now`"},
    "vmqpy/broker/core/forwards.py": {"time": "stamps a forward batch's send time where the cluster's driver calls "
                                              "it without a `now`"},
    "vmqpy/broker/core/turn_budget.py": {"time": "the bulk lane's budget of a loop turn is measured time "
                                                 "(`perf_counter`, injectable: the tests pass their own clock)"},
}
# Modules that log through structlog load asyncio with it (structlog imports it: acl_enforcement, broker,
# forwards, holdback, migration, turn_budget and those that import them), and the journal types its storage with
# vmqpy.storage.Storage (SQLite: persistence), so the loading check leaves those out. The direct check above still
# holds them.
LOADS_IO = frozenset({"acl_enforcement", "broker", "forwards", "holdback", "migration", "operator_actions",
                      "persistence", "route_feed", "sweeper", "turn_budget"})


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_the_pure_rooms_import_no_io() -> None:
    check(MODULES, KNOWN)


def test_importing_the_pure_rooms_loads_no_io() -> None:
    check_loaded([module_name(path) for path in MODULES
                  if Path(path).stem not in LOADS_IO and Path(path).stem != "__init__"])
