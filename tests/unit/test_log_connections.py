"""`log.connections`: logconfig.connection_lines() is on only when the setting is on and info is logged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vmqpy import logconfig


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    logconfig.set_connection_lines(True)
    logconfig.set_level("info")


@pytest.mark.parametrize(("on", "level", "logged"), [
    (True, "debug", True),
    (True, "info", True),
    (True, "warning", False),
    (True, "error", False),
    (False, "debug", False),
    (False, "info", False),
    (False, "warning", False),
])
def test_connection_lines(on: bool, level: str, logged: bool) -> None:
    logconfig.set_connection_lines(on)
    logconfig.set_level(level)
    assert logconfig.connection_lines() is logged
    assert logconfig.level() == level  # the setting leaves the level alone
