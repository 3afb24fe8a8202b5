"""Brokers a test starts by itself (with settings the broker fixtures do not take), all stopped at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import Broker


@pytest.fixture
def started() -> Iterator[list[Broker]]:
    """The brokers a test appends here are stopped at its end."""
    brokers: list[Broker] = []
    yield brokers
    for broker in brokers:
        broker.stop()
