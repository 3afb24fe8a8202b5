"""vmqpy.sessions holds the values the broker and the cluster share: plain data, no I/O, no clock."""

from __future__ import annotations

from tests.unit.purity import ROOT, check, check_loaded

MODULES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "vmqpy" / "sessions").glob("*.py"))


def test_session_values_import_no_io() -> None:
    assert len(MODULES) >= 7
    check(MODULES, {})


def test_importing_the_session_values_loads_no_io() -> None:
    check_loaded([path.removesuffix(".py").replace("/", ".") for path in MODULES])
