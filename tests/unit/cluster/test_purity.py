"""The cluster's link machines are SANS-I/O (docs/architecture.md, vmqpy/cluster/__init__.py): framing, the
handshake, frame tags, the link's heartbeats and silence, the per-peer outbox, the dial back-off, forwarding's
numbering, the leader's locks and ranking, the cluster view, the discovery plan and the leave's table. Their drivers
(tcp.py, connection.py, dialer.py, ...) and the services are not in the list."""

from __future__ import annotations

from tests.unit.purity import check, check_loaded

PURE = (
    "backoff", "discovery_plan", "errors", "forwarding", "frame_auth", "framing", "handover_batches", "handshake",
    "leader", "leaving", "link", "outbox", "registry", "view",
)
MODULES = [f"vmqpy/cluster/{name}.py" for name in PURE]


def test_link_machines_import_no_io() -> None:
    check(MODULES, {})


def test_importing_the_link_machines_loads_no_io() -> None:
    check_loaded([f"vmqpy.cluster.{name}" for name in PURE])
