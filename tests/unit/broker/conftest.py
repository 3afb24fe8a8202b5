"""Fixtures shared by the broker's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vmqpy.storage import Storage


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    """An open node storage in a temporary directory, closed after the test."""
    store = Storage(tmp_path / "b.db")
    store.open()
    try:
        yield store
    finally:
        store.close()
