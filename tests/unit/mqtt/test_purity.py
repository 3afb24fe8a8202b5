"""vmqpy.mqtt is SANS-I/O (docs/architecture.md): bytes in, packets out, no socket, no event loop, no clock."""

from __future__ import annotations

from tests.unit.purity import ROOT, check, check_loaded

MODULES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "vmqpy" / "mqtt").glob("*.py"))


def test_mqtt_modules_import_no_io() -> None:
    assert len(MODULES) >= 9
    check(MODULES, {})


def test_importing_mqtt_loads_no_io() -> None:
    check_loaded([path.removesuffix(".py").replace("/", ".") for path in MODULES])
