"""The metadata store's replica and exchange are SANS-I/O (docs/architecture.md): messages and `now` in, messages to
send and timers out. Their driver (service.py), the replication log's writer (replication_log.py) and the in-memory
network of the tests (memory_network.py) are not in the list."""

from __future__ import annotations

from tests.unit.purity import check, check_loaded

PURE = (
    "confirmations", "dot_index", "errors", "exchange", "fields", "hlc", "membership", "messages", "objects",
    "outputs", "peer_reports", "replica", "replica_clock", "replica_writes", "resolve", "rows", "scheduler", "state",
    "writeback",
)
MODULES = [f"vmqpy/metadata/{name}.py" for name in PURE]


def test_replica_modules_import_no_io() -> None:
    check(MODULES, {})


def test_importing_the_replica_loads_no_io() -> None:
    check_loaded([f"vmqpy.metadata.{name}" for name in PURE])
