"""Three test cluster nodes started but not joined: the tests join them themselves (or not)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ClusterNode


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    """Nodes 1, 2 and 3 started in the test's tmp_path, not joined; stopped after."""
    started: list[ClusterNode] = []
    try:
        for i in (1, 2, 3):
            started.append(ClusterNode(i, tmp_path).start())
        yield started
    finally:
        for node in started:
            node.stop()
