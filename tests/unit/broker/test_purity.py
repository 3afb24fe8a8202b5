"""The broker's pure core (docs/architecture.md): the connection machine (protocol, its outbound rules, its
state, decisions, negotiation, topic aliases) and the session, routing, retained store, the core itself,
migration, holdback and the lineage take plain values and `now`, and hand packets to a Sink; only the driver
(connection.py and its halves), the listeners and storage touch the outside world."""

from __future__ import annotations

from tests.unit.purity import check, check_loaded

PURE = (
    "broker", "connection_state", "decisions", "holdback", "lineage", "migration", "negotiation", "outbound_rules",
    "protocol", "retained", "router", "session", "session_ports", "topic_aliases", "trie",
)
MODULES = [f"vmqpy/broker/{name}.py" for name in PURE]

# docs/architecture.md: migration and holdback "read the clock themselves where the cluster calls them without it"
# (registration and departure hand a session over, or a forward arrives, without a `now`): passing `now` down
# from the cluster's calls would remove these.
KNOWN = {
    "vmqpy/broker/migration.py": {"time": "reads the clock where the cluster moves a session without a `now`"},
    "vmqpy/broker/holdback.py": {"time": "times moved routes and late forwards where the cluster calls it without "
                                         "a `now`"},
}
# Modules that log through structlog load asyncio with it (structlog imports it), so the loading check leaves
# out those that log: broker, migration, holdback. The direct check above still holds them.
LOGGING = ("broker", "holdback", "migration")


def test_core_modules_import_no_io() -> None:
    check(MODULES, KNOWN)


def test_importing_the_core_loads_no_io() -> None:
    check_loaded([f"vmqpy.broker.{name}" for name in PURE if name not in LOGGING])
