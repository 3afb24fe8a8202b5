"""Sessions belong to their user (docs/security.md, "Sessions and client ids"): a real node with a real password
file (made by `vmqpy passwd`) and ACL file, paho-mqtt clients on MQTT 3.1.1 and 5.0.

* alice (ACL `secret/#`) has a persistent session `alice-phone` with 3 queued `secret/#` messages; eve (ACL `eve/#`,
  a valid password) connects with client id `alice-phone` and no clean start. With `session.foreign_user = clean`
  (the default) eve gets a clean session (CONNACK session present 0) and none of alice's messages, and alice's
  session is gone; with `refuse` eve is refused (0x87 / 5) and alice's session, live or offline, is untouched.
* `session.client_id_prefix = %u/`: a client id that does not start with the user's name is refused (0x85 / 2).
* A restart with a tightened ACL: a restored offline session's subscriptions the ACL no longer allows are dropped
  at the restore, so what is published before its client reconnects is not queued for it.

"Nothing delivered" is "the marker came first": a message published after the ones that must not arrive, on the
same publisher connection, is received before any of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.access_files import write_access_files
from tests.integration.clients import PahoClient, RawClient
from tests.integration.conftest import Broker, broker_kind
from tests.integration.session_owners import (
    ACL,
    PASSWORDS,
    alice_with_queue,
    client_of,
    clients,
    received_before_marker,
    session_present,
)
from tests.integration.started_brokers import started

pytestmark = [pytest.mark.integration, pytest.mark.vmqpy_only("vmqpy's session owners and ACL files")]

__all__ = ["clients", "started"]  # the fixtures this module's tests take


TIGHTENED_ACL = """\
user alice
topic alice/#

user eve
topic eve/#

