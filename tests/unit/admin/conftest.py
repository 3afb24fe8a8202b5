"""Fixtures of the admin tests: a key store with the node key, a FakeNode, and the API served on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from admin.command import Context
from admin.http import ApiServer, start_api
from admin.keys import KeyStore, ensure_node_key
from tests.unit.admin.fakes import FakeNode


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def node_key(data_dir: Path) -> str:
    return ensure_node_key(data_dir)


@pytest.fixture
def keys(data_dir: Path, node_key: str, fake: FakeNode) -> KeyStore:
    return KeyStore(data_dir, fake)


@pytest.fixture
def fake() -> FakeNode:
    node = FakeNode()
    node.sessions = [
        {"client_id": "sensor-1", "is_online": True, "node": "vmq1@127.0.0.1", "peer_host": "127.0.0.1",
         "peer_port": 50001, "user": None, "subscriptions": [["cmd/sensor-1/#", 1]]},
        {"client_id": "sensor-2", "is_online": False, "node": "vmq1@127.0.0.1", "peer_host": "127.0.0.1",
         "peer_port": 50002, "user": "bob", "subscriptions": [["cmd/+/all", 0], ["cmd/sensor-2", 2]]},
    ]
    node.subscriptions = [
        {"client_id": "sensor-1", "topic": "cmd/sensor-1/#", "qos": 1},
        {"client_id": "sensor-2", "topic": "cmd/+/all", "qos": 0},
    ]
    node.retained = [{"topic": "sensors/a/temp", "payload": "21.5"}, {"topic": "sensors/b/hum", "payload": "40"}]
    node.metric_values = {"mqtt_publish_received": 12, "router_matches_local": 7, "queue_seconds_avg": 0.25}
    node.metadata = [
        {"prefix": "subscriptions", "key": "sensor-1", "value": "[...]"},
        {"prefix": "retain", "key": "sensors/a/temp", "value": "21.5"},
    ]
    return node


@pytest.fixture
def ctx(fake: FakeNode, keys: KeyStore) -> Context:
    """The handlers' context on the FakeNode, for commands run without HTTP (`fakes.run`)."""
    return Context(fake, keys)


@pytest.fixture
async def api(fake: FakeNode, keys: KeyStore) -> AsyncIterator[ApiServer]:
    server = await start_api(fake, keys, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop()
