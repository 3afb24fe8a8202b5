"""Fixtures shared by the broker's unit tests: an open `storage`, and `node_b`, one real Broker (node b of members
a, b, c) over an in-memory metadata store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.broker.fakes import MemoryMetadata
from vmqpy.broker.core.broker import Broker
from vmqpy.broker.core.persistence import SessionStore
from vmqpy.config import Config
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


@pytest.fixture
def node_b(tmp_path: Path) -> Iterator[tuple[Broker, MemoryMetadata]]:
    """Node b's Broker (members a, b, c) over its own storage and an in-memory metadata store."""
    storage = Storage(tmp_path / "b.db")
    storage.open()
    metadata = MemoryMetadata()
    broker = Broker(Config(nodename="b"), SessionStore(storage), metadata)
    broker.nodes = lambda: ["a", "b", "c"]
    try:
        yield broker, metadata
    finally:
        storage.close()