user writer
topic #
"""


def start_node(workdir: Path, started: list[Broker], **extra: Any) -> Broker:
    acl_file, passwd = write_access_files(workdir, ACL, PASSWORDS)
    settings = {"acl_file": acl_file, "password_file": passwd, "auth.failed_login_delay": "100ms",
                "vmq_acl.acl_reload_interval": "0", **extra}
    broker = Broker(broker_kind(), workdir, settings)
    started.append(broker)
    return broker.start()


def refused_with(node: Broker, user: str, client_id: str, version: int) -> int:
    """The CONNACK code (as on the wire) `user` gets for a CONNECT with `client_id` and no clean start; the
    connection is closed after it."""
    client = RawClient(node.port, version=version)
    try:
        props = {"session_expiry_interval": 3600} if version == 5 else None
        ack = client.connect(client_id, clean=False, props=props, expect_rc=None, username=user,
                             password=PASSWORDS[user].encode())
        client.wait_closed()
        return int(ack.reason_code)
    finally:
        client.close()


@pytest.mark.parametrize("version", [4, 5])
def test_another_user_gets_a_clean_session_not_the_queue(tmp_path: Path, started: list[Broker],
                                                         clients: list[PahoClient], version: int) -> None:
    node = start_node(tmp_path, started)
    writer = alice_with_queue(node, clients, version, "alice-phone")
    eve = client_of(node, clients, "eve", version, "alice-phone", persistent=True)
    flags, _rc, _props = eve.connect()
    assert not session_present(flags), "eve must not resume alice's session"
    eve.subscribe("eve/#", qos=1)
    assert received_before_marker(eve, writer, "eve/marker") == [], "eve received alice's queued messages"
    eve.disconnect()
    eve.stop()
    # alice's old session ended: eve's clean one replaced it, and alice (now a foreign user to eve's) starts clean
    alice = client_of(node, clients, "alice", version, "alice-phone", persistent=True)
    flags, _rc, _props = alice.connect()
    assert not session_present(flags)
    alice.subscribe("alice/#", qos=1)
    assert received_before_marker(alice, writer, "alice/marker") == []


@pytest.mark.parametrize("version", [4, 5])
def test_refuse_keeps_the_owners_offline_session(tmp_path: Path, started: list[Broker], clients: list[PahoClient],
                                                 version: int) -> None:
    node = start_node(tmp_path, started, **{"session.foreign_user": "refuse"})
    alice_with_queue(node, clients, version, "alice-phone")
    assert refused_with(node, "eve", "alice-phone", version) == (0x87 if version == 5 else 5)
    alice = client_of(node, clients, "alice", version, "alice-phone", persistent=True)
    flags, _rc, _props = alice.connect()
    assert session_present(flags)
    got = sorted((m.topic, m.payload) for m in alice.collect(3))
    assert got == [(f"secret/{n}", f"for alice only {n}".encode()) for n in range(3)]


@pytest.mark.parametrize("version", [4, 5])
def test_refuse_does_not_kick_the_owners_live_client(tmp_path: Path, started: list[Broker],
                                                     clients: list[PahoClient], version: int) -> None:
    node = start_node(tmp_path, started, **{"session.foreign_user": "refuse"})
    alice = client_of(node, clients, "alice", version, "alice-phone", persistent=True)
    alice.connect()
    alice.subscribe("alice/#", qos=1)
    assert refused_with(node, "eve", "alice-phone", version) == (0x87 if version == 5 else 5)
    writer = client_of(node, clients, "writer", 5)
    writer.connect()
    assert received_before_marker(alice, writer, "alice/marker") == []  # still connected, still served
    assert alice.disconnects.empty()


def test_clean_takes_a_live_client_id_without_its_session(tmp_path: Path, started: list[Broker],
                                                          clients: list[PahoClient]) -> None:
    node = start_node(tmp_path, started)
    alice = client_of(node, clients, "alice", 5, "alice-phone", persistent=True)
    alice.connect()
    alice.subscribe("secret/#", qos=1)
    eve = client_of(node, clients, "eve", 5, "alice-phone", persistent=True)
    flags, _rc, _props = eve.connect()
    assert not session_present(flags)
    assert alice.disconnects_wait(5.0) is not None, "alice's connection was not taken over"
    writer = client_of(node, clients, "writer", 5)
    writer.connect()
    writer.publish("secret/late", b"for alice only", qos=1)
    eve.subscribe("eve/#", qos=1)
    assert received_before_marker(eve, writer, "eve/marker") == []  # alice's subscription was not inherited


@pytest.mark.parametrize("version", [4, 5])
def test_client_id_prefix_binds_client_ids_to_users(tmp_path: Path, started: list[Broker],
                                                    clients: list[PahoClient], version: int) -> None:
    node = start_node(tmp_path, started, **{"session.client_id_prefix": "%u/"})
    alice = client_of(node, clients, "alice", version, "alice/phone", persistent=True)
    alice.connect()
    assert refused_with(node, "eve", "alice/phone", version) == (0x85 if version == 5 else 2)
    assert alice.disconnects.empty()
    own = client_of(node, clients, "eve", version, "eve/phone")
    own.connect()


@pytest.mark.parametrize("version", [4, 5])
def test_a_restored_session_is_judged_by_the_tightened_acl(tmp_path: Path, started: list[Broker],
                                                           clients: list[PahoClient], version: int) -> None:
    node = start_node(tmp_path, started)
    alice = client_of(node, clients, "alice", version, "alice-phone", persistent=True)
    alice.connect()
    alice.subscribe("secret/#", qos=1)
    alice.subscribe("alice/#", qos=1)
    alice.disconnect()
    alice.stop()
    node.stop()
    (tmp_path / "vmq.acl").write_text(TIGHTENED_ACL)
    node.start()
    writer = client_of(node, clients, "writer", 5)
    writer.connect()
    for n in range(3):
        writer.publish(f"secret/{n}", f"no longer for alice {n}", qos=1)
    writer.publish("alice/marker", b"marker", qos=1)  # queued for alice after the secret ones
    alice = client_of(node, clients, "alice", version, "alice-phone", persistent=True)
    flags, _rc, _props = alice.connect()
    assert session_present(flags)
    assert [(m.topic, m.payload) for m in alice.collect(1)] == [("alice/marker", b"marker")]
