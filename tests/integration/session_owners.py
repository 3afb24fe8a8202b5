"""Users whose sessions belong to them (docs/security.md, "Sessions and client ids"): their passwords and ACL,
their paho clients, alice's persistent session with messages queued, and "nothing delivered" told by a marker
that comes first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.clients import PahoClient, unique
from tests.integration.conftest import Broker

PASSWORDS = {"alice": "alice-secret", "eve": "eve-secret", "writer": "writer-secret"}

ACL = """\
user alice
topic secret/#
topic alice/#

user eve
topic eve/#

user writer
topic #
"""


def client_of(node: Broker, clients: list[PahoClient], user: str, version: int, client_id: str = "",
              persistent: bool = False) -> PahoClient:
    """A paho client of `user` (with its password), not connected yet; `clients` stops it at the end."""
    client = PahoClient(node.port, version=version, client_id=client_id or unique(f"{user}-"), clean=not persistent,
                        session_expiry=3600 if persistent and version == 5 else None)
    client.client.username_pw_set(user, PASSWORDS[user])
    clients.append(client)
    return client


def session_present(flags: Any) -> bool:
    """The CONNACK's session present flag, whichever form paho gives the flags in."""
    return bool(flags.session_present if hasattr(flags, "session_present") else flags["session present"])


def alice_with_queue(node: Broker, clients: list[PahoClient], version: int, client_id: str) -> PahoClient:
    """alice's persistent session `client_id` subscribed to secret/# (QoS 1), offline, with 3 messages queued;
    the writer that published them (connected, for markers)."""
    alice = client_of(node, clients, "alice", version, client_id, persistent=True)
    alice.connect()
    alice.subscribe("secret/#", qos=1)
    alice.disconnect()
    alice.stop()
    writer = client_of(node, clients, "writer", 5)
    writer.connect()
    for n in range(3):
        writer.publish(f"secret/{n}", f"for alice only {n}", qos=1)
    return writer


def received_before_marker(reader: PahoClient, writer: PahoClient, topic: str) -> list[tuple[str, bytes]]:
    """What `reader` (subscribed to `topic`'s filter) receives before a marker `writer` publishes on `topic`."""
    writer.publish(topic, b"marker", qos=1)
    return [(m.topic, m.payload) for m in reader.until_marker(topic)]


@pytest.fixture
def clients() -> Iterator[list[PahoClient]]:
    """The paho clients of a test (`client_of` appends them), stopped at its end."""
    made: list[PahoClient] = []
    yield made
    for client in made:
        client.stop()
